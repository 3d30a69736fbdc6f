"""Analyses of a benchmark run: where the base model is wrong, how brefine chooses, how settings compare (no training).

Each reads the models `bench/benchmark.py <dataset>` cached (`--cache`, default bench/out/<dataset>_cache; `--quick`
for the models of a --quick run, on the same small subset) and every `--every`-th image of `--split` (val by default;
test only to diagnose: settings are never chosen on test). `--record NAME` also writes the printout to
`bench/results/<dataset>/NAME.txt` and adds it to the manifest (`bench/record.py`).

- `errors`: per class, the base model's IoU and brefine's (the calibrated `Refiner` bundle); of the pixels of that class
  the base gets wrong, the share inside a band of `--radius` around the base's boundaries, and where the true class
  ranks in the base's scores (2nd, 3rd, 4th, 5th or lower): what a band-and-top-N refinement can reach.
- `choice`: band pixels (radius `--radius` around the base's arg-max, void excluded; band, candidates and distances from
  `relabel(..., stages=True)`, as brefine decides) whose true class is among the base's
  top `--top-n`, the only ones a top-N refinement can fix or break. How often the right class is there at all, and how
  often each rule picks it: the base (its top-1), the nearest prototype by Euclidean distance (brefine's rule), by
  cosine distance, and the nearest with the base weight alpha (|e - E_c|^2 - alpha log p_c; 0.3, 1, 3 and the bundle's
  calibrated alpha, which is the recipe's rule); per-class recall. With
  `--modes K`, also the nearest of K prototypes per class (k-means of the class's training band embeddings); with
  `--spread`, also the most likely class under an isotropic Gaussian per class, |e - E_c|^2 / s_c + C log s_c, s_c the
  mean squared distance per dimension of the class's training band embeddings to E_c. With `--fit`, also fusions fitted on
  the split's own band pixels, two-fold across images (fitted on the first half of the images, scored on the second, and
  the other way round, so that neighbouring video frames never sit on both sides); with `--refit`, also the
  nearest of prototypes fitted the same way (the class means moved, with a distance scale, alpha and a bias per class, to
  minimise the cross-entropy of the choice among the top-N), with and without the base's scores.
- `settings`: `relabel` with each given setting, written radius,top_n,tau,alpha,vote[,grey[,passes]] (tau `none`: no gate;
  none given: the bundle's calibrated settings), from base probabilities and embeddings computed once; mIoU, boundary
  F @ 3 px and post-processing milliseconds per image, and the base's scores; `--grey-passes 1 2 3` runs each setting with
  a grey-level weight with that many vote passes.

Usage (from the repository root):

    .venv/bin/python bench/analyse.py errors stanford                      # every 2nd val image, band radius 4
    .venv/bin/python bench/analyse.py choice camvid --top-n 3 --split test --every 8
    .venv/bin/python bench/analyse.py settings camvid --every 1 18,2,0.9,0,11 18,3,0.9,0.1,5 --record camvid_settings_new
    .venv/bin/python bench/analyse.py errors stanford --quick --cache bench/out/smoke_cache       # on a --quick run's models
"""
from __future__ import annotations
import argparse, re, sys, time
from pathlib import Path

import benchmark as B
from record import RESULTS, printout

def parse_setting(s: str):
    "radius,top_n,tau,alpha,vote[,grey[,passes]] as a `RefineSettings` (tau 'none': no gate)."
    from brefine.refine import RefineSettings
    try:
        r, k, t, a, v, *g = s.split(',')
        if len(g) > 2: raise ValueError
        return RefineSettings(radius=int(r), top_n=int(k), tau=None if t.lower() == 'none' else float(t), alpha=float(a), vote=int(v),
                              grey=float(g[0]) if g else None, **(dict(passes=int(g[1])) if len(g) > 1 else {}))
    except (ValueError, TypeError): raise argparse.ArgumentTypeError(f'expected radius,top_n,tau,alpha,vote[,grey[,passes]], got {s!r}') from None

def parse_args(argv=None):
    doc = __doc__.split('\n\n')
    p = argparse.ArgumentParser(description=doc[0], epilog='\n\n'.join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='analysis', required=True)
    common = argparse.ArgumentParser(add_help=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    common.add_argument('dataset', choices=sorted(B.DATA_DIRS), help='the data set of the benchmark run')
    common.add_argument('--data', type=Path, default=None, help='data folder (default: in $BREFINE_DATA)')
    common.add_argument('--cache', type=Path, default=None, help="the run's models (default: bench/out/<dataset>_cache)")
    common.add_argument('--quick', action='store_true', help='the models of a --quick run, on its subset of the data')
    common.add_argument('--split', default='val', choices=('train', 'val', 'test'), help='test only to diagnose')
    common.add_argument('--embedder', default='shared', choices=('separate', 'shared'), help="the run's embedder")
    common.add_argument('--train-blocks', type=int, default=None, help="the run's --train-blocks (shared embedder; default: the library's)")
    common.add_argument('--fusion', default=None, help="the run's --fusion (default: the library's)")
    common.add_argument('--feature-views', type=int, default=None, help="the run's --feature-views (default: none)")
    common.add_argument('--bf16', action='store_true', help="the run's --bf16")
    common.add_argument('--tune-choice', type=int, default=None, metavar='EPOCHS', help="the run's --tune-choice (the tuned embedder's models)")
    common.add_argument('--threads', type=int, default=2, help='torch threads')
    common.add_argument('--record', metavar='NAME', default=None, help='also write the printout to bench/results/<dataset>/NAME.txt and record it')
    blurb = dict(re.findall(r'^- `(\w+)`: (.*?)(?=^- `|\Z)', __doc__.split('\n\n')[2], re.S | re.M))
    short = dict(errors="per class: base and brefine IoU, wrong pixels in the band, the truth's rank in the base's scores",
                 choice="band pixels: the truth among the base's top N, and how often each rule picks it",
                 settings='mIoU, boundary F and time of given brefine settings')
    mk = lambda k: sub.add_parser(k, parents=[common], help=short[k], description=blurb[k],
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e = mk('errors')
    e.add_argument('--radius', type=int, default=4, help='band radius'); e.add_argument('--every', type=int, default=2, help='every N-th image')
    c = mk('choice')
    c.add_argument('--radius', type=int, default=4, help='band radius'); c.add_argument('--every', type=int, default=4, help='every N-th image')
    c.add_argument('--top-n', type=int, default=2, help="candidates: the base's top N")
    c.add_argument('--modes', type=int, default=0, help='also: K prototypes per class (k-means of its training band embeddings), the nearest of them')
    c.add_argument('--local', type=float, default=0, metavar='CONF', help="also: image-local prototypes, each class's mean embedding over the image's pixels the base labels that class with top-1 probability >= CONF outside the band, mixed with the global prototype by a weight beta")
    c.add_argument('--fit', action='store_true', help="also: a fusion fitted on the split's own band pixels, two-fold across images "
                   "(fitted on one half, scored on the other): each candidate's score w_d·(-distance) + w_p·log p + b_class, with one "
                   "distance weight or one per class (conditional logit over the top-N)")
    c.add_argument('--refit', action='store_true', help="also: prototypes fitted on the split's own band pixels, two-fold across "
                   "images: each candidate's score -s·|e - P_c|^2 + alpha·log p_c + b_c, P started at the class means (conditional "
                   "logit over the top-N, L-BFGS); with alpha, and with alpha held at 0 (the embedding alone)")
    c.add_argument('--spread', action='store_true', help="also: the most likely class under an isotropic Gaussian per class (its prototype, and its training band embeddings' spread)")
    s = mk('settings')
    s.add_argument('settings', nargs='*', type=parse_setting, help="radius,top_n,tau,alpha,vote[,grey[,passes]] (none: the bundle's)")
    s.add_argument('--every', type=int, default=2, help='every N-th image')
    s.add_argument('--grey-passes', type=int, nargs='+', default=None, metavar='N',
                   help="run the settings with a grey-level weight with each of these numbers of vote passes (default: the setting's)")
    a, rest = p.parse_known_args(argv)
    if rest:                                             # settings given after options: argparse leaves them over
        if a.analysis != 'settings' or any(r.startswith('-') for r in rest): p.error(f"unrecognized arguments: {' '.join(rest)}")
        try: a.settings += [parse_setting(r) for r in rest]
        except argparse.ArgumentTypeError as e: p.error(str(e))
    if a.every < 1: p.error(f'--every must be >= 1, got {a.every}')
    if a.record is not None and (not a.record or Path(a.record).name != a.record or a.record.startswith('.')):
        p.error(f'--record needs a plain file name, got {a.record!r}')
    a.cache = a.cache or B.REPO/f'bench/out/{a.dataset}_cache'
    return a

def void_mask(ds, gt):
    "Pixels with a class label (not void, not out of range)."
    return (gt < ds.n_classes) & (gt != ds.void) if ds.void is not None else gt < ds.n_classes

def iou(cm):
    import numpy as np
    return np.diag(cm) / np.maximum(cm.sum(0) + cm.sum(1) - np.diag(cm), 1)

# --------------------------------------------------------------------------------------------------------------- errors
def errors(a, ds, fs):
    import numpy as np, torch
    from brefine.band import batch_band
    base, ref = B.load_cached(a.cache, ds, a.quick, a.embedder, train_blocks=a.train_blocks, bf16=a.bf16, fusion=a.fusion, feature_views=a.feature_views, tune_choice=a.tune_choice)
    n = ds.n_classes
    cm = {k: np.zeros((n, n), np.int64) for k in ('base', 'brefine')}
    rank, inband = np.zeros((n, n), np.int64), np.zeros((n, 2), np.int64)
    with torch.inference_mode():
        for f in fs:
            img, gt = ds.read(f)
            p = B.base_probs_of(base, img)
            b, r, v = p.argmax(0).numpy(), ref(img, p).numpy(), void_mask(ds, gt)
            g = gt.astype(np.int64)
            for k, pr in (('base', b), ('brefine', r)): cm[k] += np.bincount(g[v] * n + pr[v], minlength=n * n).reshape(n, n)
            wrong = v & (b != g)
            rk = ((-p.numpy()).argsort(0) == g[None]).argmax(0)
            band = batch_band(torch.from_numpy(b), a.radius).numpy()
            for c in range(n):
                m = wrong & (g == c)
                rank[c] += np.bincount(rk[m], minlength=n); inband[c] += [int((m & band).sum()), int(m.sum())]
    w = max(11, max(len(c) for c in ds.codes))
    print(f'{len(fs)} {a.split} images; brefine settings {ref.settings}')
    print(f"{'class':{w}s} {'IoU base':>8s} {'brefine':>8s} {'wrong px':>9s} {'in band':>8s}   truth ranks 2nd 3rd 4th 5th+ in the base's scores")
    for c in range(n):
        t = max(rank[c].sum(), 1)
        print(f'{ds.codes[c]:{w}s} {iou(cm["base"])[c]:8.2f} {iou(cm["brefine"])[c]:8.2f} {rank[c].sum():9d} '
              f'{inband[c, 0] / max(inband[c, 1], 1):8.2f}   ' + ' '.join(f'{x / t:.2f}' for x in (*rank[c, 1:4], rank[c, 4:].sum())))
    print(f"{'mean':{w}s} {iou(cm['base']).mean():8.4f} {iou(cm['brefine']).mean():8.4f}")

# --------------------------------------------------------------------------------------------------------------- choice
def choice(a, ds, fs):
    import numpy as np, torch, torch.nn.functional as F
    from brefine.triplets import sample_features
    from brefine.inputs import prepare_image
    from brefine.refine import RefineSettings, relabel
    base, ref = B.load_cached(a.cache, ds, a.quick, a.embedder, train_blocks=a.train_blocks, bf16=a.bf16, fusion=a.fusion, feature_views=a.feature_views, tune_choice=a.tune_choice)
    net, pr, n = ref.embedder, ref.prototypes, ds.n_classes
    V, Vn = pr.vectors, F.normalize(pr.vectors, dim=1)
    alphas = tuple(sorted({0.3, 1, 3, ref.settings.alpha} - {0}))      # with the bundle's calibrated alpha, the recipe's rule
    rules = ['base', 'euclidean', 'cosine'] + [f'{d} alpha={x}' for d in ('euclidean', 'cosine') for x in alphas]
    samples = class_samples(net, ds) if a.modes or a.spread else None      # once for both probes
    if a.modes: M = class_modes(*samples, a.modes); rules += [f'{a.modes} modes'] + [f'{a.modes} modes alpha={x}' for x in alphas]
    if a.spread:
        var = class_spread(samples[0], V); rules += ['gaussian'] + [f'gaussian alpha={x}' for x in alphas]
        print('per-class spread (mean squared distance per dimension to the prototype):', {ds.codes[i]: round(v.item(), 4) for i, v in enumerate(var)})
    betas = (0.25, 0.5, 1)
    if a.local: rules += [f'local beta={b}' for b in betas] + [f'local beta={b} alpha={x}' for b in betas for x in alphas]
    if a.fit: rules += ['fitted (2-fold)', 'fitted per class (2-fold)']
    if a.refit: rules += ['refit prototypes (2-fold)', 'refit prototypes alpha (2-fold)', 'refit prototypes alpha, no bias (2-fold)']
    right, total, band_px, kept = dict.fromkeys(rules, 0), 0, 0, []
    per = {k: torch.zeros(n, 2) for k in ('base', 'euclidean') + ((f'{a.modes} modes',) if a.modes else ()) + (('gaussian',) if a.spread else ())}
    rule = RefineSettings(radius=a.radius, top_n=a.top_n, tau=None, alpha=0., vote=0)   # every band pixel, no vote
    with torch.inference_mode():
        for i, f in enumerate(fs):
            img, gt = ds.read(f)
            x = prepare_image(img, B.IMAGENET_MEAN, B.IMAGENET_STD)[0]; p = base(x).softmax(1); emb = net(x)
            st = relabel(emb, p, pr, rule, stages=True)   # the band, its candidates and their distances, as brefine decides
            band = st.band[0]
            y, xx = st.pixels // gt.shape[1], st.pixels % gt.shape[1]
            g = torch.from_numpy(gt.astype(np.int64))[y, xx]
            labelled = torch.from_numpy(void_mask(ds, gt))[y, xx]
            ok = (st.candidates == g[:, None]).any(1) & labelled
            band_px += int(labelled.sum())
            cand, g, d_e = st.candidates[ok], g[ok], st.distances[ok]   # (K,N): per candidate, best first
            fe = sample_features(emb, torch.zeros_like(y), y, xx, gt.shape)[ok]
            lp, on = st.candidate_probs[ok].clamp_min(1e-12).log(), lambda d: d.gather(1, cand)   # `on`: (K,n) to candidates
            d_c = on(2 * (1 - F.normalize(fe, dim=1) @ Vn.t()))
            pick = lambda d: cand.gather(1, d.argmin(1, keepdim=True))[:, 0]   # d: (K,N) per candidate
            picks = {'base': cand[:, 0], 'euclidean': pick(d_e), 'cosine': pick(d_c)}
            for x_ in alphas: picks[f'euclidean alpha={x_}'] = pick(d_e - x_ * lp); picks[f'cosine alpha={x_}'] = pick(d_c - x_ * lp)
            if a.modes:
                d_m = on((torch.cdist(fe, M.flatten(0, 1)) ** 2).view(len(fe), n, a.modes).amin(2))   # each class's nearest mode
                picks[f'{a.modes} modes'] = pick(d_m)
                for x_ in alphas: picks[f'{a.modes} modes alpha={x_}'] = pick(d_m - x_ * lp)
            if a.spread:                                                       # -2 log N(e; E_c, var_c I), up to a constant
                d_g = d_e / var[cand] + fe.shape[1] * var.log()[cand]
                picks['gaussian'] = pick(d_g)
                for x_ in alphas: picks[f'gaussian alpha={x_}'] = pick(d_g - x_ * lp)
            if a.local:                                                        # the image's own confident pixels outside the band
                keep = torch.zeros_like(band); keep[::4, ::4] = True
                ly, lx = (keep & ~band & (p[0].amax(0) >= a.local)).nonzero(as_tuple=True)
                lc = p[0].argmax(0)[ly, lx]
                L = torch.zeros_like(V).index_add_(0, lc, sample_features(emb, torch.zeros_like(ly), ly, lx, gt.shape))
                cnt = torch.bincount(lc, minlength=n).float()[:, None]
                L, have = L / cnt.clamp_min(1), cnt >= 16
                for b in betas:
                    d_l = on(torch.cdist(fe, torch.where(have, (1 - b) * V + b * L, V)) ** 2)
                    picks[f'local beta={b}'] = pick(d_l)
                    for x_ in alphas: picks[f'local beta={b} alpha={x_}'] = pick(d_l - x_ * lp)
            if a.fit or a.refit:
                fold = int(i >= len(fs) // 2)   # first and second half: neighbouring video frames stay on one side
                d_fit = d_e.nan_to_num(posinf=4.)   # a class without a prototype: the farthest unit vectors' distance
                kept.append((cand, d_fit, lp, g, fold) + ((fe,) if a.refit else ()))
            for k, v in picks.items(): right[k] += int((v == g).sum())
            for k in per:
                per[k][:, 0] += torch.bincount(g[picks[k] == g], minlength=n).float(); per[k][:, 1] += torch.bincount(g, minlength=n).float()
            total += int(ok.sum())
    if a.fit:
        for k, per_class in (('fitted (2-fold)', False), ('fitted per class (2-fold)', True)): right[k] = fitted_right(kept, n, per_class)
    if a.refit:
        for k, with_base, bias in (('refit prototypes (2-fold)', False, True), ('refit prototypes alpha (2-fold)', True, True),
                                   ('refit prototypes alpha, no bias (2-fold)', True, False)):
            right[k] = refit_right(kept, V, with_base, bias)
    print(f'{len(fs)} {a.split} images; band radius {a.radius} around the base arg-max: {band_px} labelled band pixels, '
          f'{total} ({total / max(band_px, 1):.3f}) with the truth in the base top-{a.top_n}')
    for k in rules: print(f'  {k:22s} picks the truth {right[k] / max(total, 1):.3f}')
    for k, t in per.items():
        r = t[:, 0] / t[:, 1].clamp_min(1)
        print(f'  per-class recall, {k}:', {ds.codes[i]: round(r[i].item(), 2) for i in range(n) if t[i, 1] > 0})

def fitted_right(kept: list, n: int, per_class: bool, most: int = 200_000, seed: int = 0) -> int:
    "Band pixels whose truth the fitted fusion picks, two-fold: weights fitted (conditional logit, L-BFGS) on the images of one fold, at most `most` pixels, and scored on the other. `kept`: per image (candidates (K,N), their squared distances (K,N), log-probabilities (K,N), truth (K,), fold)."
    import torch
    def scores(w, cand, d, lp):
        wd = w[2 + n:][cand] if per_class else w[0]
        return -wd * d + w[1] * lp + w[2:2 + n][cand]
    right = 0
    for f in (0, 1):
        tr, te = _fold(kept, f), _fold(kept, 1 - f)
        if tr is None or te is None: continue
        g = torch.Generator().manual_seed(seed); i = torch.randperm(len(tr[0]), generator=g)[:most]
        cand, d, lp, y = (t[i] for t in tr)
        target = (cand == y[:, None]).float().argmax(1)
        w = torch.zeros(2 + n + (n if per_class else 0)); w[0] = 1.; w[1] = 0.3
        if per_class: w[2 + n:] = 1.
        w.requires_grad_(True)
        opt = torch.optim.LBFGS([w], max_iter=100, line_search_fn='strong_wolfe')
        def closure():
            opt.zero_grad(); loss = torch.nn.functional.cross_entropy(scores(w, cand, d, lp), target) + 1e-4 * (w[2:] ** 2).sum(); loss.backward(); return loss
        with torch.enable_grad(): opt.step(closure)
        with torch.no_grad():
            cand, d, lp, y = te
            right += int((cand.gather(1, scores(w, cand, d, lp).argmax(1, keepdim=True))[:, 0] == y).sum())
    return right

def _fold(kept: list, f: int, fields=(0, 1, 2, 3)):
    "The `fields` of the images of fold `f` in `kept` (whose field 4 is the fold), each concatenated over the images (None if the fold is empty)."
    import torch
    rows = [[r[i] for i in fields] for r in kept if r[4] == f]
    return [torch.cat(t) for t in zip(*rows)] if rows else None

def refit_right(kept: list, V, with_base: bool, bias: bool = True, most: int = 200_000, seed: int = 0) -> int:
    "Band pixels whose truth the nearest refitted prototype picks, two-fold: prototypes P (started at `V`), a distance scale, a bias per class and, `with_base`, a weight of the base's log-probabilities (without `bias`, no bias: the fitted prototypes and alpha are then all a `RefineSettings` and `Prototypes` hold), fitted (conditional logit over the candidates, L-BFGS) on the images of one fold, at most `most` pixels, and scored on the other. `kept` as in `fitted_right`, each with the image's band embeddings last."
    import torch
    n = len(V)
    def scores(P, w, cand, lp, fe):
        d = (fe ** 2).sum(1, keepdim=True) - 2 * torch.einsum('kc,knc->kn', fe, P[cand]) + (P ** 2).sum(1)[cand]
        return -w[0] * d + (w[1] * lp if with_base else 0) + (w[2:][cand] if bias else 0)
    right = 0
    for f in (0, 1):
        tr, te = _fold(kept, f, (0, 2, 3, 5)), _fold(kept, 1 - f, (0, 2, 3, 5))
        if tr is None or te is None: continue
        g = torch.Generator().manual_seed(seed); i = torch.randperm(len(tr[0]), generator=g)[:most]
        cand, lp, y, fe = (t[i] for t in tr)
        target = (cand == y[:, None]).float().argmax(1)
        P, w = V.clone().requires_grad_(True), torch.zeros(2 + n)
        w[0], w[1] = 1., 0.3; w.requires_grad_(True)
        opt = torch.optim.LBFGS([P, w], max_iter=200, line_search_fn='strong_wolfe')
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(scores(P, w, cand, lp, fe), target) + 1e-4 * (w[2:] ** 2).sum()
            loss.backward(); return loss
        with torch.enable_grad(): opt.step(closure)
        with torch.no_grad():
            cand, lp, y, fe = te
            right += int((cand.gather(1, scores(P, w, cand, lp, fe).argmax(1, keepdim=True))[:, 0] == y).sum())
    return right

def class_samples(net, ds, radius: int = 3, per_image: int = 2000, seed: int = 0) -> tuple:
    "(per class, embeddings (K_c, C) at the training images' label-map band (as `extract_prototypes` reads them), at most `per_image` pixels per class and image, None for a class absent from training; the random generator, to go on drawing from)."
    import numpy as np, torch
    from brefine.band import batch_band
    from brefine.triplets import sample_features
    from brefine.inputs import prepare_image
    g, feats = torch.Generator().manual_seed(seed), [[] for _ in range(ds.n_classes)]
    with torch.inference_mode():
        for f in ds.files('train'):
            img, gt = ds.read(f)
            lab = torch.from_numpy(gt.astype(np.int64))
            y, x = (batch_band(lab[None], radius, ds.void)[0] & torch.from_numpy(void_mask(ds, gt))).nonzero(as_tuple=True)
            fe, c = sample_features(net(prepare_image(img, B.IMAGENET_MEAN, B.IMAGENET_STD)[0]), torch.zeros_like(y), y, x, gt.shape), lab[y, x]
            for i in c.unique().tolist():
                j = (c == i).nonzero()[:, 0]; feats[i].append(fe[j[torch.randperm(len(j), generator=g)[:per_image]]])
    return [torch.cat(fs) if fs else None for fs in feats], g

def class_modes(feats: list, g, k: int):
    "(n_classes, k, C): k-means (k per class, 25 Lloyd steps, initial modes drawn with generator `g`) of the per-class samples `feats` of `class_samples`."
    import torch
    C = next(len(x[0]) for x in feats if x is not None)
    modes = []
    for x in feats:
        if x is None: modes.append(torch.full((k, C), 1e3)); continue            # a class absent from training: never the nearest
        m = x[torch.randperm(len(x), generator=g)[:k]].clone()
        for _ in range(25):
            a = torch.cdist(x, m).argmin(1)
            for j in range(len(m)):
                if (a == j).any(): m[j] = x[a == j].mean(0)
        modes.append(torch.cat([m, m[:1].expand(k - len(m), -1)]))       # fewer pixels than k: repeat a mode
    return torch.stack(modes)

def class_spread(feats: list, vectors):
    "(n_classes,): per class, the mean squared distance per dimension of its samples `feats[c]` (from `class_samples`) to its prototype `vectors[c]` (an isotropic variance); inf for a class absent from training."
    import torch
    return torch.stack([((x - v) ** 2).mean() if x is not None else torch.tensor(float('inf')) for x, v in zip(feats, vectors)])

# ------------------------------------------------------------------------------------------------------------- settings
def settings(a, ds, fs):
    import torch
    from brefine.inputs import prepare_image
    from brefine.vote import grey_levels
    from brefine.refine import relabel
    from brefine.metrics import mean_iou, boundary_f1
    base, ref = B.load_cached(a.cache, ds, a.quick, a.embedder, train_blocks=a.train_blocks, bf16=a.bf16, fusion=a.fusion, feature_views=a.feature_views, tune_choice=a.tune_choice)
    cache, gts = [], []
    with torch.inference_mode():
        for f in fs:
            img, gt = ds.read(f); gts.append(gt)
            x, _ = prepare_image(img, ref.prototypes.mean, ref.prototypes.std)
            cache.append((ref.embedder(x), B.base_probs_of(base, img)[None], grey_levels(x, ref.prototypes.mean, ref.prototypes.std)))
    score = lambda preds: (100 * mean_iou(preds, gts, ds.n_classes, ignore_index=ds.void),
                           100 * boundary_f1(preds, gts, ds.n_classes, tolerance=3, ignore_index=ds.void))
    print(f'{len(fs)} {a.split} images (every {a.every}); embedder {ref.embedder.config}; training band radius of the prototypes {ref.prototypes.train_radius}')
    tried = a.settings or [ref.settings]
    w = max(len(str(s)) for s in tried)
    print(f"{'setting':{w}s} {'mIoU':>6s} {'bF@3':>6s} {'ms/img':>7s}")
    m, b = score([p[0].argmax(0).numpy() for _, p, _ in cache])
    print(f"{'base':{w}s} {m:6.2f} {b:6.2f}")
    from dataclasses import replace
    with torch.inference_mode():
        for s in tried:
            for n in (a.grey_passes or [s.passes]) if s.grey is not None else [None]:
                if n is not None: s = replace(s, passes=n)
                t = time.perf_counter()
                preds = [relabel(e, p, ref.prototypes, s, levels=lv)[0].numpy() for e, p, lv in cache]
                dt = (time.perf_counter() - t) / len(cache)
                m, b = score(preds)
                print(f"{str(s):{w}s} {m:6.2f} {b:6.2f} {1e3 * dt:7.1f}", flush=True)

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    ds = B.load_dataset(a.dataset, a.data, a.quick)
    fs = ds.files(a.split)[::a.every]
    try:
        with printout('bench/analyse.py', argv, RESULTS/a.dataset/f'{a.record}.txt' if a.record else None):
            dict(errors=errors, choice=choice, settings=settings)[a.analysis](a, ds, fs)
    except FileNotFoundError as e: sys.exit(f'{type(e).__name__}: {e}')

if __name__ == '__main__': main()
