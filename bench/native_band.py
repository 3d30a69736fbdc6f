"""Would hand-written loops bring the band pass down to 0.12x the base forward? `relabel` against the same band pass in C++.

`relabel` re-decides the band pixels in about a hundred torch operations, each reading and writing its arrays once
(`bench/post_stages.py`, `bench/speed.py --profile`); `bench/compiled_band.py` found that torch.compile's fusion of a dense
version does not beat it. This script writes the per-pixel steps as loops in C++, compiled at start by
`torch.utils.cpp_extension.load_inline` (needs a C++ compiler and ninja; PyTorch keeps the build in its extensions folder):

- each band pixel's top-N of the base probabilities (an insertion into a list of N, the lower class first among equals);
- its nearest candidate (the candidates' distances from `relabel`'s own `_distances`, infinite for a class without a
  prototype, and the base weight's log-probabilities computed by torch, so that the values compared are `relabel`'s;
  one product and one difference in float32, no fused multiply-add);
- the passes of the grey-weighted vote at the `_lattice` points, skipping the pixels whose points hold one label and,
  after the first pass, those near none of the pixels the pass before changed.

The arg-max and its probability check, the band (OpenCV's dilation) and the distance maps stay as `relabel` has them. On
the CamVid-like bands of `bench/post_stages.py` (every `--every`-th CamVid test label map, a stand-in base and embedding,
the settings the CamVid benchmark calibrated) it checks that both give the same labels on every image, then times, in
one loop, the base forward, `relabel`, the loops' band pass and its parts, 2 threads (the loops split the band pixels
over torch's thread count with std::thread).

usage: .venv/bin/python bench/native_band.py [--every 23] [--repeats 5] [--record]
"""
import argparse, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import main_recorded

_SMALL_N = r"""
template <class F> static void split(int64_t n, int64_t grain, const F& f) {   // f(begin, end, part) on up to torch's thread count of parts
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n / std::max<int64_t>(grain, 1)));
  const int64_t step = (n + T - 1) / T; std::vector<std::thread> ts;
  for (int64_t t = 1; t < T; t++) ts.emplace_back([&f, t, step, n] { f(t * step, std::min(n, (t + 1) * step), t); });
  f(0, std::min(n, step), 0);
  for (auto& t : ts) t.join();
}
#define SMALL_N(n, f, ...) switch (n) { case 2: f<2>(__VA_ARGS__); break; case 3: f<3>(__VA_ARGS__); break; \
  case 4: f<4>(__VA_ARGS__); break; case 5: f<5>(__VA_ARGS__); break; default: f<0>(__VA_ARGS__); }
"""
_TOP_N = r"""
template <int N> static void top_n_of(const float* R, int64_t M, int64_t S, const int64_t* Li, int64_t K, int64_t n_, float* V, uint8_t* I) {
  const int64_t n = N ? N : n_;                               // N: the count known when compiled, so that v and c stay in registers
  split(K, 8192, [&](int64_t k0, int64_t k1, int64_t) {
    float v[16]; int c[16];
    for (int64_t k = k0; k < k1; k++) {
      int64_t have = 0;
      for (int64_t m = 0; m < M; m++) {
        const float x = R[m * S + Li[k]];
        int64_t j = have;                                    // after every score >= x: the lower class first among equals
        while (j > 0 && x > v[j - 1]) j--;
        if (j >= n) continue;
        for (int64_t t = std::min(have, n - 1); t > j; t--) { v[t] = v[t - 1]; c[t] = c[t - 1]; }
        v[j] = x; c[j] = (int)m; if (have < n) have++;
      }
      for (int64_t j = 0; j < n; j++) { V[j * K + k] = v[j]; I[j * K + k] = (uint8_t)c[j]; }
    }
  });
}

std::vector<torch::Tensor> top_n(torch::Tensor rows, torch::Tensor lin, int64_t n) {  // rows (M,S) float32, at the columns lin (K,)
  const int64_t K = lin.size(0);
  auto vals = torch::empty({n, K}, torch::kFloat32); auto cand = torch::empty({n, K}, torch::kUInt8);
  SMALL_N(n, top_n_of, rows.data_ptr<float>(), rows.size(0), rows.size(1), lin.data_ptr<int64_t>(), K, n, vals.data_ptr<float>(), cand.data_ptr<uint8_t>());
  return {vals, cand};
}
"""

_NEAREST = r"""
void nearest(torch::Tensor out, torch::Tensor lin, torch::Tensor cand, torch::Tensor d, torch::Tensor logp, double alpha) {
  const int64_t K = lin.size(0), n = cand.size(0);        // out: flat labels; d (n,K) as `_distances` gives them; logp (n,K), read only when alpha != 0
  uint8_t* O = out.data_ptr<uint8_t>(); const int64_t* Li = lin.data_ptr<int64_t>(); const uint8_t* C = cand.data_ptr<uint8_t>();
  const float* D = d.data_ptr<float>(); const float* LP = alpha != 0 ? logp.data_ptr<float>() : nullptr; const float a = (float)alpha;
  split(K, 16384, [&](int64_t k0, int64_t k1, int64_t) {
    for (int64_t k = k0; k < k1; k++) {
      int64_t j = 0; float best = 0;
      for (int64_t i = 0; i < n; i++) {
        float s = D[i * K + k];
        if (LP) { const float t = a * LP[i * K + k]; s = s - t; }
        if (i == 0) best = s; else if (s < best) { j = i; best = s; }
      }
      O[Li[k]] = C[j * K + k];
    }
  });
}
"""

_VOTES = r"""
template <int N> static void grey_pass(uint8_t* O, const uint8_t* now, const uint8_t* near, const int64_t* Li, int64_t K, const uint8_t* C,
                                       int64_t n_, const bool* miss, const uint8_t* G, const int32_t* w, const std::vector<int64_t>& offs,
                                       int64_t H, int64_t W, std::vector<int64_t>& changed) {   // changed: the pixels this pass changes
  const int64_t n = N ? N : n_, L = offs.size(), r = std::max(-offs.front(), offs.back());   // offs run from -r to r
  std::vector<int64_t> d(L * L);                              // the lattice points' offsets in the flat image
  for (int64_t u = 0; u < L; u++) for (int64_t v = 0; v < L; v++) d[u * L + v] = offs[u] * W + offs[v];
  std::vector<std::vector<int64_t>> part(at::get_num_threads());
  split(K, 8192, [&](int64_t k0, int64_t k1, int64_t pt) {
  int64_t inside[64]; int c[16]; int32_t s[16];
  for (int64_t k = k0; k < k1; k++) {
    const int64_t i = Li[k];
    if (!near[i]) continue;                                   // none of its lattice points changed in the pass before
    const int64_t x = i % W, y = (i / W) % H;
    const int64_t* dq = d.data(); int64_t P = L * L;
    if (y < r || y >= H - r || x < r || x >= W - r) {        // near the border: the lattice points inside the image
      P = 0;
      for (int64_t u = 0; u < L; u++) for (int64_t v = 0; v < L; v++)
        if (y + offs[u] >= 0 && y + offs[u] < H && x + offs[v] >= 0 && x + offs[v] < W) inside[P++] = d[u * L + v];
      dq = inside;
    }
    const int l0 = now[i + dq[0]]; int64_t p = 1;
    while (p < P && now[i + dq[p]] == l0) p++;
    if (p == P) continue;                                     // one label at every lattice point: the vote keeps it
    for (int64_t t = 0; t < n; t++) { c[t] = C[t * K + k]; s[t] = 0; }
    const int g0 = 255 - G[i];
    for (p = 0; p < P; p++) {
      const int64_t q = i + dq[p]; const int l = now[q], wt = w[G[q] + g0];
      for (int64_t t = 0; t < n; t++) s[t] += c[t] == l ? wt : 0;
    }
    int pick = c[0]; int64_t best = (int64_t)s[0] * 2 + (c[0] == now[i]);
    for (int64_t t = 1; t < n; t++) {                         // `_pick`: twice the score, one more for the pixel's label; the first wins
      const int64_t v = miss[c[t]] ? -1 : (int64_t)s[t] * 2 + (c[t] == now[i]);
      if (v > best) { pick = c[t]; best = v; }
    }
    if (pick != now[i]) { O[i] = (uint8_t)pick; part[pt].push_back(i); }
  }
  });
  for (auto& p : part) changed.insert(changed.end(), p.begin(), p.end());
}

void grey_vote(torch::Tensor out, torch::Tensor lin, torch::Tensor cand, torch::Tensor missing, torch::Tensor grey, torch::Tensor weights,
               std::vector<int64_t> offs, int64_t passes) {      // out, grey (B,H,W) uint8; weights (511,) int32; offs: the lattice
  const int64_t H = out.size(1), W = out.size(2), L = offs.size();
  auto now = out.clone();
  std::vector<uint8_t> near(out.numel(), 1);                  // the first pass may change any band pixel
  std::vector<int64_t> changed;
  for (int64_t pass = 0; pass < passes; pass++) {
    if (pass) {                                               // the pixels with a changed lattice point: those the last pass changed, seen from -offs
      std::fill(near.begin(), near.end(), 0); now.copy_(out);
      for (const int64_t j : changed) {
        const int64_t x = j % W, y = (j / W) % H;
        for (int64_t u = 0; u < L; u++) for (int64_t v = 0; v < L; v++)
          if (y - offs[u] >= 0 && y - offs[u] < H && x - offs[v] >= 0 && x - offs[v] < W) near[j - offs[u] * W - offs[v]] = 1;
      }
      changed.clear();
    }
    SMALL_N(cand.size(0), grey_pass, out.data_ptr<uint8_t>(), now.data_ptr<uint8_t>(), near.data(), lin.data_ptr<int64_t>(), lin.size(0),
            cand.data_ptr<uint8_t>(), cand.size(0), missing.data_ptr<bool>(), grey.data_ptr<uint8_t>(), weights.data_ptr<int32_t>(), offs, H, W, changed);
  }
}
"""


_BINDINGS = """
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("top_n", &top_n); m.def("nearest", &nearest); m.def("grey_vote", &grey_vote); }
"""
SOURCE = "#include <torch/extension.h>\n#include <ATen/Parallel.h>\n#include <thread>\n" + _SMALL_N + _TOP_N + _NEAREST + _VOTES + _BINDINGS

def build():
    "The loops, compiled (seconds it took)."
    import hashlib, logging
    logging.getLogger('torch.utils.cpp_extension').setLevel(logging.ERROR)       # not its "No CUDA runtime is found" on a CPU
    from torch.utils.cpp_extension import load_inline
    t = time.perf_counter()
    ext = load_inline('bench_band_' + hashlib.sha256(SOURCE.encode()).hexdigest()[:12], cpp_sources=SOURCE, extra_cflags=['-O3', '-ffp-contract=off'])
    return ext, time.perf_counter() - t

def native_relabel(ext, emb, probs, protos, s, levels, parts=None):
    "`relabel(emb, probs, protos, s, levels=levels)` for one image of probabilities, a grey-weighted vote and at most 16 candidates, with the loops; `parts` (a dict) collects each step's seconds."
    import brefine.inference as inf
    tick = [time.perf_counter()]
    def lap(name):
        if parts is not None: t = time.perf_counter(); parts[name] = parts.get(name, 0.) + t - tick[0]; tick[0] = t
    (base, top1, is_p), (B, M, H, W) = inf._base_answer(probs), probs.shape
    assert is_p and B == 1 and s.grey is not None and s.vote and s.top_n <= 16, 'the loops cover the CamVid settings on probabilities'
    lap('answer')
    lin = inf._band_pixels(base, top1, is_p, s); lap('band')
    top_p, cand = ext.top_n(probs.reshape(M, -1), lin, s.top_n); lap('top-N')
    vecs = protos.vectors.to(emb.dtype)
    missing, sq = (~protos.present).contiguous(), (vecs * vecs).sum(1)
    maps = inf._prototype_scores(emb, vecs, sq) if M <= emb.shape[1] else None
    d = inf._distances(emb, maps, vecs, sq, missing, inf._pixels(lin, B, H, W), (H, W), cand.long())[0].float().contiguous()   # relabel's own
    lap('distances')
    out = base.clone()
    ext.nearest(out, lin, cand, d, top_p.clamp_min(1e-12).log() if s.alpha else top_p, s.alpha); lap('nearest')
    ext.grey_vote(out, lin, cand, missing, levels.contiguous(), inf._grey_weights(float(s.grey)), list(inf._lattice(s.vote)), s.passes); lap('vote')
    return out.long()

def run(a):
    import torch
    import brefine.inference as inf
    from benchmark import base_model
    from post_stages import cases
    torch.set_num_threads(2)
    ext, build_s = build()
    data, protos = cases(a.every, 0.7)
    s = inf.RefineSettings(top_n=3, radius=18, tau=None, alpha=0.1, vote=11, grey=10.)
    base, img = base_model(n_classes=11, pretrained=False).eval(), torch.zeros(1, 3, 360, 480)
    ts, parts = {k: [] for k in ('base', 'relabel', 'loops')}, {}
    with torch.inference_mode():
        for e, p, lv in data:
            if not torch.equal(native_relabel(ext, e, p, protos, s, lv), inf.relabel(e, p, protos, s, levels=lv)): raise SystemExit('the loops give other labels')
        for _ in range(a.repeats):
            for e, p, lv in data:
                t = time.perf_counter(); inf.relabel(e, p, protos, s, levels=lv); ts['relabel'].append(time.perf_counter() - t)
                t = time.perf_counter(); native_relabel(ext, e, p, protos, s, lv, parts); ts['loops'].append(time.perf_counter() - t)
            t = time.perf_counter(); base(img); ts['base'].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) * 1e3 for k, v in ts.items()}
    n = a.repeats * len(data)
    print(f'band pass on {len(data)} CamVid test label maps (every {a.every}th, 360x480), stand-in base and embedding, 2 threads, median of '
          f'{a.repeats}; settings {s}; the loops compiled in {build_s:.0f} s (0: the build of an earlier run, reused); the same labels as relabel on every image')
    print(f"  base forward (DeepLabV3-style MobileNetV2, random weights, 360x480): {med['base']:.1f} ms")
    for k, what in (('relabel', 'relabel (torch)'), ('loops', 'the band pass in C++ loops')):
        print(f"  {what}: {med[k]:.2f} ms = {med[k] / med['base']:.3f}x the base forward")
    print('    its steps, mean ms per image (x the base forward): ' + ', '.join(f'{k} {1e3 * v / n:.2f} ({1e3 * v / n / med["base"]:.3f})' for k, v in parts.items()))

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--every', type=int, default=23); ap.add_argument('--repeats', type=int, default=5)
    main_recorded(ap, 'native_band', run)
