"""brefine's cost relative to the base model, measured in one run (speed and memory against the base forward).

For each size (360x480 and 1024x2048), batch 1, CPU threads as given:
- base forward: a DeepLabV3-style MobileNetV2 OS16 (bench/benchmark.py's base, 11 classes, random weights: speed only),
  logits at image size, from the raw uint8 image (`prepare_image` included, as in bench/benchmark.py);
- brefine embedder forward: EmbeddingNet('mobilenet_v2', ...) of the given sizes (default: the light one bench/benchmark.py
  trains), likewise from the raw image;
- brefine post-processing: everything `refine_predict` does after the embedder -- `base_probs` of the base logits,
  `relabel` (arg-max, band, then top-N, softmax, nearest prototype at band pixels only) -- on scene-like 11-class
  logits, so the band has a realistic size;
- of which the floor: the two steps of the post-processing that touch every pixel whatever the settings, the arg-max
  and the band of the arg-max map (`batch_band`), from the same probabilities;
- peak memory: each stage runs once more under torch.profiler(profile_memory=True); its allocation and free events,
  in time order, give the peak of what torch allocated during that stage (model weights and inputs excluded).
Prints times and peak-memory growth as ratios to the base forward's; `--record` also writes the printout to
bench/results/speed.txt and records it in bench/results/manifest.json. Usage:
    .venv/bin/python bench/speed.py [--threads 2] [--repeats 5] [--emb-dim 32 --aspp-dim 64 --decoder-dim 48]
        [--top-n 3 --radius 18 --tau 0.9 --alpha 0.1 --vote 5 --min-prob 0]   (defaults: the settings calibrated on CamVid val)
        [--record]
"""
import argparse, time
from record import main_recorded

SIZES = [(360, 480), (1024, 2048)]

def _scene_logits(H, W, M=11):
    import torch, torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    lab = F.interpolate(torch.randint(0, M, (1, 1, H // 48 + 1, W // 48 + 1), generator=g).float(), size=(H, W), mode='nearest')[0, 0].long()
    return F.avg_pool2d(F.one_hot(lab, M).permute(2, 0, 1).float()[None] * 4, 9, 1, 4)

def _stages(H, W, threads, a):
    "The three stages as closures over models and inputs built here."
    import torch, numpy as np
    torch.set_num_threads(threads)
    from benchmark import base_model
    from brefine import EmbeddingNet, Prototypes
    from brefine.inference import prepare_image, base_probs, relabel
    from brefine.band import batch_band
    base = base_model(n_classes=11, pretrained=False).eval()
    emb_net = EmbeddingNet('mobilenet_v2', emb_dim=a.emb_dim, pretrained=False, aspp_dim=a.aspp_dim, decoder_dim=a.decoder_dim).eval()
    img = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    logits = _scene_logits(H, W)
    pr = Prototypes(torch.randn(11, a.emb_dim), torch.ones(11, dtype=torch.long), radius=3, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    x = prepare_image(img, pr.mean, pr.std)[0]
    with torch.inference_mode(): e = emb_net(x)            # the embedding the post-processing needs
    settings = dict(top_n=a.top_n, radius=a.radius, tau=a.tau, alpha=a.alpha, vote=a.vote, min_prob=a.min_prob)
    def post(): return relabel(e, base_probs(logits, x, True, softmax=False), pr, **settings)
    def floor(): return batch_band(base_probs(logits, x, True, softmax=False).max(1).indices, a.radius)
    prep = lambda: prepare_image(img, pr.mean, pr.std)[0]
    return dict(base=lambda: base(prep()), emb=lambda: emb_net(prep()), post=post, floor=floor)

def timings(H, W, threads, repeats, a):
    import torch
    st = _stages(H, W, threads, a)
    def t(f):
        f(); ts = []
        for _ in range(repeats):
            s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
        return sorted(ts)[len(ts) // 2]
    with torch.inference_mode(): return {k: t(f) for k, f in st.items()}

def peak_mib(f) -> float:
    "Peak of the memory torch allocates on the CPU during `f()` (torch.profiler's allocation and free events, in time order)."
    import itertools, torch
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof: f()
    ev = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    return max(itertools.accumulate(m for _, m in ev), default=0) / 2**20

def memory(H, W, threads, a):
    import torch
    st = _stages(H, W, threads, a)
    with torch.inference_mode(): return {k: peak_mib(f) for k, f in st.items() if k != 'floor'}   # the floor: time only

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--threads', type=int, default=2); ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--emb-dim', type=int, default=32); ap.add_argument('--aspp-dim', type=int, default=64)
    ap.add_argument('--decoder-dim', type=int, default=48)
    ap.add_argument('--top-n', type=int, default=3); ap.add_argument('--radius', type=int, default=18)   # the settings calibrated
    ap.add_argument('--tau', type=float, default=0.9); ap.add_argument('--alpha', type=float, default=0.1)  # on CamVid val
    ap.add_argument('--vote', type=int, default=5); ap.add_argument('--min-prob', type=float, default=0.)
    main_recorded(ap, 'speed', run)

def run(a):
    print(f'brefine speed (batch 1, {a.threads} threads, median of {a.repeats}; embedder emb_dim {a.emb_dim}, '
          f'aspp {a.aspp_dim}, decoder {a.decoder_dim}; top_n {a.top_n}, radius {a.radius}, tau {a.tau}, alpha {a.alpha}, vote {a.vote}, '
          f'min_prob {a.min_prob})')
    print(f"{'size':>10} {'base s':>8} {'emb s':>8} {'post s':>8} {'emb/base':>9} {'post/base':>10} {'floor/base':>11} {'mem emb/base':>13} {'mem post/base':>14}")
    for H, W in SIZES:
        tm = timings(H, W, a.threads, a.repeats, a)
        mem = memory(H, W, a.threads, a)
        print(f"{f'{H}x{W}':>10} {tm['base']:8.3f} {tm['emb']:8.3f} {tm['post']:8.4f} {tm['emb']/tm['base']:9.2f} "
              f"{tm['post']/tm['base']:10.3f} {tm['floor']/tm['base']:11.3f} {mem['emb']/max(mem['base'], 1e-9):13.2f} {mem['post']/max(mem['base'], 1e-9):14.2f}"
              f"   (peak MiB: base {mem['base']:.0f}, emb {mem['emb']:.0f}, post {mem['post']:.0f})", flush=True)

if __name__ == '__main__': main()
