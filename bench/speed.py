"""brefine's cost relative to the base model, measured in one run (issue 6, point 3).

For each size (360x480 and 1024x2048), batch 1, CPU threads as given:
- base forward: a DeepLabV3-style MobileNetV2 OS16 (bench/camvid.py's base, random weights: speed only);
- brefine embedder forward: EmbeddingNet('mobilenet_v2', emb_dim=64, output_stride=16);
- brefine post-processing: `relabel` (top-N, band of the base arg-max, nearest prototype at band pixels) on the base's
  probabilities, with a 11-class scene-like label layout so the band has a realistic size;
Peak memory of band sampling vs full-size interpolation is measured by bench/learner.py.
Prints ratios to the base forward. Usage: .venv/bin/python bench/speed.py [--threads 2] [--repeats 3]
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIZES = [(360, 480), (1024, 2048)]

def _setup(threads):
    import torch; torch.set_num_threads(threads)
    sys.path.insert(0, str(REPO/'bench'))

def _scene_probs(H, W, M=11):
    import torch, torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    lab = F.interpolate(torch.randint(0, M, (1, 1, H // 48 + 1, W // 48 + 1), generator=g).float(), size=(H, W), mode='nearest')[0, 0].long()
    return F.avg_pool2d(F.one_hot(lab, M).permute(2, 0, 1).float()[None] * 4, 9, 1, 4).softmax(1)

def timings(H, W, threads, repeats):
    import torch, camvid
    from brefine import EmbeddingNet, Prototypes
    from brefine.inference import relabel
    _setup(threads)
    base = camvid.base_model(pretrained=False).eval()
    emb_net = EmbeddingNet('mobilenet_v2', emb_dim=64, pretrained=False).eval()
    x = torch.randn(1, 3, H, W); p = _scene_probs(H, W)
    pr = Prototypes(torch.randn(11, 64), torch.ones(11, dtype=torch.long), radius=3)
    def t(f):
        f(); ts = []
        for _ in range(repeats):
            s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
        return sorted(ts)[len(ts) // 2]
    with torch.inference_mode():
        e = emb_net(x)
        return dict(base=t(lambda: base(x)), emb=t(lambda: emb_net(x)),
                    post=t(lambda: relabel(e, p, pr, top_n=3, radius=3)))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--threads', type=int, default=2); ap.add_argument('--repeats', type=int, default=3)
    a = ap.parse_args()
    print(f'brefine speed (batch 1, {a.threads} threads, median of {a.repeats})')
    print(f"{'size':>10} {'base s':>8} {'emb s':>8} {'post s':>8} {'emb/base':>9} {'post/base':>10}")
    for H, W in SIZES:
        tm = timings(H, W, a.threads, a.repeats)
        print(f"{f'{H}x{W}':>10} {tm['base']:8.3f} {tm['emb']:8.3f} {tm['post']:8.3f} {tm['emb']/tm['base']:9.2f} "
              f"{tm['post']/tm['base']:10.3f}", flush=True)

if __name__ == '__main__': main()
