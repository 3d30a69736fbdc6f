"""Calibration time: `calibrate` with its default grid, against an earlier version of brefine in the same run.

Both versions calibrate the same inputs: each validation image's embedding and base probabilities, computed once and
handed to both (`calibrate` takes the base scores; the embedder given to it returns the stored embedding). The record
says how long each took, on how many settings and images, and whether the two chose the same settings with the same
validation scores (`same_choice`), and whether the rows this version measured on every image have the earlier version's
scores (`same_full_rows`; with the staged search, the default, the other rows were measured on the screen only, so
`same_table` compares the whole tables, which only an exhaustive search on both sides can make equal).

Inputs:
- `--models DIR`: the base model and calibrated `Refiner` that `bench/benchmark.py` cached in DIR (`load_cached`), on the
  data set's validation split: what a user calibrates;
- synthetic inputs (the default): the data set's validation ground truths; base probabilities made from each ground
  truth by blurring a shifted copy of it (boundaries off by a few pixels, as a coarse model's are); and 32-d embeddings
  at a quarter of the size, each pixel's the random prototype of its true class plus smooth noise, so the nearest
  prototype is right for most pixels and wrong for some, as a trained embedder's is. No trained model is needed.

    .venv/bin/python bench/calibrate.py camvid --before 2acaa23 --images 20          # synthetic inputs, 20 val images
    .venv/bin/python bench/calibrate.py camvid --before 2acaa23 --models bench/out/camvid_cache --record
"""
from __future__ import annotations
import argparse, json, sys, time
from pathlib import Path
import benchmark as B
from record import RESULTS, provenance, record
from speed import package_at

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('dataset', choices=sorted(B.DATA_DIRS))
    p.add_argument('--before', required=True, help='the git revision to compare with')
    p.add_argument('--models', type=Path, default=None, help="bench/benchmark.py's model cache (default: synthetic inputs)")
    p.add_argument('--images', type=int, default=None, help='the first N validation images (default: all)')
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--search', default=None, help="this version's calibrate(search=...) (default: its own default)")
    p.add_argument('--record', action='store_true', help='write bench/results/calibrate.json and add it to the manifest')
    a = p.parse_args(argv)
    a.data, a.quick = B.DATA/B.DATA_DIRS[a.dataset], False
    return a

class Stored:
    "An 'embedder' that returns the embedding stored for each image, in order: both versions read the same embeddings."
    def __init__(self, embs): self.embs, self.i = embs, 0
    def __call__(self, x):
        e = self.embs[self.i % len(self.embs)]; self.i += 1
        return e
    def eval(self): return self

def synthetic(ds, files, seed=0):
    "(images, base probabilities, ground truths, embeddings, prototype vectors) made from the ground truths."
    import numpy as np, torch, torch.nn.functional as F
    g = torch.Generator().manual_seed(seed)
    vecs = F.normalize(torch.randn(ds.n_classes, 32, generator=g), dim=1)
    imgs, probs, gts, embs = [], [], [], []
    for f in files:
        img, gt = ds.read(f)
        lab = torch.from_numpy(gt.astype(np.int64)).clamp(max=ds.n_classes - 1)
        lab = torch.roll(lab, (int(torch.randint(-4, 5, (1,), generator=g)), int(torch.randint(-4, 5, (1,), generator=g))), (0, 1))
        oh = F.one_hot(lab, ds.n_classes).permute(2, 0, 1).float()[None] * 4
        probs.append(F.avg_pool2d(oh, 9, 1, 4).softmax(1)[0].contiguous())
        h, w = gt.shape[0] // 4, gt.shape[1] // 4
        true = torch.from_numpy(gt.astype(np.int64)).clamp(max=ds.n_classes - 1)[2::4, 2::4][:h, :w]
        noise = F.interpolate(torch.randn(1, 32, h // 4, w // 4, generator=g), (h, w), mode='bilinear')
        imgs.append(img); gts.append(gt); embs.append(F.normalize(vecs[true].permute(2, 0, 1)[None] + 0.5 * noise, dim=1))
    return imgs, probs, gts, embs, vecs

def real(ds, files, models):
    "(images, base probabilities, ground truths, embeddings, prototype vectors) of the cached models."
    import torch
    from brefine.inputs import prepare_image
    base, ref = B.load_cached(models, ds)
    imgs, probs, gts, embs = [], [], [], []
    with torch.inference_mode():
        for f in files:
            img, gt = ds.read(f)
            x, _ = prepare_image(img, ref.prototypes.mean, ref.prototypes.std)
            imgs.append(img); gts.append(gt); probs.append(B.base_probs_of(base, img)); embs.append(ref.embedder(x))
    return imgs, probs, gts, embs, ref.prototypes.vectors

def run_version(v, inputs, ds, vectors, **kwargs):
    "`calibrate` of the version `v` of brefine (its package, whose top level every version exports the names from) on `inputs`, with `kwargs`: (seconds, result)."
    import torch
    imgs, probs, gts, embs = inputs
    protos = v.Prototypes(vectors, torch.full((len(vectors),), 100), train_radius=3, mean=B.IMAGENET_MEAN, std=B.IMAGENET_STD)
    t = time.perf_counter()
    cal = v.calibrate(Stored(embs), protos, imgs, probs, gts, ignore_index=ds.void, progress=False, **kwargs)
    return time.perf_counter() - t, cal

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    import torch, cv2, brefine
    torch.set_num_threads(a.threads); cv2.setNumThreads(a.threads)
    started = provenance('bench/calibrate.py', argv)
    ds = B.load_dataset(a.dataset, a.data)
    files = ds.files('val')[:a.images]
    *inputs, vectors = (real(ds, files, a.models) if a.models else synthetic(ds, files))
    before = package_at(a.before)
    B.log(f'{len(files)} {ds.name} val images; calibrating with {a.before} ...')
    t_before, cal_before = run_version(before, inputs, ds, vectors)
    B.log(f'{a.before}: {t_before:.1f} s; now ...')
    t_now, cal_now = run_version(brefine, inputs, ds, vectors, **({} if a.search is None else dict(search=a.search)))
    B.log(f'now: {t_now:.1f} s')
    strip = lambda t: [{k: v for k, v in r.items() if k not in ('seconds', 'images')} for r in t]
    pairs = zip(strip(cal_now['table']), strip(cal_before['table']), cal_now['table'])
    full = [(x, y) for x, y, r in pairs if r.get('images', len(files)) == len(files)]    # the rows measured on every image
    same_full = len(cal_now['table']) == len(cal_before['table']) and all(x == y for x, y in full)
    same_choice = (cal_now['settings'].__dict__ == cal_before['settings'].__dict__
                   and (cal_now['boundary_f1'], cal_now['miou']) == (cal_before['boundary_f1'], cal_before['miou']))
    res = dict(seconds=round(t_now, 1), seconds_before=round(t_before, 1), before=a.before, n_settings=len(cal_now['table']),
               n_images=len(files), same_choice=same_choice, same_full_rows=same_full, n_full_rows=len(full),
               same_table=strip(cal_now['table']) == strip(cal_before['table']), search=a.search or 'default',
               chosen=cal_now['settings'].__dict__, val_boundary_f1=cal_now['boundary_f1'], val_miou=cal_now['miou'],
               inputs='models in ' + str(a.models) if a.models else 'synthetic', dataset=ds.name, threads=a.threads, **started)
    print(json.dumps(res, indent=1))
    if a.record:
        out = RESULTS/'calibrate.json'
        out.write_text(json.dumps(res, indent=1) + '\n')
        record('calibrate', out, argv, t_now + t_before, script='bench/calibrate.py', started=started)

if __name__ == '__main__':
    main()
