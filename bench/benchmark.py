"""Segmentation benchmark: a base model vs DenseCRF vs brefine, on any data set that `brefine.data` describes.

One recipe for every data set (nothing is set by hand for one of them):

1. base model: DeepLabV3-style MobileNetV2 at output stride 16 (torchvision's ImageNet `mobilenet_v2` features, the
   stride-32 block dilated, torchvision's `DeepLabHead`/ASPP with rates 6/12/18), trained with fastai on the training split
   (`fit_one_cycle`, cross-entropy with void ignored; the epoch with the best validation mIoU is kept).
2. brefine embedder: what `refine_learner`'s defaults build, `refine_learner(dls, base=base_model)`: a
   `SharedEmbeddingNet`, an ASPP + fusion head (32-d embeddings) on the base model's own features, trained together with
   copies of the base backbone's last two blocks (`train_blocks`; the base model itself is frozen), 16384 triplets per
   batch, float32, `fit_one_cycle`; one base forward then serves both. `--fusion sum` gives the head `EmbeddingHead`'s
   light fusion (1x1 projections added, one depthwise-separable 3x3 convolution) instead of DeepLabV3+'s two 3x3
   convolutions, `--train-blocks K` trains K copied blocks instead of two, and `--feature-views N` trains on the base
   model's features of N augmented passes over the training images, computed once (`FeatureCache`). Prototypes from the training images without
   augmentation (`extract_prototypes`, radius 3). `--embedder separate` trains an `EmbeddingNet` with a MobileNetV2 of
   its own instead, started from the base model's backbone (`refine_learner(dls, backbone='mobilenet_v2',
   backbone_init=base.backbone)`, the same head), the path for base models that are not PyTorch modules.
   Training length is a budget of pixels, not epochs per data set: the base model sees BASE_BUDGET_PX training pixels,
   the embedder EMB_BUDGET CamVid epochs (8 and 32 epochs of CamVid's 367 images at 360x480; --emb-budget sets the
   embedder's); the epochs follow from the data.
   Training batches use full images when every training image has the same size, else images resized to the most
   common size (the DataBlock's `size`).
3. settings chosen on the validation split: brefine with `Refiner.calibrate`'s default grid, DenseCRF's bilateral
   (sxy, srgb, compat) by the same objective (the mean of boundary F @ 3 px and mIoU) on an evenly spaced subset.
4. test split: every image predicted, refined and scored at its own size: mIoU, boundary IoU (2 % of the diagonal),
   boundary F @ 3 px, trimap IoU @ 5 px, and seconds per image of the base forward, DenseCRF and brefine (embedder
   forward + post-processing, each from the raw image).

`--fit-prototypes` adds a step between 2 and 3: the prototypes fitted to the choice on the validation images
(`fit_prototypes`: the class means moved so that, with a fitted base weight, the nearest picks the truth among the top N
most often), the fitted base weight added to the calibration grid's.

`--post-budget F` restricts step 3 to the settings whose post-processing took at most F times the base forward, both
timed on the validation images (`calibrate(..., max_seconds=)`): the best trade within a cost.

Writes `<out>/<dataset>_results.md` (table), `<out>/<dataset>.json` ({"base", "densecrf", "brefine"} each with miou,
boundary_iou, boundary_f1, trimap_iou as fractions and seconds_per_image; "settings", "command", "git_commit", "date",
"machine", "seconds"), `<out>/<dataset>_figure.png` and `<out>/<dataset>_calibration.json` (every setting calibration
tried, with its validation scores and post-processing seconds per image, and the base forward's). Models are cached in `--cache` (`cache_files` names them), so a
rerun only evaluates; `load_cached` gives the cached base model and calibrated `Refiner` to other scripts and notebooks.

To record a run, give it a name: `--record NAME` writes `bench/results/<dataset>/NAME.md`, `NAME.json`,
`NAME_figure.png`, `NAME_calibration.json` and the run's log `NAME.log`, and adds the run to `bench/results/manifest.json` and its index
(`bench/record.py`). A record is never overwritten: the run refuses to start when `NAME.md` exists. A run with
`--out bench/results` is the data set's headline: it writes `bench/results/<dataset>.json` and the rest there, its log
in `bench/results/<dataset>/<dataset>.log`, and is recorded the same way.

Usage (from the repository root; data read in place from $BREFINE_DATA, see `brefine.datasets.camvid` / `stanford_background`):

    .venv/bin/python bench/benchmark.py stanford                  # Stanford Background: ~80 min from scratch on 2 cores
    .venv/bin/python bench/benchmark.py camvid                    # CamVid (SegNet split, 360x480): 8 + 32 epochs, ~80 min
    .venv/bin/python bench/benchmark.py stanford --record stanford_default    # the same, recorded in bench/results/stanford/
    .venv/bin/python bench/benchmark.py stanford --quick --out bench/out/smoke --cache bench/out/smoke_cache  # ~2 min

Needs `pip install pydensecrf2` (builds from source with gcc in about a minute).
"""
from __future__ import annotations
import argparse, contextlib, importlib, importlib.util, inspect, json, os, shutil, sys, time, itertools
from pathlib import Path
from record import RESULTS, in_results, provenance, record, tee_stdout

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get('BREFINE_DATA', REPO.parent/'shared/data'))   # where the data sets are read in place
DATA_DIRS = {'camvid': 'camvid/CamVid', 'stanford': 'stanford_background'}   # each data set's folder in DATA
WEIGHTS = REPO.parent/'shared/weights/mobilenet_v2-b0353104.pth'
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CAMVID_EPOCH_PX = 367 * 360 * 480        # the training pixels of one epoch of CamVid's training split
BASE_BUDGET_PX = 8 * CAMVID_EPOCH_PX     # training pixels for the base model
EMB_BUDGET = 32                          # the embedder's training pixels, in CamVid epochs (--emb-budget): brefine.learner.EMB_BUDGET_PX
EMBEDDERS = {'separate': dict(backbone='mobilenet_v2'), 'shared': {}}   # refine_learner's arguments besides its defaults
CRF_GRID = dict(sxy=(30, 50, 80), srgb=(3, 5, 10, 13), compat=(3, 5, 10))
QUICK_CAL = dict(radii=(2, 4), top_ns=(2, 3), taus=(None,), alphas=(0., 0.1), votes=(0, 5))
QUICK_CRF = dict(sxy=(50,), srgb=(13,), compat=(4, 10))
QUICK_SPLITS = dict(train=8, val=4, test=4)       # --quick: the first images of each split
BASE_FILE = 'base_mnv2os16_e{}.pth'                                                               # cache names by epochs
GIVEN_BASE = 'base_given.pth'                    # the base model of a run with --base, kept in its cache
EMB_FILES = {'separate': 'emb_mnv2_d32_a64_dec48_initbase_tri16384_e{}.pt', 'shared': 'emb_shared_d32_a64_dec48_tri16384_e{}.pt'}

def embedder_kwargs(kind: str, train_blocks: int|None = None, bf16: bool = False, fusion: str|None = None, feature_views: int|None = None) -> dict:
    "refine_learner's arguments for the embedder `kind`; for 'shared', `train_blocks` copies of the base's last blocks train with the head (None: the default); `bf16`: bfloat16 mixed-precision training; `fusion`: the head's (None: the default); `feature_views`: cached views of the base's features (None: none)."
    kw = dict(EMBEDDERS[kind])
    if train_blocks is not None: kw['train_blocks'] = train_blocks
    if fusion is not None: kw['fusion'] = fusion
    if bf16: kw['bf16'] = True
    if feature_views: kw['feature_views'] = feature_views
    return kw

def learner_call(args) -> str:
    "The `refine_learner` call that trains the run's embedder, as text."
    start = 'base=base_model' if args.embedder == 'shared' else 'pretrained=True, backbone_init=base_model.backbone'
    return f"refine_learner(dls, {start}{''.join(f', {k}={v!r}' for k, v in embedder_kwargs(args.embedder, args.train_blocks, args.bf16, args.fusion, args.feature_views).items())}, ignore_index=void)"

def emb_file_name(kind: str, n_epochs: int, train_blocks: int|None = None, bf16: bool = False, fusion: str|None = None, feature_views: int|None = None) -> str:
    "The cache file of an embedder of `kind` trained `n_epochs` epochs (with `train_blocks` trained base blocks: `_tbK` in the name; in bfloat16: `_bf16`; a head with `fusion` 'sum': `_sum`; on `feature_views` cached views: `_fvN`)."
    from brefine.shared_backbone import TRAIN_BLOCKS
    if train_blocks is None: train_blocks = TRAIN_BLOCKS if kind == 'shared' else 0     # the default on this benchmark's base model
    name = EMB_FILES[kind].format(n_epochs)
    if (fusion or 'concat') != 'concat': name = name.replace('_tri', f'_{fusion}_tri')
    if train_blocks: name = name.replace('_tri', f'_tb{train_blocks}_tri')
    if feature_views: name = name.replace('_tri', f'_fv{feature_views}_tri')
    return name.replace('_tri', '_bf16_tri') if bf16 else name

T0 = time.perf_counter()
def log(*a): print(f'[{time.perf_counter() - T0:7.1f}s]', *a, flush=True)

class stage:
    "Context manager logging the wall time of a stage."
    times = {}
    def __init__(self, name): self.name = name
    def __enter__(self): log(f'== {self.name} ...'); self.t = time.perf_counter(); return self
    def __exit__(self, *exc):
        stage.times[self.name] = dt = time.perf_counter() - self.t
        log(f'== {self.name}: {dt:.1f} s' + (' (FAILED)' if exc[0] else ''))

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('dataset', choices=sorted(DATA_DIRS), help='which data set (read in place from --data)')
    p.add_argument('--data', type=Path, default=None, help='data folder (default: the shared copy beside the repository)')
    p.add_argument('--cache', type=Path, default=None, help='trained models (default: bench/out/<dataset>_cache; git-ignored)')
    p.add_argument('--out', type=Path, default=REPO/'bench/out', help='results folder')
    p.add_argument('--record', metavar='NAME', default=None,
                   help='record the run: results, figure and log as bench/results/<dataset>/NAME.*, and an entry in the manifest')
    p.add_argument('--quick', action='store_true', help='smoke run: 8/4/4 images, 1 epoch each, small grids, 1 thread')
    p.add_argument('--threads', type=int, default=2, help='torch / OpenCV threads')
    p.add_argument('--crf-val', type=int, default=20, help='validation images for the DenseCRF grid (evenly spaced)')
    p.add_argument('--seed', type=int, default=0, help='training seed (fastai set_seed)')
    p.add_argument('--train-only', action='store_true', help='stop after training (and caching) the models')
    p.add_argument('--embedder', choices=sorted(EMBEDDERS), default='shared',
                   help="brefine's embedder: a MobileNetV2 of its own, started from the base model's backbone ('separate'), "
                        "or a head on the base model's own features ('shared')")
    p.add_argument('--train-blocks', type=int, default=None, metavar='K',
                   help="with --embedder shared: also train copies of the base backbone's last K blocks (0: the head only; default: refine_learner's, 2)")
    p.add_argument('--fusion', default=None,
                   help="how the embedder's head fuses its two features: 'concat' (DeepLabV3+'s two 3x3 convolutions) or 'sum' "
                        "(1x1 projections added, one depthwise-separable 3x3); default: refine_learner's")
    p.add_argument('--feature-views', type=int, default=None, metavar='N',
                   help="with --embedder shared: train the embedder on the base model's features of N augmented passes over the "
                        "training images, computed once (refine_learner's feature_views: faster epochs, fewer distinct augmentations; default: none)")
    p.add_argument('--bf16', action='store_true',
                   help="train the embedder in bfloat16 mixed precision (refine_learner's bf16=True: about 2x faster on CPUs with native bfloat16)")
    p.add_argument('--post-budget', type=float, default=None, metavar='FRACTION',
                   help="choose brefine's settings among those whose post-processing takes at most FRACTION of the base forward, "
                        "both timed on the validation images (calibrate's max_seconds; default: no limit)")
    p.add_argument('--emb-budget', type=float, default=EMB_BUDGET, metavar='EPOCHS',
                   help="the embedder's training pixels, in epochs of CamVid's training split (367 images at 360x480); "
                        "a data set's epochs follow from its size")
    p.add_argument('--base', type=Path, default=None, metavar='FILE',
                   help="the base model's weights (a state dict of this benchmark's base model, e.g. bench/converge.py's "
                        "base_converge_best.pth) instead of training it for the short budget; the cache defaults to "
                        "bench/out/<dataset>_cache_<FILE's name>")
    p.add_argument('--fit-prototypes', action='store_true',
                   help="fit the prototypes to the choice on the validation images (`fit_prototypes`) before calibrating; "
                        "the grid's base weights then include the fitted one")
    p.add_argument('--tune-choice', type=int, default=None, metavar='EPOCHS',
                   help="after the triplet training, train the embedder EPOCHS passes more on the decision itself "
                        "(brefine.choice.tune_choice, one training image a step, flipped at random), at the band and "
                        "candidates a first calibration on val chose; then extract the prototypes and calibrate again")
    p.add_argument('--ablation', action='store_true',
                   help="also score, with settings chosen on val: the vote alone (over the base's answer, no embedder), the "
                        "prototypes alone (no vote), and the oracle (band pixels take the true class when it is among the top-N)")
    p.add_argument('--base-only', action='store_true',
                   help="score only the base model of --base on the test split (no embedder, calibration or DenseCRF): the "
                        "row of a base trained longer instead, such as bench/converge.py's equal-compute weights")
    a = p.parse_args(argv)
    if a.base_only and a.base is None: p.error('--base-only scores the weights of --base FILE: give --base')
    if a.base_only and (a.ablation or a.fit_prototypes or a.train_only):
        p.error('--base-only scores the base alone: it does not combine with --ablation, --fit-prototypes or --train-only')
    if a.base is not None and not a.base.is_file(): p.error(f'--base {a.base}: no such file')
    if a.train_blocks is not None and a.embedder != 'shared': p.error('--train-blocks applies to --embedder shared only')
    if a.train_blocks is not None and a.train_blocks < 0: p.error(f'--train-blocks must be >= 0, got {a.train_blocks}')
    if a.feature_views is not None and (a.embedder != 'shared' or a.feature_views < 1): p.error(f'--feature-views takes N >= 1 with --embedder shared, got {a.feature_views}')
    if a.fusion is not None:
        from brefine.embedder import FUSIONS
        if a.fusion not in FUSIONS: p.error(f'--fusion must be one of {", ".join(FUSIONS)}, got {a.fusion!r}')
    if a.tune_choice is not None and (a.tune_choice < 1 or a.embedder != 'shared' or a.train_only or a.fit_prototypes):
        p.error(f'--tune-choice takes EPOCHS >= 1, with --embedder shared, in a run that scores (no --train-only or --fit-prototypes); got {a.tune_choice}')
    if a.post_budget is not None and not a.post_budget > 0: p.error(f'--post-budget must be > 0, got {a.post_budget}')
    a.data = a.data or DATA/DATA_DIRS[a.dataset]
    a.cache = a.cache or REPO/(f'bench/out/{a.dataset}_cache' + (f'_{a.base.stem}' if a.base else ''))
    if a.quick: a.threads = 1
    if a.record is not None:
        if not a.record or Path(a.record).name != a.record or a.record.startswith('.'): p.error(f'--record needs a plain file name, got {a.record!r}')
        if a.train_only: p.error('--record records results: it does not combine with --train-only')
        a.out = RESULTS/a.dataset
    return a

def outputs(args) -> dict:
    "The files a run writes: results table, JSON, figure, and with --record its log."
    if args.record is None:
        out = dict(md=args.out/f'{args.dataset}_results.md', json=args.out/f'{args.dataset}.json', png=args.out/f'{args.dataset}_figure.png',
                   table=args.out/f'{args.dataset}_calibration.json')
        return dict(out, log=args.out/args.dataset/f'{args.dataset}.log') if in_results(out['md']) else out   # a headline run keeps its log
    return {k: args.out/f'{args.record}{s}' for k, s in dict(md='.md', json='.json', png='_figure.png', log='.log', table='_calibration.json').items()}

# ---------------------------------------------------------------------------------------------------------------- setup
def load_dataset(name: str, root=None, quick: bool = False):
    "The `brefine.data` description of data set `name` ('camvid' or 'stanford') read from `root` (default: in DATA); `quick`: the smoke subset."
    from brefine.datasets import camvid, stanford_background
    ds = (camvid if name == 'camvid' else stanford_background)(root or DATA/DATA_DIRS[name])
    return ds.subset(**QUICK_SPLITS) if quick else ds

def setup(args):
    import torch, cv2
    torch.set_num_threads(args.threads); cv2.setNumThreads(args.threads)
    ck = Path(torch.hub.get_dir())/'checkpoints'
    if not (ck/WEIGHTS.name).exists():                   # the offline ImageNet file, where torchvision's weights API looks
        if not WEIGHTS.exists(): sys.exit(f'MobileNetV2 ImageNet weights missing: neither {ck/WEIGHTS.name} nor {WEIGHTS} exists.')
        ck.mkdir(parents=True, exist_ok=True)
        tmp = ck/(WEIGHTS.name + '.tmp'); shutil.copyfile(WEIGHTS, tmp); os.replace(tmp, ck/WEIGHTS.name)
    args.cache.mkdir(parents=True, exist_ok=True); args.out.mkdir(parents=True, exist_ok=True)
    return load_dataset(args.dataset, args.data, args.quick)

def epochs(budget_px: int, ds, quick: bool) -> int:
    "Epochs that spend `budget_px` training pixels on `ds`'s training split at its training size."
    if quick: return 1
    from brefine.learner import budget_epochs
    return budget_epochs(len(ds.files('train')), ds.train_size(), budget_px)

def tuned_file(emb_file: Path, n_epochs: int) -> Path:
    "The cache file of the embedder in `emb_file` after `n_epochs` on the choice (`--tune-choice`)."
    return emb_file.with_name(f'{emb_file.stem}_choice{n_epochs}.pt')

def cache_files(cache, ds, quick: bool = False, embedder: str = 'shared', emb_budget: float = EMB_BUDGET, train_blocks: int|None = None, bf16: bool = False,
                fusion: str|None = None, feature_views: int|None = None, tune_choice: int|None = None) -> dict:
    "The cached models of `ds` in `cache` (paths, whether they exist yet or not): base, embedder, prototypes, refiner bundle; `tune_choice`: those after that many epochs on the choice."
    emb = Path(cache)/emb_file_name(embedder, epochs(emb_budget * CAMVID_EPOCH_PX, ds, quick), train_blocks, bf16, fusion, feature_views)
    if tune_choice: emb = tuned_file(emb, tune_choice)
    return dict(base=Path(cache)/BASE_FILE.format(epochs(BASE_BUDGET_PX, ds, quick)), embedder=emb,
                prototypes=emb.with_name('protos_' + emb.stem + '.pt'), refiner=emb.with_name('refiner_' + emb.stem))

# ----------------------------------------------------------------------------------------------------------- base model
def base_model(n_classes: int, pretrained: bool = True):
    "DeepLabV3 with a MobileNetV2 backbone at output stride 16 (`brefine.backbones.DeepLabV3MobileNetV2`); logits at the input size."
    from brefine.backbones import DeepLabV3MobileNetV2
    return DeepLabV3MobileNetV2(n_classes, pretrained)

class BaseLoss:
    "Cross-entropy on the mask of (image, mask, band) batches, void ignored; the band is not used."
    def __init__(self, void):
        from fastai.losses import CrossEntropyLossFlat
        self.ce = CrossEntropyLossFlat(axis=1, ignore_index=-100 if void is None else void)
    def __call__(self, pred, mask, *_): return self.ce(pred, mask)
    def activation(self, x): return x.softmax(1)
    def decodes(self, x): return x.argmax(1)

def val_miou(n: int, void):
    "fastai metric: data-set mIoU over the validation set (confusion matrix accumulated, void ignored)."
    import torch
    from fastai.learner import Metric
    class ValMIoU(Metric):
        def reset(self): self.cm = torch.zeros(n, n, dtype=torch.long)
        def accumulate(self, learn):
            p = learn.pred.as_subclass(torch.Tensor).argmax(1).flatten().cpu()
            t = learn.yb[0].as_subclass(torch.Tensor).flatten().cpu().long()
            k = (t != void) & (t < n) if void is not None else t < n
            self.cm += torch.bincount(t[k] * n + p[k], minlength=n * n).view(n, n)
        @property
        def value(self):
            cm = self.cm.double(); inter = cm.diag(); union = cm.sum(0) + cm.sum(1) - inter
            return (inter[union > 0] / union[union > 0]).mean().item() if (union > 0).any() else float('nan')
        @property
        def name(self): return 'miou'
    return ValMIoU()

def _fit(learn, n_epochs, lr):
    log('  epoch columns:', ['epoch', 'train_loss', 'valid_loss'] + [m.name for m in learn.metrics] + ['time'])
    with learn.no_bar(): learn.fit_one_cycle(n_epochs, lr)

def load_base(f, n_classes):
    "The base model with the weights cached in `f`, in eval mode."
    from brefine.core import safe_load
    model = base_model(n_classes, pretrained=False)
    model.load_state_dict(safe_load(f, 'base model weights'))
    return model.eval()

def get_base(args, ds, dls_fn, n_epochs):
    "The trained base model, from the cache or trained now."
    import numpy as np
    from brefine.core import atomic_save
    if args.base is not None:                            # a given base model: kept in the cache, where `load_cached` finds it
        kept = args.cache/GIVEN_BASE
        if not kept.exists() or kept.read_bytes() != args.base.read_bytes():
            tmp = kept.with_name('.' + kept.name + '.tmp'); shutil.copyfile(args.base, tmp); os.replace(tmp, kept)
        log(f'base model loaded from {args.base}'); return load_base(kept, ds.n_classes)
    f = args.cache/BASE_FILE.format(n_epochs)
    if f.exists(): log(f'base model loaded from {f}'); return load_base(f, ds.n_classes)
    from fastai.learner import Learner
    from fastai.callback.tracker import SaveModelCallback
    from fastai.torch_core import set_seed
    importlib.import_module('fastai.callback.schedule')   # adds Learner.fit_one_cycle
    set_seed(args.seed)
    learn = Learner(dls_fn(), base_model(ds.n_classes), loss_func=BaseLoss(ds.void), metrics=[val_miou(ds.n_classes, ds.void)],
                    path=args.cache, model_dir='.', cbs=[SaveModelCallback(monitor='miou', comp=np.greater, fname=f.stem + '_best')])
    _fit(learn, n_epochs, 1e-3)                          # SaveModelCallback loads the best epoch at the end
    atomic_save({k: v.detach().cpu() for k, v in learn.model.state_dict().items()}, f)
    (args.cache/(f.stem + '_best.pth')).unlink(missing_ok=True)
    return learn.model.eval()

def load_cached(cache, ds, quick: bool = False, embedder: str = 'shared', emb_budget: float = EMB_BUDGET, train_blocks: int|None = None, bf16: bool = False,
                fusion: str|None = None, feature_views: int|None = None, tune_choice: int|None = None):
    "(base model, calibrated `Refiner`) that `bench/benchmark.py` cached for `ds` in `cache` (`quick`: those of a --quick run; `tune_choice`: of a --tune-choice run)."
    from brefine.refiner import Refiner
    f = cache_files(cache, ds, quick, embedder, emb_budget, train_blocks, bf16, fusion, feature_views, tune_choice)
    for k in ('base', 'refiner'):
        if k == 'base' and (Path(cache)/GIVEN_BASE).exists(): continue
        if not f[k].exists(): raise FileNotFoundError(f'{f[k]} not found: run bench/benchmark.py on {ds.name} with --cache {cache} first.')
    base = load_base(Path(cache)/GIVEN_BASE if (Path(cache)/GIVEN_BASE).exists() else f['base'], ds.n_classes)
    return base, Refiner.load(f['refiner'], base=base if embedder == 'shared' else None)

def base_probs_of(model, img):
    "(M,H,W) float32 softmax probabilities of the base model for a uint8 (H,W,3) image."
    import torch
    from brefine.inputs import prepare_image
    with torch.inference_mode(): return model(prepare_image(img, IMAGENET_MEAN, IMAGENET_STD)[0]).softmax(1)[0].contiguous()

# -------------------------------------------------------------------------------------------------------------- brefine
def get_embedder(args, ds, dls_fn, base, n_epochs):
    "The trained embedder (and its cache file), from the cache or trained now."
    from brefine.embedder_io import load_embedder, save_embedder
    from brefine.learner import refine_learner
    shared = args.embedder == 'shared'
    f = args.cache/emb_file_name(args.embedder, n_epochs, args.train_blocks, args.bf16, args.fusion, args.feature_views)
    if f.exists(): log(f'embedder loaded from {f}'); return load_embedder(f, base=base if shared else None), f
    from fastai.torch_core import set_seed
    set_seed(args.seed)
    start = dict(base=base) if shared else dict(pretrained=True, backbone_init=base.backbone)   # the base's features, or a copy of its backbone
    learn = refine_learner(dls_fn(), ignore_index=ds.void, path=args.cache, model_dir='.', **start, **embedder_kwargs(args.embedder, args.train_blocks, args.bf16, args.fusion, args.feature_views))
    _fit(learn, n_epochs, 1e-3)
    net = learn.model
    save_embedder(net, f)
    return net.eval(), f

def prototype_batches(ds, bs=4):
    "The training images without augmentation, normalised as in training, in (images, masks) batches of one size."
    import torch, numpy as np
    from brefine.inputs import prepare_image
    batch = []
    def out():
        return (torch.cat([prepare_image(im, IMAGENET_MEAN, IMAGENET_STD)[0] for im, _ in batch]),
                torch.from_numpy(np.stack([g for _, g in batch]).astype(np.int64)))
    for f in ds.files('train'):
        pair = ds.read(f)
        if batch and (len(batch) == bs or batch[0][1].shape != pair[1].shape): yield out(); batch = []
        batch.append(pair)
    if batch: yield out()

def get_prototypes(args, ds, embedder, emb_file):
    from brefine.band import TRAIN_RADIUS
    from brefine.prototypes import Prototypes, extract_prototypes
    f = emb_file.with_name('protos_' + emb_file.stem + '.pt')
    if f.exists(): log(f'prototypes loaded from {f}'); return Prototypes.load(f)
    p = extract_prototypes(embedder, prototype_batches(ds), ds.n_classes, train_radius=TRAIN_RADIUS, ignore_index=ds.void, names=ds.codes,
                           mean=IMAGENET_MEAN, std=IMAGENET_STD, progress=False)
    p.save(f); log(f'prototypes saved to {f}: {p}')
    return p

# ------------------------------------------------------------------------------------------------------------- DenseCRF
def crf_predict(img, probs, sxy, srgb, compat, n_iter=5):
    "DenseCRF labels (H,W) uint8 from a uint8 image (H,W,3) and probabilities (M,H,W) numpy float32."
    import numpy as np
    import pydensecrf.densecrf as dcrf
    from pydensecrf.utils import unary_from_softmax
    M, H, W = probs.shape
    d = dcrf.DenseCRF2D(W, H, M)
    d.setUnaryEnergy(np.ascontiguousarray(unary_from_softmax(probs)))
    d.addPairwiseGaussian(sxy=3, compat=3)
    d.addPairwiseBilateral(sxy=sxy, srgb=srgb, rgbim=np.ascontiguousarray(img), compat=compat)
    return np.asarray(d.inference(n_iter)).reshape(M, H, W).argmax(0).astype(np.uint8)

def scores(ds, preds, gts):
    "(boundary F @ 3 px, mIoU), the pair `OBJECTIVES['mean']` ranks."
    from brefine.metrics import boundary_f1, mean_iou
    return (boundary_f1(preds, gts, ds.n_classes, tolerance=3, ignore_index=ds.void), mean_iou(preds, gts, ds.n_classes, ignore_index=ds.void))

def tune_crf(args, ds, imgs, probs, gts):
    "The bilateral setting with the best objective on an evenly spaced subset of the validation images."
    import numpy as np
    from brefine.calibration import OBJECTIVES
    rank = OBJECTIVES['mean']
    idx = np.unique(np.linspace(0, len(imgs) - 1, min(args.crf_val, len(imgs))).round().astype(int))
    grid, best = (QUICK_CRF if args.quick else CRF_GRID), None
    for sxy, srgb, compat in itertools.product(grid['sxy'], grid['srgb'], grid['compat']):
        sc = scores(ds, [crf_predict(imgs[i], probs[i].numpy(), sxy, srgb, compat) for i in idx], [gts[i] for i in idx])
        log(f'  crf sxy={sxy} srgb={srgb} compat={compat}: BF {sc[0]:.4f} mIoU {sc[1]:.4f}')
        if best is None or rank(*sc) > rank(*best[0]): best = (sc, dict(sxy=sxy, srgb=srgb, compat=compat))
    return best[1], len(idx)

# --------------------------------------------------------------------------------------------------------------- report
def metrics_row(ds, preds, gts, seconds):
    from brefine.metrics import mean_iou, boundary_iou, boundary_f1, trimap_iou
    kw = dict(n_classes=ds.n_classes, ignore_index=ds.void)
    return dict(miou=mean_iou(preds, gts, **kw), boundary_iou=boundary_iou(preds, gts, **kw),
                boundary_f1=boundary_f1(preds, gts, tolerance=3, **kw), trimap_iou=trimap_iou(preds, gts, width=5, **kw),
                seconds_per_image=seconds)

def metric_cells(r) -> str:
    "The markdown cells of a metrics row: mIoU, boundary IoU, boundary F @ 3 px, trimap IoU @ 5 px, in points."
    return ' | '.join(f"{100 * r[k]:.2f}" for k in ('miou', 'boundary_iou', 'boundary_f1', 'trimap_iou'))

def record_run(dest, argv, seconds, started):
    "Add a run whose table is `dest['md']` to the manifest, with the other files of `dest` that it wrote."
    if not in_results(dest['md']): return
    e = record(dest['md'].stem, dest['md'], argv, seconds, script='bench/benchmark.py',
               also=[dest[k] for k in ('json', 'png', 'table', 'log') if k in dest and dest[k].exists()], started=started)
    log(f"recorded {e['file']} in bench/results/manifest.json")

BUDGETS = (0.05, 0.12, 0.2, 0.35, 0.5, None)   # post-processing budgets, as fractions of the base forward, of the table in the results

def budget_lines(table: list, base_s: float, budgets=BUDGETS) -> list:
    "Markdown rows: for each budget (a fraction of the base forward `base_s`; None: none), the setting `calibrate` chooses from `table` within it (`best_setting`), its val scores and post-processing time."
    from dataclasses import asdict
    from brefine.calibration import best_setting
    rows = ['| post-processing budget (x base) | chosen on val | val mIoU | val boundary F | ms / image | x base |', '|---|---|---:|---:|---:|---:|']
    for b in budgets:
        r = best_setting(table, 'mean', None if b is None else b * base_s)
        st = 'the base answer' if r['settings'].top_n == 1 else ', '.join(f"{k} {v}" for k, v in asdict(r['settings']).items())
        rows.append(f"| {'none' if b is None else f'{b:g}'} | {st} | {100 * r['miou']:.2f} | {100 * r['boundary_f1']:.2f} | "
                    f"{1000 * r['seconds']:.1f} | {r['seconds'] / base_s:.3f} |")
    return rows

# ------------------------------------------------------------------------------------------------------------- ablation
class TrainingImages:
    "The training split as (image, mask) batches of one, prepared and in a new random order each pass, half flipped."
    def __init__(self, ds, seed: int = 0):
        import torch
        self.ds, self.g = ds, torch.Generator().manual_seed(seed)
    def __iter__(self):
        import numpy as np, torch
        from brefine.inputs import prepare_image
        files = self.ds.files('train')
        for i in torch.randperm(len(files), generator=self.g).tolist():
            img, gt = self.ds.read(files[i])
            if torch.rand(1, generator=self.g).item() < 0.5: img, gt = img[:, ::-1].copy(), gt[:, ::-1].copy()
            yield prepare_image(img, IMAGENET_MEAN, IMAGENET_STD)[0], torch.from_numpy(gt.astype(np.int64))[None]

def get_tuned(args, ds, embedder, protos, emb_file, base, vimgs, vprobs, vgts):
    "(embedder, prototypes, file, the settings it was tuned at) after `--tune-choice` epochs on the decision: from the cache or tuned now."
    from brefine.choice import tune_choice
    from brefine.embedder_io import load_embedder, save_embedder
    from brefine.refiner import Refiner
    f = tuned_file(emb_file, args.tune_choice)
    at_file = f.with_name(f.stem + '_at.json')
    if f.exists() and at_file.exists():
        log(f'tuned embedder loaded from {f}'); embedder = load_embedder(f, base=base); at = json.loads(at_file.read_text())
    else:
        first = Refiner(embedder, protos)
        cal = first.calibrate(list(vimgs), vprobs, list(vgts), ignore_index=ds.void, progress=False, **(QUICK_CAL if args.quick else {}))
        log(f'  first calibration: {first.settings} (val BF {cal["boundary_f1"]:.4f} mIoU {cal["miou"]:.4f})')
        from fastai.torch_core import set_seed
        set_seed(args.seed)
        _, alpha = tune_choice(embedder, base, TrainingImages(ds, args.seed), protos, first.settings, epochs=args.tune_choice,
                               ignore_index=ds.void, seed=args.seed, progress=False)
        at = dict(top_n=first.settings.top_n, radius=first.settings.radius, tau=first.settings.tau, learned_alpha=alpha)
        save_embedder(embedder, f)
        from brefine.core import atomic_write
        with atomic_write(at_file, 'w') as fh: json.dump(at, fh)
    log(f'  tuned on the choice at {at}')
    return embedder.eval(), get_prototypes(args, ds, embedder, f), f, at

def constant_refiner(n_classes: int, mean, std):
    "A `Refiner` whose embedding is the same everywhere: every candidate is equally near, so a band pixel keeps the base answer and only a vote re-decides it (the vote alone)."
    import torch
    from brefine.refiner import Refiner
    from brefine.prototypes import Prototypes
    class Constant(torch.nn.Module):
        def forward(self, x): return x.new_zeros(x.shape[0], 1, x.shape[2] // 4, x.shape[3] // 4)
    return Refiner(Constant(), Prototypes(torch.zeros(n_classes, 1), torch.ones(n_classes, dtype=torch.long), mean=mean, std=std))

def oracle_labels(probs, gt, void, settings):
    "The oracle: the base answer, with each band pixel of `settings` given the true class of `gt` when it is among its top-N candidates (by a one-hot embedding of the truth, void pixels none)."
    import numpy as np, torch, torch.nn.functional as F
    from brefine.refine import relabel
    from brefine.prototypes import Prototypes
    M = probs.shape[0]
    t = torch.from_numpy(gt.astype(np.int64))
    emb = F.one_hot(t.clamp(max=M - 1), M).permute(2, 0, 1).float() * (t < M)[None]
    eye = Prototypes(torch.eye(M), torch.ones(M, dtype=torch.long))
    return relabel(emb[None], probs[None], eye, settings)[0].numpy().astype(np.uint8)

def best_row(table, keep):
    "The `RefineSettings` that calibration's own rule (`best_setting`) chooses from `table` among the base answer (the first row) and the rows `keep` accepts."
    from brefine.calibration import best_setting
    return best_setting(table[:1] + [r for r in table[1:] if keep(r)], 'mean')['settings']

def save_figure(path, ds, fs, preds, gts, n=3):
    "Image, base, DenseCRF, brefine, ground truth for the `n` test images where brefine removes most wrong pixels."
    import numpy as np, matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    v = [g != ds.void for g in gts]
    wrong = {k: np.array([int(((p[i] != gts[i]) & v[i]).sum()) for i in range(len(gts))]) for k, p in preds.items() if p}
    show = sorted(np.argsort(-(wrong['base'] - wrong['brefine']), kind='stable')[:n].tolist())
    cols = ['image', 'base', 'DenseCRF', 'brefine', 'ground truth']
    cmap = plt.get_cmap('tab20', 20)
    paint = lambda l: np.where((l == ds.void)[..., None], 0, (np.asarray(cmap(np.minimum(l, 19) % 20))[..., :3] * 255)).astype(np.uint8)
    fig, axs = plt.subplots(len(show), len(cols), figsize=(3.2 * len(cols), 2.5 * len(show)), squeeze=False)
    for r, i in enumerate(show):
        img, _ = ds.read(fs[i])
        for c, (ax, im) in enumerate(zip(axs[r], [img] + [paint(preds[k][i]) for k in cols[1:4]] + [paint(gts[i])])):
            ax.imshow(im, interpolation='nearest'); ax.set_xticks([]); ax.set_yticks([])
            ax.set_title(f'{cols[c]}: {wrong[cols[c]][i]} px wrong' if 1 <= c <= 3 else (cols[c] if c else fs[i].name), fontsize=8)
    fig.tight_layout()
    tmp = path.with_name('.' + path.stem + '.tmp.png'); fig.savefig(tmp, dpi=90); plt.close(fig); os.replace(tmp, path)

# ----------------------------------------------------------------------------------------------------------------- main
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    out = outputs(args)
    for f in (out['md'], out.get('log')):
        if f is not None and in_results(f) and f.exists():
            sys.exit(f'{f} exists: a recorded run is never overwritten; choose another --record NAME (or move the recorded run away).')
    with contextlib.ExitStack() as stack:
        if 'log' in out:                                 # a recorded run keeps its log
            out['log'].parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(tee_stdout(stack.enter_context(open(out['log'], 'w', encoding='utf-8'))))
        (run_base_only if args.base_only else run)(args, argv, out)

def run_base_only(args, argv, dest):
    "The base model of `args.base` alone on the test split (`--base-only`): its metrics row and base forward time, recorded."
    ds, started = setup(args), provenance('bench/benchmark.py', argv)
    log(f'{ds}; args', {k: str(v) for k, v in vars(args).items()})
    import numpy as np
    from brefine.core import atomic_write, to_numpy
    with stage('base model (load)'): base = get_base(args, ds, None, None)
    tf, preds, gts, secs = ds.files('test'), [], [], []
    with stage(f'test: base on {len(tf)} images'):
        base_probs_of(base, ds.read(tf[0])[0])            # warm-up: first calls allocate
        for f in tf:
            img, gt = ds.read(f); gts.append(gt)
            t = time.perf_counter(); probs = base_probs_of(base, img); secs.append(time.perf_counter() - t)
            preds.append(to_numpy(probs.argmax(0)).astype(np.uint8))
    with stage('test: metrics'): row = metrics_row(ds, preds, gts, float(np.mean(secs)))
    seconds = time.perf_counter() - T0
    summary = dict(dataset=ds.name, base=row, base_weights=str(args.base), split=dict(test=len(tf)),
                   stage_seconds={k: round(v, 1) for k, v in stage.times.items()}, **started, seconds=round(seconds))
    with atomic_write(dest['json'], 'w') as fh: json.dump(summary, fh, indent=1)
    md = '\n'.join([f'# {ds.name}: the base model alone', '', f'`{summary["command"]}` (commit {summary["git_commit"]}, '
                    f'{summary["date"]}, {summary["machine"]}, {args.threads} torch threads; {seconds:.0f} s). Test {len(tf)} images; '
                    f'the weights of `{args.base}`.', '', '| method | mIoU | boundary IoU | boundary F @ 3 px | trimap IoU @ 5 px | s / image |',
                    '|---|---:|---:|---:|---:|---:|', f"| base | {metric_cells(row)} | {row['seconds_per_image']:.3f} |", ''])
    with atomic_write(dest['md'], 'w') as fh: fh.write(md)
    print('\n' + md, flush=True)
    record_run(dest, argv, seconds, started)

def run(args, argv, dest):
    "The benchmark with parsed `args` (command-line arguments `argv`), writing the files `dest` names."
    ds, started = setup(args), provenance('bench/benchmark.py', argv)     # the commit whose code runs: taken before anything else
    log(f'{ds}; args', {k: str(v) for k, v in vars(args).items()})
    import numpy as np, torch
    if importlib.util.find_spec('pydensecrf') is None: sys.exit(   # fail early, before training
        'DenseCRF missing: `pip install pydensecrf2` (builds from source with gcc).')
    from brefine.inputs import prepare_image, base_probs
    from brefine.vote import grey_levels
    from brefine.refine import relabel, refine_predict
    from brefine.refiner import Refiner
    from brefine.core import atomic_write, to_numpy
    from brefine.embedder import embedding_size
    from dataclasses import asdict, replace
    dls = {}
    def dls_fn():
        if 'x' not in dls: dls['x'] = ds.dls(bs=8, num_workers=0)
        return dls['x']
    base_ep, emb_ep = epochs(BASE_BUDGET_PX, ds, args.quick), epochs(args.emb_budget * CAMVID_EPOCH_PX, ds, args.quick)
    log(f'training size {ds.train_size()}, {len(ds.files("train"))} images: base {base_ep} epochs, embedder {emb_ep} epochs')
    with stage('base model (train or load)'): base = get_base(args, ds, dls_fn, base_ep)
    with stage('brefine embedder (train or load)'): embedder, emb_file = get_embedder(args, ds, dls_fn, base, emb_ep)
    with stage('brefine prototypes'): protos = get_prototypes(args, ds, embedder, emb_file)
    if args.train_only: log(f'--train-only: models cached in {args.cache}'); return

    with stage('val: base probabilities'):
        vimgs, vgts = zip(*[ds.read(f) for f in ds.files('val')])
        base_probs_of(base, vimgs[0]); vprobs, vbase_s = [], 0.           # warm-up; then the base forward, timed
        for im in vimgs: t = time.perf_counter(); vprobs.append(base_probs_of(base, im)); vbase_s += (time.perf_counter() - t) / len(vimgs)
    tuned_at = None
    if args.tune_choice:
        with stage(f'brefine: {args.tune_choice} epochs on the choice'):
            embedder, protos, emb_file, tuned_at = get_tuned(args, ds, embedder, protos, emb_file, base, vimgs, vprobs, vgts)
    fitted, grid = None, dict(QUICK_CAL if args.quick else {})
    if args.fit_prototypes:
        from brefine.calibration import calibrate, fit_prototypes
        with stage('val: fit the prototypes'):
            protos, fit_alpha, fitted = fit_prototypes(embedder, protos, list(vimgs), vprobs, list(vgts), ignore_index=ds.void,
                                                       progress=False, report=True)
            alphas = grid.get('alphas', inspect.signature(calibrate).parameters['alphas'].default)
            grid['alphas'] = tuple(sorted({*alphas, round(float(fit_alpha), 4)}))
            log(f'  fitted prototypes, alpha {fit_alpha:.4f}: {fitted}')
    ref, budget = Refiner(embedder, protos), None if args.post_budget is None else args.post_budget * vbase_s
    with stage('val: brefine calibrate'):
        cal = ref.calibrate(list(vimgs), vprobs, list(vgts), ignore_index=ds.void, progress=False, max_seconds=budget, search='exhaustive',
                            **grid)   # every row on every image: the budgets and ablations below choose from it
        log(f'  brefine {ref.settings}: val BF {cal["boundary_f1"]:.4f} mIoU {cal["miou"]:.4f} '
            f'(base BF {cal["base_boundary_f1"]:.4f} mIoU {cal["base_miou"]:.4f}; {len(cal["table"])} settings'
            + ('' if budget is None else f'; post-processing budget {budget:.4f} s, {args.post_budget:g} x the base forward {vbase_s:.4f} s') + ')')
        with atomic_write(dest['table'], 'w') as fh: json.dump(dict(base_forward_seconds=vbase_s, max_seconds=budget, table=cal['table']), fh, indent=0)
        ref.save(args.cache/(f'refiner_{emb_file.stem}' + ('_fit' if args.fit_prototypes else '')))
    from brefine.calibration import best_setting
    unlimited = None if budget is None else best_setting(cal['table'], 'mean')['settings']   # what val chose without the budget
    ablation = {}
    if args.ablation:
        with stage('val: the vote alone (calibrate)'):
            vote_ref = constant_refiner(ds.n_classes, protos.mean, protos.std)
            grid = dict(QUICK_CAL, alphas=(0.,), votes=(5,)) if args.quick else dict(alphas=(0.,), votes=(5, 9, 11))
            vcal = vote_ref.calibrate(list(vimgs), vprobs, list(vgts), ignore_index=ds.void, progress=False, max_seconds=budget, **grid)
        fits = lambda r: budget is None or r['seconds'] <= budget
        ablation = dict(vote_only=vote_ref.settings, prototypes_only=best_row(cal['table'], lambda r: r['vote'] == 0 and fits(r)),
                        oracle=replace(best_row(cal['table'], lambda r: r['top_n'] > 1 and r['vote'] == 0), alpha=0.))
        log(f'  ablation settings chosen on val: {ablation}; the vote alone: val BF {vcal["boundary_f1"]:.4f} mIoU {vcal["miou"]:.4f}')
    with stage('val: DenseCRF grid'): crf_cfg, n_crf = tune_crf(args, ds, vimgs, vprobs, vgts)
    del vprobs

    tf = ds.files('test')
    preds, gts = {k: [] for k in ('base', 'DenseCRF', 'brefine', 'unlimited', 'vote_only', 'prototypes_only', 'oracle')}, []
    tm = {k: [] for k in ('base', 'crf', 'emb', 'post', 'post_unlimited', 'vote_only', 'prototypes_only')}
    with stage(f'test: base / DenseCRF / brefine on {len(tf)} images'):
        with torch.inference_mode():                     # warm-up: first calls allocate
            im0, _ = ds.read(tf[0]); base_probs_of(base, im0); embedder(prepare_image(im0, protos.mean, protos.std)[0])
        for i, f in enumerate(tf):
            img, gt = ds.read(f); gts.append(gt)
            t = time.perf_counter(); probs = base_probs_of(base, img); tm['base'].append(time.perf_counter() - t)
            preds['base'].append(to_numpy(probs.argmax(0)).astype(np.uint8))
            t = time.perf_counter(); preds['DenseCRF'].append(crf_predict(img, probs.numpy(), **crf_cfg)); tm['crf'].append(time.perf_counter() - t)
            with torch.inference_mode():                 # refine_predict in its two parts, each from the raw image
                t = time.perf_counter(); x, _ = prepare_image(img, protos.mean, protos.std)
                if args.embedder == 'shared':            # the base forward above gives the features (timed as the base's); brefine adds the copied blocks and the head
                    _, low, deep = embedder.features(x); t = time.perf_counter(); emb = embedder.embed_features(low, deep, embedding_size(x))
                else: emb = embedder(x)
                def post(st):                            # the post-processing with settings `st`, as refine_predict runs it
                    levels = grey_levels(x, protos.mean, protos.std) if st.grey is not None else None
                    return to_numpy(relabel(emb, base_probs(probs, x, False, softmax=False), protos, st, levels=levels)[0]).astype(np.uint8)
                t1 = time.perf_counter(); out = post(ref.settings); t2 = time.perf_counter()
                if unlimited is not None:                # a budgeted run also scores what val chose without the budget
                    preds['unlimited'].append(post(unlimited)); tm['post_unlimited'].append(time.perf_counter() - t2)
                if ablation:                             # each from the base scores (and the embedding): its post-processing timed
                    t3 = time.perf_counter(); preds['prototypes_only'].append(post(ablation['prototypes_only'])); t4 = time.perf_counter()
                    preds['vote_only'].append(to_numpy(vote_ref(img, probs)).astype(np.uint8)); t5 = time.perf_counter()
                    tm['prototypes_only'].append(t4 - t3); tm['vote_only'].append(t5 - t4)
                    preds['oracle'].append(oracle_labels(probs, gt, ds.void, ablation['oracle']))
            tm['emb'].append(t1 - t); tm['post'].append(t2 - t1); preds['brefine'].append(out)
            if i < 2 and not (to_numpy(refine_predict(img, base if args.embedder == 'shared' else probs, embedder, protos, ref.settings)) == out).all():
                raise AssertionError(f'the split timing differs from refine_predict on {f.name}')
            if (i + 1) % 25 == 0 or i + 1 == len(tf): log(f'  {i+1}/{len(tf)} images')
    s = {k: float(np.mean(v)) if v else None for k, v in tm.items()}
    with stage('test: metrics'):
        res = {'base': metrics_row(ds, preds['base'], gts, s['base']), 'densecrf': metrics_row(ds, preds['DenseCRF'], gts, s['crf']),
               'brefine': metrics_row(ds, preds['brefine'], gts, s['emb'] + s['post'])}
        if unlimited is not None: res['brefine_no_budget'] = metrics_row(ds, preds['unlimited'], gts, s['emb'] + s['post_unlimited'])
        if ablation:
            res.update(vote_only=metrics_row(ds, preds['vote_only'], gts, s['vote_only']),
                       prototypes_only=metrics_row(ds, preds['prototypes_only'], gts, s['emb'] + s['prototypes_only']),
                       oracle=metrics_row(ds, preds['oracle'], gts, None))
    save_figure(dest['png'], ds, tf, preds, gts)

    seconds = time.perf_counter() - T0
    summary = dict(dataset=ds.name, **res, settings=dict(asdict(ref.settings), crf=crf_cfg), training=dict(
        base_epochs=base_ep if args.base is None else None, embedder_epochs=emb_ep, **({} if tuned_at is None else dict(choice_epochs=args.tune_choice, choice_tuned_at=tuned_at)), size=list(ds.train_size()), embedder=dict(kind=args.embedder, **embedder_kwargs(args.embedder, args.train_blocks, args.bf16, args.fusion, args.feature_views), config=dict(embedder.config))),
        split=dict(train=len(ds.files('train')), val=len(ds.files('val')), test=len(tf)),
        seconds_per_image=dict(base=s['base'], densecrf=s['crf'], embedder=s['emb'], post=s['post'],
                               **({} if unlimited is None else dict(post_no_budget=s['post_unlimited']))),
        **({} if unlimited is None else dict(settings_no_budget=asdict(unlimited))),
        **({} if not ablation else dict(ablation_settings={k: asdict(v) for k, v in ablation.items()})),
        base_weights=None if args.base is None else str(args.base),
        **({} if fitted is None else dict(fitted_prototypes={k: v for k, v in fitted.items() if isinstance(v, (int, float, str))})),
        val=dict(brefine_boundary_f1=cal['boundary_f1'], brefine_miou=cal['miou'], base_boundary_f1=cal['base_boundary_f1'],
                 base_miou=cal['base_miou'], crf_images=n_crf, base_forward_seconds=vbase_s, post_budget_seconds=budget),
        stage_seconds={k: round(v, 1) for k, v in stage.times.items()}, **started, seconds=round(seconds))
    with atomic_write(dest['json'], 'w') as fh: json.dump(summary, fh, indent=1)
    names = {'base': 'base', 'densecrf': 'DenseCRF', 'brefine': 'brefine' if budget is None else 'brefine within the budget',
             'brefine_no_budget': f'brefine without a budget ({unlimited})', 'vote_only': 'the vote alone (no embedder)',
             'prototypes_only': 'the prototypes alone (no vote)', 'oracle': 'oracle: the true class when among the top-N'}
    lines = [f'# {ds.name}: base vs DenseCRF vs brefine', '', f'`{summary["command"]}` (commit {summary["git_commit"]}, '
             f'{summary["date"]}, {summary["machine"]}, {args.threads} torch threads, DenseCRF 1; {seconds:.0f} s). '
             f'Train {summary["split"]["train"]}, val {summary["split"]["val"]}, test {len(tf)} images; every setting chosen on val.', '',
             '- base: DeepLabV3 MobileNetV2 OS16, ImageNet init, ' + (f'{base_ep} epochs at {ds.train_size()} (best val mIoU kept)'
                                                                     if args.base is None else f'the weights of `{args.base}`'),
             f'- brefine: {args.embedder} embedder `{learner_call(args)}`, config {embedder.config}, {emb_ep} epochs'
             + ('' if tuned_at is None else f', then {args.tune_choice} on the choice (`tune_choice` at {tuned_at})') + f'; calibrated on val: {asdict(ref.settings)}'
             + ('' if budget is None else f', the best of the settings whose post-processing took at most {args.post_budget:g}x the base forward on val ({1000 * budget:.1f} ms per image)'),
             f'- DenseCRF: bilateral {crf_cfg} (grid on {n_crf} val images), 5 iterations', '',
             '| method | mIoU | boundary IoU | boundary F @ 3 px | trimap IoU @ 5 px | s / image | / DenseCRF | / base |',
             '|---|---:|---:|---:|---:|---:|---:|---:|']
    for k, r in res.items():
        sec = r['seconds_per_image']
        lines.append(f"| {names[k]} | {metric_cells(r)} | " + ('- | - | - |' if sec is None else f"{sec:.3f} | {sec/s['crf']:.2f} | {sec/s['base']:.2f} |"))
    lines += ['', f"brefine's time: embedder {s['emb']:.3f} s + post-processing {s['post']:.3f} s per image"
              + ('' if unlimited is None else f" (without the budget: {s['post_unlimited']:.3f} s)") + ". Stage times: "
              + ', '.join(f'{k} {v:.0f} s' for k, v in stage.times.items()), '',
              f"What a post-processing budget would choose on val (the same calibration; base forward {1000 * vbase_s:.1f} ms per val image):", '',
              *budget_lines(cal['table'], vbase_s), '']
    md = '\n'.join(lines)
    with atomic_write(dest['md'], 'w') as fh: fh.write(md)
    print('\n' + md, flush=True)
    record_run(dest, argv, seconds, started)

if __name__ == '__main__':
    main()
