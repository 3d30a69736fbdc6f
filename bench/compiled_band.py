"""Would a compiler fuse brefine's band pass into something much faster? A dense version compiled by torch.compile, timed against `relabel`.

`relabel` (brefine's post-processing) works on band pixels only, in many small torch ops. This script writes the same
decision as one dense pass over every pixel, the shape a compiler can fuse into a few loops, and times it compiled by
`torch.compile` (TorchInductor, which on a CPU generates C++ and needs a C++ compiler) against `relabel`, in one run:

- choose: each pixel's top-N classes of the base probabilities, the candidates' prototype distances (the distance maps
  upsampled bilinearly to image size), the nearest candidate with the base weight `alpha`; band pixels take it;
- vote: the setting `passes` (2) of the grey-weighted vote over the `_lattice` points of the vote window, each pass reading
  the labels of the one before, as `relabel` does.

The inputs are those of bench/speed.py's post-processing (scene-like 11-class probabilities, random 32-dim embeddings at
a quarter of the size, random prototypes, random grey levels) with the settings the CamVid benchmark calibrated (top_n 3,
radius 18, alpha 0.1, vote 11, grey 10). It prints the agreement of the dense labels with `relabel`'s (the bilinear
upsampling rounds differently from `grid_sample`, so a few near-tied pixels may differ), the compile time, and the
medians of `relabel`, the compiled dense pass and its parts (the arg-max and band, which both need, are timed apart).
Usage:
    .venv/bin/python bench/compiled_band.py [--size 360 480] [--threads 2] [--repeats 10] [--record]
"""
import argparse, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from record import main_recorded

def choose(p, up, band, base, missing, alpha: float, n: int):
    "Labels (H,W) with band pixels set to the nearest of their top-`n` candidates; the candidates (n,H,W) and which may win the vote."
    import torch
    classes = torch.arange(p.shape[0], device=p.device)[:, None, None]
    vals, idx, q = [], [], p
    for _ in range(n):                                                   # top-n, the lower class first among equals
        v = q.amax(0); i = torch.where(q == v, classes, p.shape[0]).amin(0)
        vals.append(v); idx.append(i); q = torch.where(classes == i, float('-inf'), q)
    cand, top = torch.stack(idx), torch.stack(vals)
    d = torch.where(missing[cand], float('inf'), up.gather(0, cand)) - alpha * top.clamp_min(1e-12).log()
    pick, best = cand[0], d[0]
    for j in range(1, n): m = d[j] < best; pick = torch.where(m, cand[j], pick); best = torch.where(m, d[j], best)
    allowed = ~missing[cand]; allowed[0] = True
    return torch.where(band, pick, base), cand, allowed

def vote(lab, grey, cand, allowed, band, w, lattice: list, M: int):
    "One pass of the grey-weighted vote over every band pixel: the allowed candidate with the largest weight at the lattice points; a tie keeps the label."
    import torch, torch.nn.functional as F
    r, (H, W) = max(abs(o) for o in lattice), lab.shape
    lp, gp, g0 = F.pad(lab[None], (r, r, r, r), value=M)[0], F.pad(grey[None].int(), (r, r, r, r))[0], grey.int() - 255
    score = [torch.zeros_like(g0) for _ in range(len(cand))]
    for dy in lattice:
        for dx in lattice:
            l, wt = lp[r+dy:r+dy+H, r+dx:r+dx+W], w[gp[r+dy:r+dy+H, r+dx:r+dx+W] - g0]
            for j in range(len(cand)): score[j] = score[j] + torch.where(l == cand[j], wt, 0)
    pick, best = cand[0], torch.where(allowed[0], score[0] * 2 + (cand[0] == lab).int(), -1)
    for j in range(1, len(cand)):
        v = torch.where(allowed[j], score[j] * 2 + (cand[j] == lab).int(), -1); m = v > best
        pick, best = torch.where(m, cand[j], pick), torch.maximum(best, v)
    return torch.where(band, pick, lab)

def upsampled_distances(emb, vecs, sq, size):
    "The distance maps (M,H,W) of `_prototype_scores`, upsampled bilinearly to `size`."
    import torch.nn.functional as F
    from brefine.inference import _prototype_scores
    return F.interpolate(_prototype_scores(emb, vecs, sq), size=size, mode='bilinear', align_corners=False)[0]

def dense(probs, emb, vecs, sq, missing, levels, band, base, w, alpha: float, n: int, lattice: list, M: int, passes: int):
    "The whole band pass over every pixel of one image (B=1)."
    lab, cand, allowed = choose(probs[0], upsampled_distances(emb, vecs, sq, probs.shape[-2:]), band, base, missing, alpha, n)
    for _ in range(passes): lab = vote(lab, levels[0], cand, allowed, band, w, lattice, M)
    return lab

def run(a):
    import numpy as np, torch
    from speed import _scene_probs
    from brefine.inference import relabel, RefineSettings, _grey_weights, _lattice, _arg_max
    from brefine.band import batch_band
    from brefine.prototypes import Prototypes
    torch.set_num_threads(a.threads)
    (H, W), M, g = a.size, 11, torch.Generator().manual_seed(0)
    probs, emb = _scene_probs(H, W, M)[None], torch.randn(1, 32, H // 4, W // 4, generator=g)
    protos = Prototypes(torch.randn(M, 32, generator=torch.Generator().manual_seed(1)), torch.ones(M, dtype=torch.long))
    levels = torch.randint(0, 256, (1, H, W), dtype=torch.uint8, generator=g)
    s = RefineSettings(top_n=3, radius=18, alpha=0.1, vote=11, grey=10.)
    vecs, w, lattice = protos.vectors, _grey_weights(s.grey), list(_lattice(s.vote))
    sq, missing = (vecs * vecs).sum(1), ~protos.present
    band_of = lambda: batch_band(_arg_max(probs)[0], s.radius)
    base, band = _arg_max(probs)[0][0].long(), band_of()[0]
    args = (probs, emb, vecs, sq, missing, levels, band, base, w, s.alpha, s.top_n, lattice, M, s.passes)
    ref = relabel(emb, probs, protos, s, levels=levels)[0]
    t = time.perf_counter(); fused = torch.compile(dense, dynamic=False); out = fused(*args); compile_s = time.perf_counter() - t
    cc, cv = torch.compile(choose, dynamic=False), torch.compile(vote, dynamic=False)
    up = upsampled_distances(emb, vecs, sq, (H, W)); lab, cand, allowed = cc(probs[0], up, band, base, missing, s.alpha, s.top_n)
    cv(lab, levels[0], cand, allowed, band, w, lattice, M)
    def ms(f):
        f(); ts = []
        for _ in range(a.repeats): t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        return float(np.median(ts)) * 1e3
    print(f"band pass at {H}x{W}, {a.threads} threads, median of {a.repeats}; top_n 3, radius 18, alpha 0.1, vote 11, grey 10, {s.passes} vote passes")
    print(f"dense labels equal to relabel's: {(out == ref).double().mean().item():.5%} of the pixels ({(out != ref).sum().item()} differ)")
    print(f"torch.compile of the dense pass: {compile_s:.1f} s, once per shape and settings")
    rows = [('relabel (brefine, band pixels only)', lambda: relabel(emb, probs, protos, s, levels=levels)),
            ('dense pass, compiled, with the arg-max and band', lambda: fused(*args[:6], band_of()[0], *args[7:])),
            ('  arg-max and band', band_of),
            ('  distance maps upsampled (eager)', lambda: upsampled_distances(emb, vecs, sq, (H, W))),
            ('  choose, compiled', lambda: cc(probs[0], up, band, base, missing, s.alpha, s.top_n)),
            ('  one vote pass, compiled', lambda: cv(lab, levels[0], cand, allowed, band, w, lattice, M))]
    for name, f in rows: print(f"{ms(f):8.2f} ms  {name}")

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--size', type=int, nargs=2, default=[360, 480], metavar=('H', 'W'))
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--repeats', type=int, default=10)
    main_recorded(ap, 'compiled_band', run)
