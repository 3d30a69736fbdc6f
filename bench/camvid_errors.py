"""Where the CamVid base model is wrong, and what a band-and-top-N refinement can reach (models cached by bench/camvid.py).

For every 2nd val image: per class, the base's IoU and brefine's (the newest calibrated bundle); of the pixels of that
class the base gets wrong, the share inside a band of --radius around the base's boundaries, and where the true class
ranks in the base's scores (2nd, 3rd, ...). Usage (from the repository root):
    .venv/bin/python bench/camvid_errors.py [--radius 4]
"""
import argparse, sys
from pathlib import Path
REPO = Path(__file__).resolve().parent.parent

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--radius', type=int, default=4); ap.add_argument('--every', type=int, default=2)
    ap.add_argument('--split', default='val', help='val; test only to diagnose (settings are never chosen on test)')
    ap.add_argument('--cache', type=Path, default=REPO/'bench/out/camvid_cache')
    ap.add_argument('--data', type=Path, default=REPO.parent/'shared/data/camvid/CamVid')
    a = ap.parse_args()
    import torch, numpy as np
    sys.path.insert(0, str(REPO/'bench')); import camvid
    from brefine.band import batch_band
    torch.set_num_threads(2)
    base, ref = camvid.load_cached(a.cache)
    n, V = camvid.N_CLASSES, camvid.VOID
    cm = {k: np.zeros((n, n), np.int64) for k in ('base', 'brefine')}
    rank, inband = np.zeros((n, n), np.int64), np.zeros((n, 2), np.int64)
    fs = camvid.files(a.data, a.split)[::a.every]
    with torch.inference_mode():
        for f in fs:
            img, gt = camvid.read_pair(a.data, f)
            p = camvid.base_probs_of(base, img)
            b, r, v = p.argmax(0).numpy(), ref(img, p).numpy(), gt != V
            for k, pr in (('base', b), ('brefine', r)): cm[k] += np.bincount(gt[v] * n + pr[v], minlength=n * n).reshape(n, n)
            wrong = v & (b != gt)
            rk = ((-p.numpy()).argsort(0) == gt[None]).argmax(0)
            band = batch_band(torch.from_numpy(b), a.radius).numpy()
            for c in range(n):
                m = wrong & (gt == c)
                rank[c] += np.bincount(rk[m], minlength=n); inband[c] += [int((m & band).sum()), int(m.sum())]
    iou = lambda c: np.diag(c) / np.maximum(c.sum(0) + c.sum(1) - np.diag(c), 1)
    print(f'$ .venv/bin/python bench/camvid_errors.py --radius {a.radius} --split {a.split} --every {a.every}')
    print(f'{len(fs)} {a.split} images; brefine settings {ref.settings}')
    print(f"{'class':11s} {'IoU base':>8s} {'brefine':>8s} {'wrong px':>9s} {'in band':>8s}   truth ranks 2nd 3rd 4th 5th+ in the base's scores")
    for c in range(n):
        w = max(rank[c].sum(), 1)
        print(f'{camvid.CODES[c]:11s} {iou(cm["base"])[c]:8.2f} {iou(cm["brefine"])[c]:8.2f} {rank[c].sum():9d} '
              f'{inband[c, 0] / max(inband[c, 1], 1):8.2f}   {rank[c, 1] / w:.2f} {rank[c, 2] / w:.2f} {rank[c, 3] / w:.2f} {rank[c, 4:].sum() / w:.2f}')
    print(f"{'mean':11s} {iou(cm['base']).mean():8.4f} {iou(cm['brefine']).mean():8.4f}")

if __name__ == '__main__': main()
