"""brefine settings side by side on CamVid val, with the models bench/camvid.py cached (no training, no test data).

For every 2nd val image (51 of 101): base probabilities and embeddings once, then `relabel` with each setting given as
radius,top_n,tau,alpha,vote[,min_prob] (tau 'none' for no gate); prints val mIoU and boundary F @ 3 px per setting, and the base's.
Usage (from the repository root):
    .venv/bin/python bench/camvid_settings.py --refiner refiner_emb_..._e16_tNone_vNone  8,2,0.9,0,0 8,2,0.9,0,9
Without --refiner it uses the newest bundle in the cache (as bench/camvid.py's load_cached does).
"""
import argparse, sys, time
from pathlib import Path
REPO = Path(__file__).resolve().parent.parent

def parse_setting(s: str) -> dict:
    r, k, t, a, v, *m = s.split(',')
    return dict(radius=int(r), top_n=int(k), tau=None if t.lower() == 'none' else float(t), alpha=float(a), vote=int(v),
                min_prob=float(m[0]) if m else 0.)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('settings', nargs='+', type=parse_setting, help='radius,top_n,tau,alpha,vote[,min_prob]')
    ap.add_argument('--refiner', default=None, help='bundle folder name in the cache (default: the newest)')
    ap.add_argument('--split', default='val', help='val; test only to diagnose (settings are never chosen on test)')
    ap.add_argument('--cache', type=Path, default=REPO/'bench/out/camvid_cache')
    ap.add_argument('--data', type=Path, default=REPO.parent/'shared/data/camvid/CamVid')
    ap.add_argument('--every', type=int, default=2); ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--proto-radius', type=int, default=None,
                    help="extract the prototypes from train with this band radius instead of using the bundle's (radius 3)")
    a = ap.parse_args()
    import torch
    sys.path.insert(0, str(REPO/'bench')); import camvid
    from brefine.inference import Refiner, prepare_image, relabel
    from brefine.metrics import mean_iou, boundary_f1
    torch.set_num_threads(a.threads)
    base, ref = camvid.load_cached(a.cache)
    if a.refiner: ref = Refiner.load(a.cache/a.refiner)
    if a.proto_radius is not None:
        ref.prototypes = camvid.train_prototypes(argparse.Namespace(data=a.data, limit_train=None, emb_exclude=()), ref.embedder, a.proto_radius)
    fs = camvid.files(a.data, a.split)[::a.every]
    cache, gts = [], []
    with torch.inference_mode():
        for f in fs:
            img, gt = camvid.read_pair(a.data, f); gts.append(gt)
            x, _ = prepare_image(img, ref.prototypes.mean, ref.prototypes.std)
            cache.append((ref.embedder(x), camvid.base_probs_of(base, img)[None]))
    score = lambda preds: (100 * mean_iou(preds, gts, camvid.N_CLASSES, ignore_index=camvid.VOID),
                           100 * boundary_f1(preds, gts, camvid.N_CLASSES, tolerance=3, ignore_index=camvid.VOID))
    print(f'$ .venv/bin/python bench/camvid_settings.py --split {a.split} --every {a.every} --refiner {a.refiner or "(newest)"} ' +
          (f'--proto-radius {a.proto_radius} ' if a.proto_radius is not None else '') +
          ' '.join(f"{s['radius']},{s['top_n']},{s['tau']},{s['alpha']},{s['vote']},{s['min_prob']}" for s in a.settings))
    print(f'{len(fs)} {a.split} images (every {a.every}th); embedder {ref.embedder.config}; prototypes radius {ref.prototypes.radius}')
    print(f"{'setting':55s} {'mIoU':>6s} {'bF@3':>6s} {'ms/img':>7s}")
    m, b = score([p[0].argmax(0).numpy() for _, p in cache])
    print(f"{'base':55s} {m:6.2f} {b:6.2f}")
    with torch.inference_mode():
        for s in a.settings:
            t = time.perf_counter()
            preds = [relabel(e, p, ref.prototypes, **s)[0].numpy() for e, p in cache]
            dt = (time.perf_counter() - t) / len(cache)
            m, b = score(preds)
            print(f"{str(s):55s} {m:6.2f} {b:6.2f} {1e3 * dt:7.1f}", flush=True)

if __name__ == '__main__': main()
