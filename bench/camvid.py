"""CamVid benchmark (issue 6): base model vs DenseCRF vs brefine on the SegNet split at full 360x480 resolution.

What it does, in order (each stage prints its wall time; models are cached so reruns skip training):

1. base model: DeepLabV3-style MobileNetV2 at output stride 16 (torchvision `mobilenet_v2` ImageNet features, the
   stride-32 block dilated, torchvision's `DeepLabHead`/ASPP with rates 6/12/18), trained with fastai on `train`
   (`brefine.data.dls_from_folders` batches, `fit_one_cycle`, `CrossEntropyLossFlat(axis=1, ignore_index=11)` on the mask,
   band ignored; `SaveModelCallback` keeps the epoch with the best val mIoU). The ImageNet weights come through the
   normal torchvision weights API; the offline copy `../shared/weights/mobilenet_v2-b0353104.pth` is copied into
   `$TORCH_HOME/hub/checkpoints` when missing.
2. brefine embedder: `refine_learner(backbone='mobilenet_v2', emb_dim=32, ignore_index=11, n_triplets=16384,
   backbone_init=base.backbone, net_kwargs=dict(aspp_dim=64, decoder_dim=48))` -- the light embedder, started from the
   trained base model's MobileNetV2 (`--emb-init imagenet` starts from ImageNet instead; `--emb-dim 64 --aspp-dim 128
   --decoder-dim 128` gives the full embedder) -- trained on `train` (`fit_one_cycle`); prototypes from `train` without
   augmentation (`extract_prototypes`, radius 3).
3. base probabilities (softmax of the upsampled logits) of `val`.
4. brefine settings (radius, top_n, tau, alpha, vote, min_prob) chosen on `val` with `calibrate` (the mean of boundary F @ 3 px and mIoU,
   never worse than base). With `--cal-exclude 0016E5` (val's street) calibration uses a stand-in embedder trained, and its
   prototypes taken, without those 204 training images; the embedder trained on all of train is then deployed with the
   settings the stand-in chose, so that val judges the settings on an embedder that has not seen its street, as test does
   (tried in session 7: no gain over the default, README; from scratch it adds ~22 min, beyond 90 in all).
5. DenseCRF (pydensecrf2 `DenseCRF2D`, unary = -log softmax, Gaussian sxy=3 compat=3, bilateral, 5 iterations) on the
   same base probabilities; the bilateral (sxy, srgb, compat) chosen on (an evenly spaced subset of) `val` by the same
   criterion as brefine (the mean of boundary F @ 3 px and mIoU). Nothing is tuned on test.
6. `test`: mIoU, boundary IoU (dilation 2 % of the diagonal), boundary F @ 3 px, trimap IoU @ 5 px for base / DenseCRF /
   brefine, and seconds per image of base forward, DenseCRF, brefine embedder forward and brefine post-processing
   (everything `refine_predict` does after the embedder: arg-max, candidates, band, nearest prototype; like the base's,
   the embedder's time includes preparing its input image), with the ratio brefine total / DenseCRF (DenseCRF is single-threaded C++; torch uses --threads).
   The table is written atomically to `bench/out/camvid_results.md` and printed; a before/after figure (image, base,
   DenseCRF, brefine, ground truth for the test images brefine improves most) goes to `bench/out/camvid_figure.png`.

Usage (from the repository root):

    .venv/bin/python bench/camvid.py                      # full benchmark, 2 threads
    .venv/bin/python bench/camvid.py --limit-train 16 --limit-val 8 --limit-test 8 --base-epochs 1 --emb-epochs 1 \\
        --crf-grid small --cal-grid small --threads 1 --cache bench/out/camvid_smoke --out bench/out/smoke  # ~1 min

Needs `pip install pydensecrf2` (1.1 builds from source with gcc in ~45 s; the plain `pydensecrf` does not build).

Run time with the defaults (train 367, val 101, test 233 images), measured on the 2-core machine with --threads 2:
  base training, 8 epochs            ~2.2 min per epoch on free cores (up to 10 min when the cores are shared)   ~ 20-35 min
  light embedder, 32 epochs          ~1.2 min per epoch on free cores (16384 triplets per batch)          ~ 40-47 min
  prototypes                                                                                                   ~ 0.3 min
  calibrate (full grid, 433 settings)                                                                          ~ 8.5 min
  (only with --cal-exclude 0016E5: the stand-in embedder, 32 epochs on 163 images                              ~ 22 min)
  DenseCRF grid (full, 36 settings x 20 val images)                                                            ~ 2.3 min
  test (base + DenseCRF + brefine + metrics)                                                                   ~ 1.3 min
  total ~ 75-85 min on free cores, under 90 (a run from scratch: 4539 s, `bench/results/camvid_fresh_run.log`); with
  --cal-exclude 0016E5 ~ 100 (the stand-in and calibration on that cache: 2164 s, `camvid_fresh_calx.log`).
  Reruns with the same --cache skip training (~13 min).
"""
from __future__ import annotations
import argparse, os, sys, time, shutil, itertools
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODES = ['Sky', 'Building', 'Pole', 'Road', 'Pavement', 'Tree', 'SignSymbol', 'Fence', 'Car', 'Pedestrian', 'Bicyclist']
N_CLASSES, VOID = 11, 11
PALETTE = [(128, 128, 128), (128, 0, 0), (192, 192, 128), (128, 64, 128), (60, 40, 222), (128, 128, 0), (192, 128, 128),
           (64, 64, 128), (64, 0, 128), (64, 64, 0), (0, 128, 192), (0, 0, 0)]   # SegNet colours, void black
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
WEIGHTS_FILE = 'mobilenet_v2-b0353104.pth'
CRF_GRIDS = {'small': dict(sxy=(50, 80), srgb=(13,), compat=(4, 10)),
             'full': dict(sxy=(30, 50, 80), srgb=(3, 5, 10, 13), compat=(3, 5, 10))}
CAL_GRIDS = {'small': dict(radii=(2, 4), top_ns=(2, 3), taus=(None,), alphas=(0., 1.), votes=(0, 5)),
             'full': dict(radii=(4, 6, 8, 10, 14, 18), top_ns=(2, 3), taus=(None, 0.9, 0.7), alphas=(0., 0.1, 0.3), votes=(0, 5, 9, 11))}

T0 = time.perf_counter()
def log(*a):
    print(f'[{time.perf_counter() - T0:7.1f}s]', *a, flush=True)

class stage:
    "Context manager printing the wall time of a stage."
    times = {}
    def __init__(self, name): self.name = name
    def __enter__(self):
        log(f'== {self.name} ...'); self.t = time.perf_counter(); return self
    def __exit__(self, *exc):
        dt = time.perf_counter() - self.t
        stage.times[self.name] = dt
        log(f'== {self.name}: {dt:.1f} s' + (' (FAILED)' if exc[0] else ''))

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--data', type=Path, default=REPO.parent/'shared/data/camvid/CamVid', help='CamVid folder (SegNet layout)')
    p.add_argument('--weights', type=Path, default=REPO.parent/'shared/weights'/WEIGHTS_FILE, help='offline MobileNetV2 ImageNet file')
    p.add_argument('--cache', type=Path, default=REPO/'bench/out/camvid_cache', help='trained models (git-ignored)')
    p.add_argument('--out', type=Path, default=REPO/'bench/out', help='results folder')
    p.add_argument('--limit-train', type=int, default=None, help='use only N training images (smoke runs)')
    p.add_argument('--limit-val', type=int, default=None, help='use only N validation images')
    p.add_argument('--limit-test', type=int, default=None, help='use only N test images')
    p.add_argument('--crf-val', type=int, default=20, help='validation images for the DenseCRF grid (evenly spaced)')
    p.add_argument('--base-epochs', type=int, default=8, help='base model epochs (8: ~20-35 min of the run)')
    p.add_argument('--emb-epochs', type=int, default=32, help='embedder epochs (32 of the light embedder: ~40 min)')
    p.add_argument('--base-lr', type=float, default=1e-3, help='fit_one_cycle lr_max of the base model')
    p.add_argument('--emb-lr', type=float, default=1e-3, help='fit_one_cycle lr_max of the embedder')
    p.add_argument('--emb-dim', type=int, default=32, help='embedding size C (the light embedder; 64 with 128/128 is the full one)')
    p.add_argument('--aspp-dim', type=int, default=64, help="embedder's ASPP channels")
    p.add_argument('--decoder-dim', type=int, default=48, help="embedder's stride-4 fusion channels")
    p.add_argument('--bs', type=int, default=8, help='training batch size (base and embedder)')
    p.add_argument('--crf-grid', choices=sorted(CRF_GRIDS), default='full', help=f'DenseCRF bilateral grid {CRF_GRIDS}')
    p.add_argument('--cal-grid', choices=sorted(CAL_GRIDS), default='full', help=f'brefine calibrate grid {CAL_GRIDS}')
    p.add_argument('--crf-iters', type=int, default=5, help='DenseCRF mean-field iterations')
    p.add_argument('--threads', type=int, default=2, help='torch / OpenCV threads')
    p.add_argument('--n-figure', type=int, default=3, help='test images in the before/after figure')
    p.add_argument('--seed', type=int, default=0, help='training seed (fastai set_seed)')
    p.add_argument('--train-only', action='store_true', help='stop after training (and caching) the models')
    p.add_argument('--n-triplets', type=int, default=16384, help='triplets sampled per training batch')
    p.add_argument('--emb-init', choices=('imagenet', 'base'), default='base',
                   help="embedder backbone start: ImageNet weights, or the trained base model's backbone (same MobileNetV2)")
    p.add_argument('--emb-lighting', type=float, default=0., help="embedder training only: fastai Brightness and Contrast with this "
                   "max_lighting (0: the specification's augmentations alone)")
    p.add_argument('--emb-exclude', default='', help="comma-separated file-name prefixes (CamVid sequences, e.g. 0016E5: val's street) "
                   "left out of the embedder's training images and its prototypes, so that calibrating on val sees the embedder "
                   "on a street it has not seen, as test does (the base model still trains on all of train)")
    p.add_argument('--cal-exclude', default='', help="comma-separated file-name prefixes (0016E5 is val's street): calibrate on val with "
                   "a stand-in embedder trained (and its prototypes taken) without those sequences, then deploy the embedder trained "
                   "on all of train with the settings it chose. Val then sees, as test does, an embedder that has not seen its street. "
                   "Tried in session 7: no gain over the default (README). Costs ~22 min more from scratch")
    args = p.parse_args(argv)
    for k in ('limit_train', 'limit_val', 'limit_test', 'crf_val', 'base_epochs', 'emb_epochs', 'bs', 'crf_iters', 'threads',
              'emb_dim', 'aspp_dim', 'decoder_dim', 'n_triplets'):
        v = getattr(args, k)
        if v is not None and v < 1: p.error(f"--{k.replace('_', '-')} must be >= 1, got {v}")
    args.emb_exclude = tuple(x for x in args.emb_exclude.split(',') if x)
    args.cal_exclude = tuple(x for x in args.cal_exclude.split(',') if x)
    if args.emb_exclude and args.cal_exclude: p.error('--emb-exclude and --cal-exclude do not combine: pick one')
    if args.limit_train is not None and args.limit_train < args.bs:
        p.error(f'--limit-train {args.limit_train} is smaller than the batch size --bs {args.bs}: no full training batch')
    return args

# ---------------------------------------------------------------------------------------------------------------- setup
def setup(args):
    import torch, cv2
    torch.set_num_threads(args.threads); cv2.setNumThreads(args.threads)
    ck = Path(torch.hub.get_dir())/'checkpoints'
    if not (ck/WEIGHTS_FILE).exists():
        if not args.weights.exists():
            sys.exit(f'MobileNetV2 ImageNet weights missing: neither {ck/WEIGHTS_FILE} nor {args.weights} exists.')
        ck.mkdir(parents=True, exist_ok=True)
        tmp = ck/(WEIGHTS_FILE + '.tmp'); shutil.copyfile(args.weights, tmp); os.replace(tmp, ck/WEIGHTS_FILE)
        log(f'copied {args.weights} -> {ck/WEIGHTS_FILE}')
    for d in ('train', 'trainannot', 'val', 'valannot', 'test', 'testannot'):
        if not (args.data/d).is_dir(): sys.exit(f'{args.data/d} not found: pass --data pointing at CamVid (SegNet layout).')
    args.cache.mkdir(parents=True, exist_ok=True); args.out.mkdir(parents=True, exist_ok=True)

def files(data: Path, split: str, limit=None, exclude: tuple = ()) -> list:
    "Sorted image files of `split`; with `limit`, a fixed random subset (seed 0), still sorted; none whose name starts with a prefix in `exclude`."
    import numpy as np
    fs = sorted(p for p in (data/split).iterdir() if p.suffix.lower() == '.png' and not p.name.startswith(tuple(exclude)))
    if limit is not None and limit < len(fs):
        idx = np.random.default_rng(0).permutation(len(fs))[:limit]
        fs = [fs[i] for i in sorted(idx)]
    return fs

def exclude_tag(exclude: tuple) -> str:
    "The cache-name suffix of training images left out by prefix (`--emb-exclude`)."
    return ''.join(f'_x{x}' for x in exclude)

def subset_root(args, exclude: tuple = ()) -> Path:
    "`args.data`, or a folder of symlinks holding the limited train/val subsets (for `dls_from_folders`), without the training images `exclude` names."
    if args.limit_train is None and args.limit_val is None and not exclude: return args.data
    root = args.cache/(f'subset_t{args.limit_train}_v{args.limit_val}' + exclude_tag(exclude))
    for split, lim in (('train', args.limit_train), ('val', args.limit_val)):
        for sub in (split, split + 'annot'):
            d = root/sub
            if d.exists(): shutil.rmtree(d)
            d.mkdir(parents=True)
            for f in files(args.data, split, lim, exclude if split == 'train' else ()): os.symlink(args.data/sub/f.name, d/f.name)
    return root

def read_pair(data: Path, f: Path):
    "(uint8 RGB image (H,W,3), uint8 labels (H,W)) of image file `f`."
    import numpy as np
    from PIL import Image
    img = np.array(Image.open(f).convert('RGB'))          # writable (DenseCRF needs it)
    gt = np.array(Image.open(data/(f.parent.name + 'annot')/f.name))
    return img, gt

# ----------------------------------------------------------------------------------------------------------- base model
def _dilate_mobilenet(blocks, output_stride: int = 16) -> int:
    "Stop `blocks` (MobileNet features) downsampling beyond `output_stride`; later 3x3 convs get the lost stride as dilation."
    import torch.nn as nn
    stride, dilation = 1, 1
    for block in blocks:
        convs = [m for m in block.modules() if isinstance(m, nn.Conv2d)]
        s = max(c.stride[0] for c in convs)
        new_dilation = dilation
        if s > 1 and stride * s > output_stride:
            for c in convs: c.stride = (1, 1)
            new_dilation = dilation * s                 # DeepLab convention: the block that lost its stride keeps the old rate
        else: stride *= s
        for c in convs:
            k = c.kernel_size[0]
            if k > 1: c.dilation, c.padding = (dilation, dilation), ((k - 1) // 2 * dilation,) * 2
        dilation = new_dilation
    return stride

def base_model(pretrained: bool = True):
    "DeepLabV3 with a MobileNetV2 backbone at output stride 16; logits upsampled to the input size."
    import torch.nn as nn, torch.nn.functional as F, torchvision
    from torchvision.models.segmentation.deeplabv3 import DeepLabHead
    from brefine.learner import torchvision_model
    class DeepLabV3MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            feats = torchvision_model('mobilenet_v2', pretrained).features[:-1]  # 320 ch; weights read as data only
            assert _dilate_mobilenet(feats, 16) == 16
            self.backbone, self.head = feats, DeepLabHead(320, N_CLASSES, atrous_rates=(6, 12, 18))
        def forward(self, x):
            return F.interpolate(self.head(self.backbone(x)), x.shape[-2:], mode='bilinear', align_corners=False)
    return DeepLabV3MobileNetV2()

class BaseLoss:
    "Cross-entropy on the mask of (image, mask, band) batches; the band is ignored."
    def __init__(self):
        from fastai.losses import CrossEntropyLossFlat
        self.ce = CrossEntropyLossFlat(axis=1, ignore_index=VOID)
    def __call__(self, pred, mask, *_): return self.ce(pred, mask)
    def activation(self, x): return x.softmax(1)
    def decodes(self, x): return x.argmax(1)

def _miou_metric():
    import torch
    from fastai.learner import Metric
    class ValMIoU(Metric):
        "Data-set mIoU (confusion matrix accumulated over the validation set, void ignored)."
        def reset(self): self.cm = torch.zeros(N_CLASSES, N_CLASSES, dtype=torch.long)
        def accumulate(self, learn):
            p = learn.pred.as_subclass(torch.Tensor).argmax(1).flatten().cpu()
            t = learn.yb[0].as_subclass(torch.Tensor).flatten().cpu().long()
            k = t != VOID
            self.cm += torch.bincount(t[k]*N_CLASSES + p[k], minlength=N_CLASSES**2).view(N_CLASSES, N_CLASSES)
        @property
        def value(self):
            cm = self.cm.double(); inter = cm.diag(); union = cm.sum(0) + cm.sum(1) - inter
            return (inter[union > 0] / union[union > 0]).mean().item() if (union > 0).any() else float('nan')
        @property
        def name(self): return 'miou'
    return ValMIoU()

def make_dls(args, root, lighting: float = 0.):
    "Training batches; with `lighting`, random brightness and contrast changes (fastai's, each with p=0.75) besides the spec's augmentations."
    from brefine.data import dls_from_folders
    from fastai.vision.augment import Brightness, Contrast
    extra = [Brightness(max_lighting=lighting), Contrast(max_lighting=lighting)] if lighting else None
    return dls_from_folders(root, CODES + ['Void'], ignore_index=VOID, bs=args.bs, num_workers=0, batch_tfms=extra)

def _fit(learn, epochs, lr):
    log('  epoch columns:', ['epoch', 'train_loss', 'valid_loss'] + [m.name for m in learn.metrics] + ['time'])
    with learn.no_bar(): learn.fit_one_cycle(epochs, lr)

def get_base(args, dls_fn):
    "The trained base model, from the cache or trained now."
    import torch, numpy as np
    from brefine.core import atomic_save
    f = args.cache/f'base_mnv2os16_e{args.base_epochs}_t{args.limit_train}_v{args.limit_val}.pth'
    if f.exists(): log(f'base model loaded from {f}'); return load_base(f)
    model = base_model()
    from fastai.learner import Learner
    from fastai.callback.tracker import SaveModelCallback
    import fastai.callback.schedule  # fit_one_cycle
    from fastai.torch_core import set_seed
    set_seed(args.seed)                                   # python, numpy, torch (augmentation, shuffling, init)
    learn = Learner(dls_fn(), model, loss_func=BaseLoss(), metrics=[_miou_metric()], path=args.cache, model_dir='.',
                    cbs=[SaveModelCallback(monitor='miou', comp=np.greater, fname=f.stem + '_best')])
    _fit(learn, args.base_epochs, args.base_lr)          # SaveModelCallback loads the best epoch at the end
    atomic_save({k: v.detach().cpu() for k, v in learn.model.state_dict().items()}, f)
    (args.cache/(f.stem + '_best.pth')).unlink(missing_ok=True)
    log(f'base model saved to {f}')
    return learn.model.eval()

def _normalize(img):
    "A uint8 (H,W,3) image as the (1,3,H,W) float batch the models expect (brefine's own image preparation)."
    from brefine.inference import prepare_image
    return prepare_image(img, IMAGENET_MEAN, IMAGENET_STD)[0]

def load_base(f):
    "The base model with the weights cached in file `f`, in eval mode."
    from brefine.core import safe_load
    model = base_model(pretrained=False)
    model.load_state_dict(safe_load(f, 'base model weights'))
    return model.eval()

def load_embedder(f):
    "The embedder cached in file `f` (its config and weights), in eval mode."
    from brefine.core import safe_load
    from brefine.cli import embedder_from_checkpoint
    return embedder_from_checkpoint(safe_load(f, 'embedder checkpoint'))

def load_cached(cache):
    "The most recently written base model and calibrated Refiner bundle in `cache` (by this script): (base, refiner)."
    from brefine.inference import Refiner
    cache = Path(cache)
    newest = lambda ps: sorted(ps, key=lambda q: q.stat().st_mtime)
    bundles, bases = newest(cache.glob('refiner_*')), newest(p for p in cache.glob('base_*.pth') if not p.stem.endswith('_best'))
    if not bundles or not bases: raise FileNotFoundError(f"No cached base model / Refiner in {cache}: run bench/camvid.py first.")
    return load_base(bases[-1]), Refiner.load(bundles[-1])

def base_probs_of(model, img):
    "(C,H,W) float32 softmax probabilities of the base model for a uint8 (H,W,3) image."
    import torch
    with torch.inference_mode(): return model(_normalize(img)).softmax(1)[0].contiguous()

# -------------------------------------------------------------------------------------------------------------- brefine
def embedder_dls_fn(args, root, dls_fn):
    "Loader of the embedder's training batches: the base model's (`dls_fn`), or its own with `--emb-lighting` or without `args.emb_exclude`'s images."
    if not (args.emb_lighting or args.emb_exclude): return dls_fn
    return lambda: make_dls(args, subset_root(args, args.emb_exclude) if args.emb_exclude else root, args.emb_lighting)

def get_embedder(args, dls_fn, base=None):
    import torch
    from brefine.core import atomic_save
    from brefine.learner import refine_learner
    arch = f'd{args.emb_dim}' + ('' if (args.aspp_dim, args.decoder_dim) == (128, 128) else f'_a{args.aspp_dim}_dec{args.decoder_dim}')
    init = '' if args.emb_init == 'imagenet' else f'_init{args.emb_init}{args.base_epochs}'
    init += '' if args.n_triplets == 4096 else f'_tri{args.n_triplets}'
    init += f'_light{args.emb_lighting:g}' if args.emb_lighting else ''
    init += exclude_tag(args.emb_exclude)
    f = args.cache/f'emb_mnv2_{arch}{init}_e{args.emb_epochs}_t{args.limit_train}_v{args.limit_val}.pt'
    if f.exists(): log(f'embedder loaded from {f}'); return load_embedder(f), f
    from fastai.torch_core import set_seed
    set_seed(args.seed)
    learn = refine_learner(dls_fn(), backbone='mobilenet_v2', emb_dim=args.emb_dim, pretrained=True, ignore_index=VOID, n_triplets=args.n_triplets,
                           backbone_init=base.backbone if args.emb_init == 'base' else None,
                           path=args.cache, model_dir='.', net_kwargs=dict(aspp_dim=args.aspp_dim, decoder_dim=args.decoder_dim))
    _fit(learn, args.emb_epochs, args.emb_lr)
    net = learn.model
    atomic_save(dict(config=net.config, state_dict={k: v.detach().cpu() for k, v in net.state_dict().items()}), f)
    log(f'embedder saved to {f}')
    return net.eval(), f

def prototype_batches(args, bs=4):
    "Training images without augmentation, normalised like the embedder's training data, as (images, masks) batches."
    import torch, numpy as np
    fs = files(args.data, 'train', args.limit_train, args.emb_exclude)
    for i in range(0, len(fs), bs):
        pairs = [read_pair(args.data, f) for f in fs[i:i+bs]]
        yield (torch.cat([_normalize(im) for im, _ in pairs]), torch.from_numpy(np.stack([g for _, g in pairs]).astype(np.int64)))

def train_prototypes(args, embedder, radius: int = 3):
    "Prototypes of `embedder` from the training images (`args.data`, `args.limit_train`, less `args.emb_exclude`) without augmentation."
    from brefine.prototypes import extract_prototypes
    return extract_prototypes(embedder, prototype_batches(args), N_CLASSES, radius=radius, ignore_index=VOID, names=CODES,
                              mean=IMAGENET_MEAN, std=IMAGENET_STD, progress=False)

def get_prototypes(args, embedder, emb_file):
    from brefine.prototypes import Prototypes
    f = emb_file.with_name('protos_' + emb_file.stem + '.pt')
    if f.exists(): log(f'prototypes loaded from {f}'); return Prototypes.load(f)
    p = train_prototypes(args, embedder)
    p.save(f); log(f'prototypes saved to {f}: {p}')
    return p

# ------------------------------------------------------------------------------------------------------------- DenseCRF
def crf_predict(img, probs, sxy, srgb, compat, n_iter=5):
    "DenseCRF labels (H,W) uint8 from a uint8 image (H,W,3) and probabilities (C,H,W) numpy float32."
    import numpy as np
    import pydensecrf.densecrf as dcrf
    from pydensecrf.utils import unary_from_softmax
    C, H, W = probs.shape
    d = dcrf.DenseCRF2D(W, H, C)
    d.setUnaryEnergy(np.ascontiguousarray(unary_from_softmax(probs)))
    d.addPairwiseGaussian(sxy=3, compat=3)
    d.addPairwiseBilateral(sxy=sxy, srgb=srgb, rgbim=np.ascontiguousarray(img), compat=compat)
    return np.asarray(d.inference(n_iter)).reshape(C, H, W).argmax(0).astype(np.uint8)

def scores(preds, gts):
    "(boundary F @ 3 px, mIoU) of a set of predictions; `objective` ranks them."
    from brefine.metrics import boundary_f1, mean_iou
    return (boundary_f1(preds, gts, N_CLASSES, tolerance=3, ignore_index=VOID), mean_iou(preds, gts, N_CLASSES, ignore_index=VOID))

def objective(sc):
    "The selection criterion shared by DenseCRF tuning and brefine's calibrate (its default, 'mean'): the mean of boundary F and mIoU, boundary F breaking ties."
    from brefine.inference import OBJECTIVES
    return OBJECTIVES['mean'](*sc)

def tune_crf(args, imgs, probs, gts):
    import numpy as np
    idx = np.unique(np.linspace(0, len(imgs) - 1, min(args.crf_val, len(imgs))).round().astype(int))
    g = CRF_GRIDS[args.crf_grid]
    rows, best = [], None
    for sxy, srgb, compat in itertools.product(g['sxy'], g['srgb'], g['compat']):
        t = time.perf_counter()
        preds = [crf_predict(imgs[i], probs[i].numpy(), sxy, srgb, compat, args.crf_iters) for i in idx]
        sc = scores(preds, [gts[i] for i in idx])
        rows.append(dict(sxy=sxy, srgb=srgb, compat=compat, boundary_f1=sc[0], miou=sc[1]))
        log(f'  crf sxy={sxy} srgb={srgb} compat={compat}: BF {sc[0]:.4f} mIoU {sc[1]:.4f} ({time.perf_counter()-t:.1f} s)')
        if best is None or objective(sc) > objective(best[0]): best = (sc, dict(sxy=sxy, srgb=srgb, compat=compat))
    base = scores([probs[i].argmax(0).numpy() for i in idx], [gts[i] for i in idx])
    log(f'  crf best {best[1]} (BF {best[0][0]:.4f}, mIoU {best[0][1]:.4f}) vs base on the same {len(idx)} images: '
        f'BF {base[0]:.4f}, mIoU {base[1]:.4f}')
    return best[1], dict(n_images=len(idx), base=base, best=best[0], rows=rows)

# --------------------------------------------------------------------------------------------------------------- report
def metrics_row(preds, gts):
    from brefine.metrics import mean_iou, boundary_iou, boundary_f1, trimap_iou
    kw = dict(n_classes=N_CLASSES, ignore_index=VOID)
    return dict(miou=mean_iou(preds, gts, **kw), biou=boundary_iou(preds, gts, **kw),
                bf=boundary_f1(preds, gts, tolerance=3, **kw), trimap=trimap_iou(preds, gts, width=5, **kw))

def colorize(lbl):
    import numpy as np
    return np.asarray(PALETTE, np.uint8)[np.minimum(lbl, len(PALETTE) - 1)]

def save_figure(path, data, fs, preds, gts, n):
    "Image, base, DenseCRF, brefine, ground truth for the `n` test images where brefine removes most wrong pixels."
    import numpy as np, matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    v = [g != VOID for g in gts]
    wrong = {k: [int(((p[i] != gts[i]) & v[i]).sum()) for i in range(len(gts))] for k, p in preds.items()}
    gain = np.array(wrong['base']) - np.array(wrong['brefine'])
    show = sorted(np.argsort(-gain, kind='stable')[:n].tolist())
    cols = ['image', 'base', 'DenseCRF', 'brefine', 'ground truth']
    fig, axs = plt.subplots(len(show), len(cols), figsize=(3.2*len(cols), 2.5*len(show)), squeeze=False)
    for r, i in enumerate(show):
        img, _ = read_pair(data, fs[i])
        ims = [img] + [colorize(preds[k][i]) for k in cols[1:4]] + [colorize(gts[i])]
        for c, (ax, im) in enumerate(zip(axs[r], ims)):
            ax.imshow(im, interpolation='nearest'); ax.set_xticks([]); ax.set_yticks([])
            ax.set_title(f'{cols[c]}: {wrong[cols[c]][i]} px wrong' if 1 <= c <= 3 else (cols[c] if c else fs[i].name), fontsize=8)
    fig.tight_layout()
    tmp = path.with_name('.' + path.stem + '.tmp.png')
    fig.savefig(tmp, dpi=90); plt.close(fig); os.replace(tmp, path)
    return show

def main(argv=None):
    args = parse_args(argv)
    log('args:', {k: str(v) for k, v in vars(args).items()})
    setup(args)
    import numpy as np, torch
    try: import pydensecrf.densecrf  # fail early, before training
    except ImportError: sys.exit('DenseCRF missing: `pip install pydensecrf2` (builds from source with gcc).')
    from brefine.inference import calibrate, prepare_image, base_probs, relabel, refine_predict, Refiner
    from brefine.core import atomic_write, to_numpy
    root = subset_root(args)
    dls_cache = {}
    def dls_fn():
        if 'dls' not in dls_cache: dls_cache['dls'] = make_dls(args, root)
        return dls_cache['dls']
    n_tr = len(files(args.data, 'train', args.limit_train))

    with stage('base model (train or load)'): base = get_base(args, dls_fn)
    with stage('brefine embedder (train or load)'): embedder, emb_file = get_embedder(args, embedder_dls_fn(args, root, dls_fn), base)
    with stage('brefine prototypes (train, no augmentation)'): protos = get_prototypes(args, embedder, emb_file)
    cal_embedder, cal_protos = embedder, protos
    if args.cal_exclude:
        cargs = argparse.Namespace(**{**vars(args), 'emb_exclude': args.cal_exclude})
        with stage(f'brefine calibration stand-in: embedder without {", ".join(args.cal_exclude)} (train or load)'):
            cal_embedder, cal_file = get_embedder(cargs, embedder_dls_fn(cargs, root, dls_fn), base)
            cal_protos = get_prototypes(cargs, cal_embedder, cal_file)
    if args.train_only: log(f'--train-only: models cached in {args.cache}'); return

    with stage('val: base probabilities'):
        vf = files(args.data, 'val', args.limit_val)
        vimgs, vgts = zip(*[read_pair(args.data, f) for f in vf])
        vprobs = [base_probs_of(base, im) for im in vimgs]
    with stage(f'val: brefine calibrate ({args.cal_grid})'):
        cal = calibrate(cal_embedder, cal_protos, list(vimgs), vprobs, list(vgts), ignore_index=VOID, progress=False, **CAL_GRIDS[args.cal_grid])
        settings = {k: cal[k] for k in Refiner.setting_names}
        ref = Refiner(embedder, protos, **settings)
        log(f'  brefine settings {settings}: val BF {cal["boundary_f1"]:.4f} mIoU {cal["miou"]:.4f} '
            f'(base BF {cal["base_boundary_f1"]:.4f} mIoU {cal["base_miou"]:.4f}, {len(cal["table"])} settings tried)')
        ref.save(args.cache/(f'refiner_{emb_file.stem}' + (f'_cal{exclude_tag(args.cal_exclude)}' if args.cal_exclude else '')))
    with stage(f'val: DenseCRF grid ({args.crf_grid})'):
        crf_cfg, crf_val = tune_crf(args, vimgs, vprobs, vgts)
    del vprobs

    tf = files(args.data, 'test', args.limit_test)
    preds = {k: [] for k in ('base', 'DenseCRF', 'brefine')}
    gts, tm = [], {k: [] for k in ('base', 'crf', 'emb', 'post')}
    with stage(f'test: base / DenseCRF / brefine on {len(tf)} images'):
        with torch.inference_mode():                     # warm-up: first calls allocate
            im0, _ = read_pair(args.data, tf[0]); base_probs_of(base, im0); embedder(prepare_image(im0, protos.mean, protos.std)[0])
        for i, f in enumerate(tf):
            img, gt = read_pair(args.data, f); gts.append(gt)
            t = time.perf_counter(); probs = base_probs_of(base, img); tm['base'].append(time.perf_counter() - t)
            preds['base'].append(to_numpy(probs.argmax(0)).astype(np.uint8))
            t = time.perf_counter(); preds['DenseCRF'].append(crf_predict(img, probs.numpy(), **crf_cfg, n_iter=args.crf_iters))
            tm['crf'].append(time.perf_counter() - t)
            # brefine = refine_predict(img, probs, embedder, protos, **settings), timed in its two parts
            with torch.inference_mode():                 # each model's time includes preparing its input, as the base's does
                t = time.perf_counter()
                x, _ = prepare_image(img, protos.mean, protos.std); emb = embedder(x)
                t1 = time.perf_counter()
                out = to_numpy(relabel(emb, base_probs(probs, x, False, softmax=False), protos, **settings)[0]).astype(np.uint8)
                t2 = time.perf_counter()
            tm['emb'].append(t1 - t); tm['post'].append(t2 - t1)
            preds['brefine'].append(out)
            if i < 2:   # the split timing computes exactly what refine_predict computes
                ref = to_numpy(refine_predict(img, probs, embedder, protos, **settings))
                if not (ref == out).all(): raise AssertionError(f'split brefine differs from refine_predict on {f.name}')
            if (i + 1) % 25 == 0 or i + 1 == len(tf):
                log(f'  {i+1}/{len(tf)} images; s/img base {np.mean(tm["base"]):.3f} crf {np.mean(tm["crf"]):.3f} '
                    f'emb {np.mean(tm["emb"]):.3f} post {np.mean(tm["post"]):.3f}')
    with stage('test: metrics'):
        res = {k: metrics_row(v, gts) for k, v in preds.items()}
    with stage('figure'):
        shown = save_figure(args.out/'camvid_figure.png', args.data, tf, preds, gts, args.n_figure)

    s = {k: float(np.mean(v)) for k, v in tm.items()}
    s['brefine'] = s['emb'] + s['post']
    sec = {'base': s['base'], 'DenseCRF': s['crf'], 'brefine': s['brefine']}
    extra = {'base': '', 'DenseCRF': ' (+ base)', 'brefine': ' (+ base)'}
    lines = ['# CamVid benchmark: base vs DenseCRF vs brefine', '',
             f'SegNet split at 360x480; train {n_tr}, val {len(vf)}, test {len(tf)} images; {args.threads} torch thread(s) '
             f'(DenseCRF: 1), torch {torch.__version__}. All settings chosen on val, never on test.', '',
             f'- base: DeepLabV3 MobileNetV2 OS16, ImageNet init, {args.base_epochs} epochs (best val mIoU kept)',
             f'- DenseCRF (pydensecrf2): gaussian sxy=3 compat=3, bilateral {crf_cfg}, {args.crf_iters} iterations; '
             f'grid {args.crf_grid} on {crf_val["n_images"]} val images (val BF {crf_val["best"][0]:.4f} vs base {crf_val["base"][0]:.4f})',
             f'- brefine: MobileNetV2 embedder ({args.emb_dim}-d, ASPP {args.aspp_dim}, decoder {args.decoder_dim}), {args.emb_epochs} epochs'
             + (f' on the {len(files(args.data, "train", args.limit_train, args.emb_exclude))} training images not from {", ".join(args.emb_exclude)}'
                if args.emb_exclude else '') + f'; calibrated {settings} on {len(vf)} val images '
             + (f'with a stand-in embedder trained without {", ".join(args.cal_exclude)} '
                f'({len(files(args.data, "train", args.limit_train, args.cal_exclude))} training images), then deployed the embedder above '
                if args.cal_exclude else '') +
             f'(val BF {cal["boundary_f1"]:.4f} vs base {cal["base_boundary_f1"]:.4f}; grid {args.cal_grid})', '',
             '| method | mIoU | boundary IoU | boundary F @ 3 px | trimap IoU @ 5 px | s / image |',
             '|---|---:|---:|---:|---:|---:|']
    for k, r in res.items():
        lines.append(f"| {k} | {r['miou']:.4f} | {r['biou']:.4f} | {r['bf']:.4f} | {r['trimap']:.4f} | {sec[k]:.3f}{extra[k]} |")
    lines += ['', '| timing (test, mean over images) | s / image |', '|---|---:|',
              f"| base forward | {s['base']:.3f} |", f"| DenseCRF | {s['crf']:.3f} |",
              f"| brefine embedder forward | {s['emb']:.3f} |", f"| brefine post-processing (relabel) | {s['post']:.3f} |",
              f"| brefine total | {s['brefine']:.3f} |", f"| **ratio brefine total / DenseCRF** | **{s['brefine']/s['crf']:.2f}x** |", '',
              'Stage wall times: ' + ', '.join(f'{k} {v:.0f} s' for k, v in stage.times.items()), '',
              f'Figure: `camvid_figure.png` (test images {", ".join(tf[i].name for i in shown)}).', '']
    md = '\n'.join(lines)
    with atomic_write(args.out/'camvid_results.md', 'w') as fh: fh.write(md)
    print('\n' + md, flush=True)
    log(f'wrote {args.out/"camvid_results.md"} and {args.out/"camvid_figure.png"}; total {time.perf_counter() - T0:.0f} s')

if __name__ == '__main__':
    main()
