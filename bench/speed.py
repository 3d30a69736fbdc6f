"""brefine's cost relative to the base model, measured in one run (speed and memory against the base forward).

For each size (360x480 and 1024x2048), batch 1, CPU threads as given, and each way of computing the embedding (a *path*):
- base forward: a DeepLabV3-style MobileNetV2 OS16 (bench/benchmark.py's base, 11 classes, random weights: speed only),
  logits at image size, from the raw uint8 image (`prepare_image` included, as in bench/benchmark.py);
- refinement: what brefine adds to it -- the embedding of the raw image (`prepare_image` included) and the post-processing;
- post-processing: everything `refine_predict` does after the embedder, as bench/benchmark.py runs it:
  `relabel(emb, base_probs(probs, x, False, softmax=False), protos, settings)` with `probs` the base model's softmax
  probabilities (M,H,W) at image size -- here scene-like 11-class probabilities (random classes on a 48-pixel grid,
  smoothed), so the band has a realistic size; their top-1 stays below 0.9, so with a gate as without one every band
  pixel is re-decided, the slowest case;
- of which the floor: the steps of the post-processing that touch every pixel whatever the settings, the arg-max (with the
  check that the scores are probabilities) and the band of the arg-max map, from the same probabilities, as
  `relabel(..., top_n=1, stages=True)` runs them (its int64 copies of the labels included);
- peak memory: each stage runs once more under torch.profiler(profile_memory=True); its allocation and free events,
  in time order, give the peak of what torch allocated during that stage (model weights and inputs excluded); on a GPU
  (`--device cuda`), the peak of `torch.cuda.max_memory_allocated` above what was allocated before the stage.

`--device cuda` runs the models and the post-processing on the GPU (the raw image is prepared on the CPU and sent over, as
a user's would be; each time waits for the GPU to finish); its rows are written to `speed_cuda.txt` / `speed_cuda.json`.

Paths (PATHS): `separate`, the embedder EmbeddingNet('mobilenet_v2', ...) computes its own backbone (default sizes: the
light one bench/benchmark.py trains); `recipe`, a SharedEmbeddingNet head of the same sizes on the base model's own
features, captured by the base forward that gives the scores, with copies of the base's last two blocks by default
(`--train-blocks`; brefine adds the copied blocks, the head and the post-processing); `head`, the same head alone, with no
copied blocks (HEAD: `refine_learner(dls, base=model, train_blocks=0)`); `light`, the same on a head with
`fusion='sum'` and no copied blocks (LIGHT: `refine_learner(dls, base=model, fusion='sum', train_blocks=0)`). A path is a function `(H, W, a, post) -> dict(base=, refine=, post=, emb=)` of
closures over models built there, `post(emb)` being the post-processing; each path gives a row per size with the same
fields, so another way of computing the embedding is one more such function in PATHS.

`--base-models` takes the base models in turn: bench/benchmark.py's (`mobilenet_v2`, the default) and torchvision's
DeepLabV3-ResNet50 (`deeplabv3_resnet50`, random weights), a heavier model like many users'. Each row also gives the
post-processing's own cost in milliseconds per megapixel (`post_ms_per_mp`), which does not depend on the base model.

Prints times and peak-memory growth as ratios to the base forward's. `--record` also writes the printout to
bench/results/speed.txt and the rows to bench/results/speed.json (with `--device cuda`: speed_cuda.txt, speed_cuda.json) -- a list of {size ("HxW"), path, base_model, base_s,
refine_over_base, post_over_base, post_ms_per_mp, peak_mem_over_base} -- and records both in bench/results/manifest.json.
`--before REV` also times the post-processing of brefine as of git revision REV (its whole package, imported as
`brefine_before` from a temporary copy), and its whole refinement (that version's embedder, built with the same seed, and
its post-processing: column `before refine/base`), or `--before FILE` the post-processing of another copy of the module
that holds `relabel` (brefine/refine.py; brefine/inference.py in older versions) alone, in the
same process, interleaved with the current one. Every version's names are taken from its package's top level
(`brefine.relabel`, `brefine.prepare_image`, ...), which every version exports, whatever module defines them; `--profile` prints where the post-processing's time goes, function by
function (cProfile), for the current version and with --before for the other, and where the embedding's goes, part by part of
the embedder (forward hooks). Usage:
    .venv/bin/python bench/speed.py [--threads 2] [--repeats 5] [--device cuda] [--emb-dim 32 --aspp-dim 64 --decoder-dim 48 --fusion concat]
        [--top-n 3 --radius 18 --tau none --alpha 0.1 --vote 11 --grey 10]   (defaults: the settings the CamVid benchmark calibrated on val)
        [--paths separate shared] [--before 0c01abd | --before /tmp/orig_refine.py] [--profile] [--record]
"""
import argparse, functools, importlib, importlib.util, itertools, json, os, sys, time
from pathlib import Path
from record import main_recorded, record, RESULTS

SIZES = [(360, 480), (1024, 2048)]
FIELDS = ('size', 'path', 'base_model', 'base_s', 'refine_over_base', 'post_over_base', 'post_ms_per_mp', 'peak_mem_over_base')   # a row of speed.json
BASE_MODELS = ('mobilenet_v2', 'deeplabv3_resnet50')   # bench/benchmark.py's base; torchvision's DeepLabV3-ResNet50, a heavier common one

def make_base(a):
    "The base model of --base-model, 11 classes, random weights (speed only), in eval mode on --device."
    if a.base_model == 'mobilenet_v2':
        from benchmark import base_model
        return base_model(n_classes=11, pretrained=False).eval().to(a.device)
    from torchvision.models.segmentation import deeplabv3_resnet50
    return deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=11, aux_loss=False).eval().to(a.device)

def _scene_probs(H, W, M=11):
    "Scene-like softmax probabilities (M,H,W): random classes on a 48-pixel grid, logits 4 for the class, smoothed over 9x9."
    import torch, torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    lab = F.interpolate(torch.randint(0, M, (1, 1, H // 48 + 1, W // 48 + 1), generator=g).float(), size=(H, W), mode='nearest')[0, 0].long()
    return F.avg_pool2d(F.one_hot(lab, M).permute(2, 0, 1).float()[None] * 4, 9, 1, 4).softmax(1)[0].contiguous()

def _module_copy(path):
    "Another copy of the module that holds `relabel` (e.g. the previous version of brefine/refine.py) loaded as a module of the brefine package: its names, then brefine's for those it does not define."
    import types, brefine
    spec = importlib.util.spec_from_file_location('brefine._relabel_before', path)
    m = importlib.util.module_from_spec(spec); m.__package__ = 'brefine'
    sys.modules[spec.name] = m; spec.loader.exec_module(m)
    return types.SimpleNamespace(**{**{k: getattr(brefine, k) for k in brefine.__all__}, **{k: v for k, v in vars(m).items() if not k.startswith('_')}})

@functools.cache
def package_at(rev: str):
    "brefine as of git revision `rev`: its whole package, extracted to a temporary folder (removed at exit) and imported as `brefine_before`; its imports of itself by name point to that copy."
    import atexit, re, shutil, subprocess, tarfile, tempfile, io
    repo, d = Path(__file__).resolve().parent.parent, Path(tempfile.mkdtemp(prefix='brefine_before_'))
    atexit.register(shutil.rmtree, d, True)
    tar = subprocess.run(['git', 'archive', rev, 'brefine'], cwd=repo, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t: t.extractall(d, filter='data')
    (d/'brefine').rename(d/'brefine_before'); sys.path.insert(0, str(d))
    for f in (d/'brefine_before').glob('*.py'):          # `from brefine import core, ...` in __init__: the copy's modules, not this version's
        f.write_text(re.sub(r'^(\s*(?:from|import)\s+)brefine\b', r'\1brefine_before', f.read_text(), flags=re.M))
    return importlib.import_module('brefine_before')

def _before(spec: str):
    "The other version's names: a copy of the module that holds `relabel` when `spec` is a file, else brefine at git revision `spec`."
    return _module_copy(spec) if Path(spec).is_file() else package_at(spec)

def prototypes_for(v, protos):
    "`protos` as the version `v` of brefine (this one, or another) takes them: that version's own `Prototypes`, which its checks ask for."
    if v.Prototypes is type(protos): return protos
    return v.Prototypes(protos.vectors, protos.counts, train_radius=protos.train_radius, mean=protos.mean, std=protos.std)

def post_processing(v, probs, x, protos, a):
    "`post(emb)`: the post-processing of the version `v` of brefine (this one, or another) of the embedding `emb`, as bench/benchmark.py runs it."
    s = v.RefineSettings(top_n=a.top_n, radius=a.radius, tau=a.tau, alpha=a.alpha, vote=a.vote, **(dict(grey=a.grey) if a.grey else {}))
    if not a.grey: return lambda emb: v.relabel(emb, v.base_probs(probs, x, False, softmax=False), protos, s)
    return lambda emb: v.relabel(emb, v.base_probs(probs, x, False, softmax=False), protos, s, levels=v.grey_levels(x, protos.mean, protos.std))

def separate(H, W, a, post, v=None) -> dict:
    "The `separate` path: the embedder computes its own backbone from the raw image (brefine's, or that of the version `v` of it)."
    import torch, numpy as np, brefine
    EmbeddingNet, prepare_image = (v or brefine).EmbeddingNet, (v or brefine).prepare_image
    base = make_base(a)
    torch.manual_seed(0)
    emb_net = EmbeddingNet('mobilenet_v2', emb_dim=a.emb_dim, pretrained=False, aspp_dim=a.aspp_dim, decoder_dim=a.decoder_dim, fusion=a.fusion).eval().to(a.device)
    img = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    prep = lambda: prepare_image(img, a.mean, a.std)[0].to(a.device)
    with torch.inference_mode(): emb = emb_net(prep())          # the embedding the post-processing alone works on
    return dict(base=lambda: base(prep()), refine=lambda: post(emb_net(prep())), post=lambda: post(emb), emb=emb,
                embedding=(emb_net, lambda: emb_net(prep())))

def shared(H, W, a, post, fusion: str|None = None, train_blocks: int|None = None, v=None) -> dict:
    "The `recipe` path (and, with other arguments, `head` and `light`): the embedder is a head on the base model's own features (`SharedEmbeddingNet` of brefine or of the version `v` of it, with `fusion` and `train_blocks` or else --fusion and --train-blocks); the base forward that gives the scores also gives the head's input, so brefine adds the copied blocks, the head and the post-processing."
    import torch, numpy as np, brefine
    SharedEmbeddingNet, prepare_image, embedding_size = ((v or brefine).SharedEmbeddingNet, (v or brefine).prepare_image,
                                                         (v or brefine).embedding_size)
    base = make_base(a)
    torch.manual_seed(0)
    net = SharedEmbeddingNet(base, emb_dim=a.emb_dim, aspp_dim=a.aspp_dim, decoder_dim=a.decoder_dim, train_blocks=a.train_blocks if train_blocks is None else train_blocks, fusion=fusion or a.fusion).eval()
    img = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    prep = lambda: prepare_image(img, a.mean, a.std)[0].to(a.device)
    size = embedding_size(prep())
    with torch.inference_mode():
        _, low, deep = net.features(prep(), whole=True)       # what the base forward's hooks capture
        emb = net.embed_features(low, deep, size)
    return dict(base=lambda: base(prep()), refine=lambda: post(net.embed_features(low, deep, size)), post=lambda: post(emb), emb=emb,
                embedding=(net, lambda: net.embed_features(low, deep, size)))

HEAD = dict(train_blocks=0)                      # the `head` path: the shared head alone, no copied blocks
LIGHT = dict(fusion='sum', train_blocks=0)       # the `light` path: the shared head with the light fusion, no copied blocks
PATHS = {'separate': separate, 'recipe': shared, 'head': functools.partial(shared, **HEAD), 'light': functools.partial(shared, **LIGHT)}

def stages(path: str, H, W, a) -> tuple:
    "(the closures timed for `path` at HxW: the path's base, refine and post, the floor, and with --before the other version's post-processing (and with a revision its refinement); the path's (embedder, embedding closure))."
    import torch, brefine
    from brefine import Prototypes, base_probs, relabel
    torch.set_num_threads(a.threads)
    probs = _scene_probs(H, W).to(a.device)
    protos = Prototypes(torch.randn(11, a.emb_dim, generator=torch.Generator().manual_seed(1)), torch.ones(11, dtype=torch.long),
                        train_radius=3, mean=a.mean, std=a.std)
    x = torch.zeros(1, 3, H, W, device=a.device)                 # the prepared image: base_probs reads its size
    st = PATHS[path](H, W, a, post_processing(brefine, probs, x, protos, a))
    emb, embedding = st.pop('emb'), st.pop('embedding')
    st['floor'] = lambda: relabel(emb, base_probs(probs, x, False, softmax=False), protos, top_n=1, radius=a.radius, stages=True).band
    if a.before:
        v = _before(a.before)
        before = post_processing(v, probs, x, prototypes_for(v, protos), a)
        st['before'] = lambda: before(emb)
        if not Path(a.before).is_file():                             # a revision: its own embedder too, built as this path builds one
            st['before_refine'] = PATHS[path](H, W, a, before, v=v)['refine']
    return st, embedding

def timings(st: dict, repeats: int) -> dict:
    "Median seconds of each closure, the closures taking turns (so that a change of machine load hits them alike); on a GPU each time ends when the GPU has finished."
    import torch
    _wait = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else (lambda: None)   # a GPU's work is done
    with torch.inference_mode():
        for f in st.values(): f()                                 # warm-up
        ts = {k: [] for k in st}
        for _ in range(repeats):
            for k, f in st.items():
                _wait(); s = time.perf_counter(); f(); _wait(); ts[k].append(time.perf_counter() - s)
    return {k: sorted(v)[len(v) // 2] for k, v in ts.items()}

def peak_mib(f, device: str = 'cpu') -> float:
    "Peak of the memory torch allocates on the CPU during `f()` (torch.profiler's allocation and free events, in time order); on a GPU, the peak of what the CUDA allocator holds above what it held before."
    import itertools, torch
    from torch.profiler import profile, ProfilerActivity
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device); before = torch.cuda.memory_allocated(device); torch.cuda.reset_peak_memory_stats(device)
        with torch.inference_mode(): f()
        torch.cuda.synchronize(device); return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof: f()
    ev = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    return max(itertools.accumulate(m for _, m in ev), default=0) / 2**20

def profile(f, repeats: int, ours, top: int = 16) -> list:
    "Where `f`'s time goes (cProfile over `repeats` calls): (ms per call, calls per call, name), the functions of the files `ours(file)` by cumulative time, then the torch/numpy/cv2 calls by own time."
    import cProfile, pstats, torch
    pr = cProfile.Profile()
    with torch.inference_mode():
        f(); pr.enable()
        for _ in range(repeats): f()
        pr.disable()
    mine, calls = [], []
    for (file, _, name), (_, nc, tt, ct, _) in pstats.Stats(pr).stats.items():
        if ours(file): mine.append((ct, nc, f'{name}()'))
        elif file == '~': calls.append((tt, nc, name.replace("<method '", '').replace("<built-in method ", '').split("'")[0].split(' ')[0].rstrip('>')))
    per = lambda rows: [(t / repeats * 1e3, n / repeats, nm) for t, n, nm in sorted(rows, reverse=True)[:top]]
    return per(mine) + [None] + per(calls)

def embedding_parts(net, f, repeats: int) -> list:
    "Where the embedding's time goes: (ms per call, part) for each top-level module of the embedder `net` (an `EmbeddingHead`'s own parts spelled out), timed by forward hooks over `repeats` calls of `f`, and the rest of `f` (interpolation, concatenation, normalisation)."
    import torch
    from brefine.embedder import EmbeddingHead
    parts = {}
    for n, m in net.named_children():
        sub = dict(m.named_children()) if isinstance(m, EmbeddingHead) else {}
        parts.update({f'{n}.{k}': c for k, c in sub.items()} if sub else {n: m})
    spent, start, hooks = dict.fromkeys(parts, 0.), {}, []
    for n, m in parts.items():
        hooks.append(m.register_forward_pre_hook(lambda mod, args, n=n: start.__setitem__(n, time.perf_counter())))
        hooks.append(m.register_forward_hook(lambda mod, args, out, n=n: spent.__setitem__(n, spent[n] + time.perf_counter() - start[n])))
    try:
        with torch.inference_mode():
            f(); spent.update(dict.fromkeys(parts, 0.))           # warm-up
            t = time.perf_counter()
            for _ in range(repeats): f()
            total = time.perf_counter() - t
    finally:
        for h in hooks: h.remove()
    rows = [(v / repeats * 1e3, n) for n, v in spent.items()]
    return rows + [((total - sum(spent.values())) / repeats * 1e3, 'the rest: interpolation, concatenation, normalisation')]

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--threads', type=int, default=2); ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--device', default='cpu', help="where the models and the post-processing run: 'cpu' or 'cuda'")
    ap.add_argument('--emb-dim', type=int, default=32); ap.add_argument('--aspp-dim', type=int, default=64)
    ap.add_argument('--decoder-dim', type=int, default=48)
    ap.add_argument('--fusion', default='concat', help="the embedder head's fusion: 'concat' or 'sum' (see brefine.embedder.EmbeddingHead)")
    ap.add_argument('--train-blocks', type=int, default=None, help="the recipe path's copied base blocks (default: SharedEmbeddingNet's)")
    ap.add_argument('--top-n', type=int, default=3); ap.add_argument('--radius', type=int, default=18)   # the settings calibrated
    ap.add_argument('--tau', type=lambda v: None if v.lower() == 'none' else float(v), default=None)   # on CamVid val
    ap.add_argument('--alpha', type=float, default=0.1); ap.add_argument('--vote', type=int, default=11)
    ap.add_argument('--grey', type=float, default=10., help="the vote's grey-level weight (0: none)")
    ap.add_argument('--paths', nargs='+', choices=sorted(PATHS), default=list(PATHS))
    ap.add_argument('--base-models', nargs='+', default=['mobilenet_v2'], choices=BASE_MODELS,
                    help="the base models, each in turn: bench/benchmark.py's DeepLabV3-MobileNetV2, torchvision's DeepLabV3-ResNet50 (random weights)")
    ap.add_argument('--before', help="a git revision, or another copy of the module holding relabel (brefine/refine.py), whose post-processing to time alongside")
    ap.add_argument('--profile', action='store_true', help="print where the post-processing's time goes, function by function")
    ap.set_defaults(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    main_recorded(ap, 'speed', run, results=_results_name)

def _results_name(a) -> str:
    "The stem of the results files: speed on the CPU, speed_cuda on a GPU."
    return 'speed' if a.device == 'cpu' else f"speed_{a.device.split(':')[0]}"

def run(a):
    import torch
    t0 = time.perf_counter()
    on = f"{torch.cuda.get_device_name(a.device)}, torch {torch.__version__}, " if torch.device(a.device).type == 'cuda' else ''
    print(f'brefine speed ({on}batch 1, {a.threads} threads, median of {a.repeats}; embedder emb_dim {a.emb_dim}, '
          f'aspp {a.aspp_dim}, decoder {a.decoder_dim}, fusion {a.fusion}; top_n {a.top_n}, radius {a.radius}, tau {a.tau}, alpha {a.alpha}, vote {a.vote}, grey {a.grey})')
    print(f"{'size':>10} {'path':>9} {'base s':>7} {'post s':>7} {'refine/base':>12} {'post/base':>10} {'floor/base':>11} "
          f"{'mem refine/base':>16} {'mem post/base':>14}" + (f" {'before post/base':>17}" if a.before else '')
          + (f" {'before refine/base':>19}" if a.before and not Path(a.before).is_file() else ''))
    rows = []
    for a.base_model, path, (H, W) in itertools.product(a.base_models, a.paths, SIZES):
        st, embedding = stages(path, H, W, a)
        tm, mem = timings(st, a.repeats), {k: peak_mib(st[k], a.device) for k in ('base', 'refine', 'post')}
        row = dict(size=f'{H}x{W}', path=path, base_model=a.base_model, base_s=round(tm['base'], 4),
                   refine_over_base=round(tm['refine'] / tm['base'], 4), post_over_base=round(tm['post'] / tm['base'], 4),
                   post_ms_per_mp=round(tm['post'] * 1e3 / (H * W / 1e6), 2), peak_mem_over_base=round(mem['refine'] / max(mem['base'], 1e-9), 3))
        rows.append(row)
        print(f"{row['size']:>10} {path:>9} {tm['base']:7.3f} {tm['post']:7.4f} {row['refine_over_base']:12.3f} {row['post_over_base']:10.3f} "
              f"{tm['floor'] / tm['base']:11.3f} {row['peak_mem_over_base']:16.2f} {mem['post'] / max(mem['base'], 1e-9):14.2f}"
              + (f" {tm['before'] / tm['base']:17.3f}" if a.before else '')
              + (f" {tm['before_refine'] / tm['base']:19.3f}" if 'before_refine' in tm else '')
              + f"   (peak MiB: base {mem['base']:.0f}, refine {mem['refine']:.0f}, post {mem['post']:.0f})", flush=True)
        if a.profile:
            pkg = str(Path(__file__).resolve().parent.parent/'brefine') + os.sep
            for name, f in [('post', st['post'])] + ([('before', st['before'])] if a.before else []):
                print(f'  where the time of {name} goes at {H}x{W}, ms per call (calls): brefine by cumulative time | torch, numpy, cv2 by own time')
                ours = (lambda fl: fl.startswith(pkg)) if name == 'post' else (lambda fl: fl == a.before or 'brefine_before' in fl or fl.startswith(pkg))
                for r in profile(f, a.repeats, ours): print('    ' + ('-' * 40 if r is None else f'{r[0]:9.2f} ({r[1]:g})  {r[2]}'))
            print(f'  where the time of the embedding goes at {H}x{W}, ms per call: each part of the {type(embedding[0]).__name__}')
            for ms, n in embedding_parts(*embedding, a.repeats): print(f'    {ms:9.2f}  {n}')
    if a.record:
        path = RESULTS/f'{_results_name(a)}.json'; tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
        tmp.write_text(json.dumps([{k: r[k] for k in FIELDS} for r in rows], indent=1) + '\n'); os.replace(tmp, path)
        record(_results_name(a), path, sys.argv[1:], time.perf_counter() - t0, script='bench/speed.py')

if __name__ == '__main__': main()
