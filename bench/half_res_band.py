"""Would deciding the band at half the resolution make the post-processing cheap enough? A measurement on CamVid val.

`relabel`'s cost grows with the band's pixels. This script decides the band at half the image's size instead: the base
probabilities averaged over 2x2 pixels, the grey levels too, the band radius and the vote window halved (radius 9, a 5x5
or 7x7 vote), `relabel` there with the embedding as it is (it is sampled at the half-size pixels), and the labels
upsampled (nearest) into the band of the full-size base answer (radius 18); every other pixel keeps the base answer. It
compares that with `relabel` at full size with the settings the CamVid benchmark calibrated (top-3, radius 18, α 0.1, an
11x11 vote weighted by grey levels, two passes), on the validation split, with the models `bench/benchmark.py camvid
--train-blocks 0 --bf16 --feature-views 8` cached: boundary F @ 3 px, mIoU and the median milliseconds per image of the
post-processing alone (the base forward and the embedding excluded), 2 threads.

usage: .venv/bin/python bench/half_res_band.py [--cache bench/out/camvid_cache_fresh] [--images N] [--record]
"""
import argparse, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import main_recorded

def half_res(inf, emb, probs, protos, s, levels, radius: int):
    "Labels (1,H,W): `relabel` at half the size with settings `s`, upsampled into the band (`radius`) of the full-size base answer."
    import torch, torch.nn.functional as F
    from brefine.band import batch_band
    ph, lh = F.avg_pool2d(probs, 2), F.avg_pool2d(levels[:, None].float(), 2)[:, 0].round().to(torch.uint8)
    up = inf.relabel(emb, ph, protos, s, levels=lh).repeat_interleave(2, 1).repeat_interleave(2, 2)
    base = inf._arg_max(probs)[0]
    return torch.where(batch_band(base, radius), up.to(base.dtype), base).long()

def run(a):
    import torch
    import benchmark as bm
    import brefine.inference as inf
    from brefine.metrics import _bf_and_miou
    ds = bm.setup(argparse.Namespace(threads=2, cache=a.cache, out=bm.REPO/'bench/out', dataset='camvid', data=None, quick=False))
    base, ref = bm.load_cached(a.cache, ds, train_blocks=0, bf16=True, feature_views=8)
    protos, net = ref.prototypes, ref.embedder.eval()
    full = inf.RefineSettings(top_n=3, radius=18, tau=None, alpha=0.1, vote=11, grey=10., passes=2)
    ways = {'full size (relabel)': lambda e, p, lv: inf.relabel(e, p, protos, full, levels=lv)}
    for v in (5, 7):
        s = inf.RefineSettings(top_n=3, radius=9, tau=None, alpha=0.1, vote=v, grey=10., passes=2)
        ways[f'half size, radius 9, {v}x{v} vote'] = lambda e, p, lv, s=s: half_res(inf, e, p, protos, s, lv, full.radius)
    preds, tm, gts = {k: [] for k in ('base', *ways)}, {k: [] for k in ways}, []
    files = ds.files('val')[:a.images]
    with torch.inference_mode():
        for f in files:
            img, gt = ds.read(f); gts.append(gt)
            x, _ = inf.prepare_image(img, protos.mean, protos.std)
            probs, emb = base(x).softmax(1).contiguous(), inf._embed(net, x)
            lv = inf.grey_levels(x, protos.mean, protos.std)
            preds['base'].append(probs.argmax(1)[0].numpy())
            for k, way in ways.items():
                t = time.perf_counter(); out = way(emb, probs, lv); tm[k].append(time.perf_counter() - t); preds[k].append(out[0].numpy())
    print(f'CamVid val, {len(files)} images at 360x480, models of {a.cache} (head alone, bfloat16, 8 cached views); 2 threads')
    for k, p in preds.items():
        bf, miou = _bf_and_miou(p, gts, ds.n_classes, 3, ds.void)
        print(f"  {k:32s} boundary F {100 * bf:.2f}  mIoU {100 * miou:.2f}" + (f"  post-processing {1e3 * np.median(tm[k]):.1f} ms per image" if k in tm else ''))

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cache', type=Path, default=Path(__file__).resolve().parent/'out/camvid_cache_fresh')
    ap.add_argument('--images', type=int, default=None, help='the first N validation images (default: all)')
    main_recorded(ap, 'half_res_band', run)
