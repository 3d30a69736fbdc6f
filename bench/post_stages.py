"""Where the post-processing's time goes on CamVid-like bands, stage by stage, against the base forward in the same run.

`bench/speed.py` times the post-processing on a synthetic worst case (48-pixel blocks, the band covering most of the
image). This script times it on bands shaped like real ones, without trained models: for every `--every`-th CamVid test
label map (void read as class 0),
- the base scores stand in for an output-stride-16 model: the one-hot labels averaged over 16×16 cells, times 8,
  upsampled bilinearly and softmaxed, so the base answer is the labels with blocky, shifted boundaries;
- the embedding (32 channels at stride 4) is each pixel's class prototype plus Gaussian noise (σ `--noise`), so the
  nearest prototype is mostly, not always, the truth, as with a trained embedder;
- the settings are those the CamVid benchmark calibrated on val (top-3, radius 18, no gate, α 0.1, an 11×11 vote
  weighted by grey levels with σ 10).
It prints the median milliseconds per image of the whole `relabel` and of its three stages (the base answer: arg-max and
probability check; the choice: band, top-N, distances; the decision: nearest candidate and the two grey-vote passes),
how many pixels each vote pass re-votes and how many the first pass changes, and the base forward of `bench/benchmark.py`'s
base model (DeepLabV3-style MobileNetV2, random weights) on a 360×480 image, timed in the same loop (2 threads).
`--before REV` also times `relabel` of brefine as of git revision REV (its whole package, as `bench/speed.py --before`
imports it) in the same loop, taking turns with the current one, and checks that both give the same labels.

usage: .venv/bin/python bench/post_stages.py [--every 23] [--repeats 5] [--noise 0.7] [--before REV] [--record]
"""
import argparse, dataclasses, os, time
from pathlib import Path
import numpy as np
from record import main_recorded

def cases(every: int, noise: float):
    "(embedding, base probabilities, grey levels) for every `every`-th CamVid test image, and the prototypes."
    import cv2, torch, torch.nn.functional as F
    import brefine.inference as inf
    from brefine import Prototypes
    root = Path(os.environ.get('BREFINE_DATA', Path(__file__).resolve().parent.parent.parent/'shared/data'))/'camvid/CamVid'
    files = sorted((root/'testannot').glob('*.png'))[::every]
    if not files: raise SystemExit(f'no CamVid test labels under {root}: set BREFINE_DATA to the folder holding camvid/CamVid')
    M, C, g = 11, 32, torch.Generator().manual_seed(0)
    protos = Prototypes(torch.randn(M, C, generator=g), torch.ones(M, dtype=torch.long), train_radius=3,
                        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    out = []
    for f in files:
        lab = torch.from_numpy(cv2.imread(str(f), cv2.IMREAD_GRAYSCALE).astype(np.int64)); lab[lab == 11] = 0
        H, W = lab.shape
        coarse = F.avg_pool2d(F.one_hot(lab, M).permute(2, 0, 1).float()[None], 16) * 8
        probs = F.interpolate(coarse, size=(H, W), mode='bilinear', align_corners=False).softmax(1)
        emb = protos.vectors[lab[2::4, 2::4]].permute(2, 0, 1)[None] + noise * torch.randn(1, C, H // 4, W // 4, generator=g)
        x, _ = inf.prepare_image(cv2.imread(str(root/'test'/f.name))[..., ::-1].copy(), protos.mean, protos.std)
        out.append((emb, probs, inf.grey_levels(x, protos.mean, protos.std)))
    return out, protos

def run(a):
    import torch
    import brefine.inference as inf
    from benchmark import base_model
    torch.set_num_threads(2)
    data, protos = cases(a.every, a.noise)
    s = inf.RefineSettings(top_n=3, radius=18, tau=None, alpha=0.1, vote=11, grey=10.)
    if a.before:                                               # the other version's relabel, with its own Prototypes and settings
        from speed import _package_at, prototypes_for
        old = _package_at(a.before)
        protos_b = prototypes_for(old, protos)
        s_b = old.RefineSettings(**dataclasses.asdict(s))
        before = lambda e, p, lv: old.relabel(e, p, protos_b, s_b, levels=lv)
    def stages(e, p, lv):
        t0 = time.perf_counter(); ans = inf._base_answer(p)
        t1 = time.perf_counter(); c = inf._candidates(e, p, ans, protos, s, None, lv); chunks = list(c[2])
        t2 = time.perf_counter(); inf._decide((c[0], c[1], chunks, lv), s.alpha, s.vote, s.grey)
        t3 = time.perf_counter(); return t1 - t0, t2 - t1, t3 - t2
    base = base_model(n_classes=11, pretrained=False).eval()
    img = torch.zeros(1, 3, 360, 480)
    ts = {k: [] for k in ('relabel', 'answer', 'choice', 'decision', 'base') + (('before',) if a.before else ())}
    with torch.inference_mode():
        for e, p, lv in data[:2]: inf.relabel(e, p, protos, s, levels=lv); base(img)       # warm-up
        if a.before:
            for e, p, lv in data:
                if not torch.equal(before(e, p, lv), inf.relabel(e, p, protos, s, levels=lv)): raise SystemExit(f'{a.before} gives other labels')
        for _ in range(a.repeats):
            for e, p, lv in data:
                t = time.perf_counter(); inf.relabel(e, p, protos, s, levels=lv); ts['relabel'].append(time.perf_counter() - t)
                if a.before: t = time.perf_counter(); before(e, p, lv); ts['before'].append(time.perf_counter() - t)
                for k, v in zip(('answer', 'choice', 'decision'), stages(e, p, lv)): ts[k].append(v)
            t = time.perf_counter(); base(img); ts['base'].append(time.perf_counter() - t)
        voted, vote = [], inf._grey_vote                       # the pixels each vote pass re-votes, and those it changes
        def counting(plane, lin, cand, allowed, cur, *args, **kw):
            v = vote(plane, lin, cand, allowed, cur, *args, **kw); voted.append((len(lin), int((v != cur).sum()))); return v
        inf._grey_vote, passes = counting, []
        try:
            for e, p, lv in data:
                voted.clear(); ans = inf._base_answer(p); inf.relabel(e, p, protos, s, levels=lv)
                n = len(voted) // 2                            # chunks per pass
                passes.append((len(inf._band_pixels(*ans, s)), sum(k for k, _ in voted[:n]), sum(c for _, c in voted[:n]),
                               sum(k for k, _ in voted[n:])))
        finally: inf._grey_vote = vote
    med = {k: float(np.median(v)) * 1e3 for k, v in ts.items()}
    print(f'post-processing on {len(data)} CamVid test label maps (every {a.every}th, 360x480), stand-in base and embedding '
          f'(noise {a.noise}), 2 threads, median of {a.repeats}; settings {s}')
    print(f"  base forward (DeepLabV3-style MobileNetV2, random weights, 360x480): {med['base']:.1f} ms")
    print(f"  relabel: {med['relabel']:.2f} ms = {med['relabel'] / med['base']:.3f}x the base forward")
    if a.before: print(f"  relabel of {a.before}: {med['before']:.2f} ms = {med['before'] / med['base']:.3f}x the base forward (the same labels on every image)")
    for k, what in (('answer', 'arg-max and probability check'), ('choice', 'band, top-N, distances'),
                    ('decision', 'nearest candidate, two grey-vote passes')):
        print(f"    {k:9s} {med[k]:6.2f} ms  {med[k] / med['base']:.3f}x  ({what})")
    band, p1, ch1, p2 = (int(np.mean(v)) for v in zip(*passes))
    print(f'  per image, mean: {band} band pixels; the first vote pass re-votes {p1} and changes {ch1}; the second re-votes {p2}')

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--every', type=int, default=23); ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--noise', type=float, default=0.7, help="σ of the noise added to each pixel's prototype (the embedding)")
    ap.add_argument('--before', help="a git revision whose relabel to time alongside (the same labels are checked)")
    main_recorded(ap, 'post_stages', run)
