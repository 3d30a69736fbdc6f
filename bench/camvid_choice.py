"""Where brefine can help on CamVid: band pixels whose true class is among the base model's top-2 (--top-n), and who picks it.

For every 4th val image: the band (radius 4) of the base model's arg-max, void excluded; among those pixels, the ones
whose ground truth is one of the base's two best classes (the only ones a top-2 refinement can fix or break). Reports how
often each rule picks the true class there: the base (its top-1), the nearest prototype by Euclidean distance (brefine),
by cosine distance, and the nearest with the base weight `alpha` (|e - E_c|^2 - alpha * log p_c; cosine: 2(1 - cos) - ...).
Uses the models cached by bench/camvid.py. Usage:
    .venv/bin/python bench/camvid_choice.py --embedder emb_mnv2_d32_a64_dec48_e16_tNone_vNone.pt
"""
import argparse, sys
from pathlib import Path
REPO = Path(__file__).resolve().parent.parent

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--embedder', required=True, help='embedder file name in the cache (its prototypes file sits next to it)')
    ap.add_argument('--base', default='base_mnv2os16_e8_tNone_vNone.pth', help='base model file name in the cache')
    ap.add_argument('--cache', type=Path, default=REPO/'bench/out/camvid_cache')
    ap.add_argument('--data', type=Path, default=REPO.parent/'shared/data/camvid/CamVid')
    ap.add_argument('--radius', type=int, default=4); ap.add_argument('--every', type=int, default=4)
    ap.add_argument('--top-n', type=int, default=2, help='candidates: the base top-N')
    ap.add_argument('--split', default='val', help='val, or test / train for diagnosis only (settings are never chosen on test)')
    a = ap.parse_args()
    import torch, numpy as np, torch.nn.functional as F
    sys.path.insert(0, str(REPO/'bench')); import camvid
    from brefine.learner import sample_features
    from brefine.prototypes import Prototypes
    from brefine.band import batch_band
    torch.set_num_threads(2)
    net = camvid.load_embedder(a.cache/a.embedder)
    pr = Prototypes.load(a.cache/('protos_' + Path(a.embedder).stem + '.pt'))
    base = camvid.load_base(a.cache/a.base)
    fs = camvid.files(a.data, a.split)[::a.every]
    V, Vn = pr.vectors, F.normalize(pr.vectors, dim=1)
    rules = ['base', 'euclidean', 'cosine'] + [f'{d} alpha={x}' for d in ('euclidean', 'cosine') for x in (0.3, 1, 3)]
    right, total = dict.fromkeys(rules, 0), 0
    per = {k: torch.zeros(11, 2) for k in ('base', 'euclidean')}
    with torch.inference_mode():
        for f in fs:
            img, gt = camvid.read_pair(a.data, f)
            x = camvid._normalize(img); p = base(x).softmax(1)
            y, xx = batch_band(p.argmax(1), a.radius)[0].nonzero(as_tuple=True)
            g = torch.from_numpy(gt.astype(np.int64))[y, xx]
            pp = p[0][:, y, xx].t(); cand = pp.topk(a.top_n, 1).indices
            ok = (cand == g[:, None]).any(1) & (g != camvid.VOID)
            cand, pp, g = cand[ok], pp[ok], g[ok]
            fe = sample_features(net(x), torch.zeros_like(y), y, xx, gt.shape)[ok]
            d_e, d_c, lp = torch.cdist(fe, V) ** 2, 2 * (1 - F.normalize(fe, dim=1) @ Vn.t()), pp.clamp_min(1e-12).log()
            pick = lambda d: cand.gather(1, d.gather(1, cand).argmin(1, keepdim=True))[:, 0]
            picks = {'base': cand[:, 0], 'euclidean': pick(d_e), 'cosine': pick(d_c)}
            for x_ in (0.3, 1, 3): picks[f'euclidean alpha={x_}'] = pick(d_e - x_ * lp); picks[f'cosine alpha={x_}'] = pick(d_c - x_ * lp)
            for k, v in picks.items(): right[k] += int((v == g).sum())
            for k in per:
                per[k][:, 0] += torch.bincount(g[picks[k] == g], minlength=11).float(); per[k][:, 1] += torch.bincount(g, minlength=11).float()
            total += int(ok.sum())
    print(f'$ .venv/bin/python bench/camvid_choice.py --embedder {a.embedder}' + (f' --top-n {a.top_n}' if a.top_n != 2 else '') + (f' --split {a.split}' if a.split != 'val' else '') + (f' --every {a.every}' if a.every != 4 else ''))
    print(f'{len(fs)} {a.split} images; band radius {a.radius} around the base arg-max; {total} band pixels whose truth is in the base top-{a.top_n}')
    for k in rules: print(f'  {k:22s} picks the truth {right[k] / total:.3f}')
    for k, t in per.items():
        r = t[:, 0] / t[:, 1].clamp_min(1)
        print(f'  per-class recall, {k}:', {camvid.CODES[i]: round(r[i].item(), 2) for i in range(11) if t[i, 1] > 0})

if __name__ == '__main__': main()
