"""Benchmarks for brefine.learner (printed ratios, nothing asserted).

1. Step time: one `refine_learner` training step (forward, triplet sampling + loss, backward, optimiser step and all fastai
   callbacks) / a plain forward + backward of the same network with a dummy loss (target <= 1.15x); also against plain
   forward + backward + a torch Adam step. Measured in the same run, interleaved, medians.
2. Peak memory at 1024x2048, batch 1: `band_features` vs upsampling the embeddings to full size and indexing
   (target < half). Each variant runs in its own subprocess; we report the increase of peak RSS over the inputs.
3. Faster training: a `refine_learner` step with `ChannelsLastTraining` (channels_last=True, the default on the CPU) and
   with `BF16Training` added (bf16=True) against the float32 step in PyTorch's default layout (channels_last=False), for
   the benchmark's two embedders: the separate MobileNetV2 embedder and the head on a DeepLabV3 MobileNetV2 base model
   (shared backbone), batches of 8 x 3 x 360 x 480 (CamVid's), 2 threads; for the head, also the channels-last bfloat16
   step on cached features (feature_views=1, `FeatureCache`: the base forward runs once per view before training, not in
   the step), with the seconds per image that computing the cache takes. The variants take turns on the same batches;
   medians. bfloat16 is fast only on CPUs with native bfloat16 instructions; the printout says whether this one has them.

`--record` also writes the printout to bench/results/learner.txt and records it in bench/results/manifest.json.

usage: .venv/bin/python bench/learner.py [--quick] [--record]
"""
import argparse, os, sys, time, json, subprocess, statistics
import torch
from record import main_recorded

HERE = os.path.dirname(os.path.abspath(__file__))

def _batches(n, bs, H, W, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        coarse = torch.randint(0, 6, (bs, H // 32, W // 32), generator=g)
        m = coarse.repeat_interleave(32, 1).repeat_interleave(32, 2)
        e = torch.zeros_like(m, dtype=torch.bool)
        e[:, :, 1:] |= m[:, :, 1:] != m[:, :, :-1]; e[:, 1:] |= m[:, 1:] != m[:, :-1]
        band = torch.nn.functional.max_pool2d(e[:, None].float(), 7, 1, 3)[:, 0].bool()
        out.append((torch.randn(bs, 3, H, W, generator=g), m, band))
    return out

def _loaders(batches, bs):
    "(fastai DataLoaders of the (image, mask, band) `batches`, with one batch to validate; the list the step times go to; a function making the callbacks that time each training step, a pair per Learner)."
    from fastai.data.core import DataLoaders
    from fastai.data.load import DataLoader
    from fastai.callback.core import Callback
    items = [tuple(t[i] for t in b) for b in batches for i in range(bs)]
    dls = DataLoaders(DataLoader(items, bs=bs, shuffle=False, drop_last=True), DataLoader(items[:bs], bs=bs))
    dls.n_inp = 1
    times = []
    class Start(Callback):
        order = -1000
        def before_batch(self): self.t = time.perf_counter()
    class End(Callback):
        order = 1000
        def after_batch(self):
            if self.training: times.append(time.perf_counter() - self.learn.start.t)
    return dls, times, lambda: [Start(), End()]

def bench_step(bs=4, H=192, W=256, n=6, rounds=3, backbone='resnet18'):
    from brefine.learner import refine_learner
    torch.manual_seed(0)
    batches = _batches(n, bs, H, W)
    dls, times, timers = _loaders(batches, bs)
    learn = refine_learner(dls, backbone=backbone, emb_dim=64, n_triplets=4096, pretrained=False, channels_last=False, cbs=timers())
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)   # warm-up (allocations, optimiser state)
    net = learn.model
    opt = torch.optim.Adam(net.parameters(), 1e-4)
    plain, plain_opt, step = [], [], []
    for _ in range(rounds):
        times.clear()
        with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
        step += times[:]
        net.train()
        for with_opt in (False, True):
            for x, m, b in batches:
                t = time.perf_counter()
                e = net(x); e.float().mean().backward()
                if with_opt: opt.step()
                opt.zero_grad()
                (plain_opt if with_opt else plain).append(time.perf_counter() - t)
    emb = net(batches[0][0]).detach().requires_grad_()
    loss_t = []
    for _ in range(5 * rounds):
        t = time.perf_counter()
        learn.loss_func(emb, batches[0][1], batches[0][2]).backward()
        loss_t.append(time.perf_counter() - t)
    med = statistics.median
    return dict(step=med(step), plain=med(plain), plain_opt=med(plain_opt), loss=med(loss_t))

def bench_fast(bs=8, H=360, W=480, n=3, rounds=2, threads=2):
    "Median step times {embedder: {variant: seconds}} of refine_learner with channels_last False / True / True + bf16."
    from brefine.backbones import DeepLabV3MobileNetV2
    from brefine.learner import refine_learner
    torch.set_num_threads(threads); torch.manual_seed(0)
    dls, times, timers = _loaders(_batches(n, bs, H, W), bs)
    kinds = dict(separate=dict(backbone='mobilenet_v2', pretrained=False), shared=dict(base=DeepLabV3MobileNetV2(11, pretrained=False).eval()))
    variants = {'float32': dict(channels_last=False), 'channels-last': dict(channels_last=True), 'channels-last + bf16': dict(channels_last=True, bf16=True)}
    cached = {'cached features': dict(channels_last=True, bf16=True, feature_views=1)}
    learners = {(k, v): refine_learner(dls, emb_dim=32, n_triplets=16384, aspp_dim=64, decoder_dim=48, cbs=timers(), **kw, **vk)
                for k, kw in kinds.items() for v, vk in (variants | cached if k == 'shared' else variants).items()}
    res = {key: [] for key in learners}
    for r in range(rounds + 1):                                          # round 0 warms up (allocations, optimiser state)
        for key, l in learners.items():
            times.clear()
            with l.no_bar(), l.no_logging(): l.fit(1, 1e-3)
            if r: res[key] += times
    out = {}
    for (k, v), ts in res.items(): out.setdefault(k, {})[v] = statistics.median(ts)
    return out, _cache_seconds(learners[('shared', 'cached features')], dls, bs)

def _cache_seconds(learn, dls, bs) -> float:
    "Seconds per image of computing cached features (`feature_views`, one view, bfloat16) for the images of `dls`' training loader."
    from brefine.shared_backbone import feature_views
    dl = dls.train.new(shuffle=False, drop_last=False)
    t = time.perf_counter(); feature_views(learn.model, dl, 1, bf16=True)
    return (time.perf_counter() - t) / len(dl.dataset)

def _native_bf16() -> bool:
    "Whether this CPU has native bfloat16 instructions (AVX512-BF16 or AMX), as far as /proc/cpuinfo tells."
    try: flags = open('/proc/cpuinfo').read()
    except OSError: return False
    return 'avx512_bf16' in flags or 'amx_bf16' in flags

_MEM_CHILD = r'''
import sys, resource, torch, json
import torch.nn.functional as F
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from brefine.triplets import band_features
mode, grad = sys.argv[1], sys.argv[2] != '0'
H, W, C = 1024, 2048, 64
g = torch.Generator().manual_seed(0)
emb = torch.randn(1, C, H // 4, W // 4, generator=g).requires_grad_(grad)
coarse = torch.randint(0, 6, (1, H // 64, W // 64), generator=g)
m = coarse.repeat_interleave(64, 1).repeat_interleave(64, 2)
e = torch.zeros_like(m, dtype=torch.bool)
e[:, :, 1:] |= m[:, :, 1:] != m[:, :, :-1]; e[:, 1:] |= m[:, 1:] != m[:, :-1]
band = F.max_pool2d(e[:, None].float(), 7, 1, 3)[:, 0].bool()
del e, coarse
import gc; gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if mode == 'band':
    feats, b, y, x = band_features(emb, band)
elif mode == 'interp':
    b, y, x = band.nonzero(as_tuple=True)
    feats = F.interpolate(emb, (H, W), mode='bilinear', align_corners=False)[b, :, y, x]
else:
    feats = emb.new_zeros(1)
if grad: (feats.sum() if sys.argv[2] == 'sum' else feats.pow(2).sum()).backward()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(mb=(after - before) / 1024, band_px=int(band.sum()), frac=float(band.float().mean()))))
'''

def bench_memory():
    root = os.path.dirname(HERE)
    code = _MEM_CHILD.format(root=root)
    res = {}
    for grad in ('0', 'sum', 'sumsq'):
        for mode in ('band', 'interp'):
            out = subprocess.run([sys.executable, '-c', code, mode, str(grad)], capture_output=True, text=True, check=True)
            res[(mode, grad)] = json.loads(out.stdout.strip().splitlines()[-1])
    return res

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='fewer batches and rounds')
    main_recorded(ap, 'learner', lambda a: run(a.quick))

def run(quick):
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    r = bench_memory()
    info = r[('band', '0')]
    print(f"\n[memory] 1024x2048, batch 1, 64 channels, band {info['band_px']} px ({info['frac']:.1%} of the image); peak RSS increase:")
    for grad, what in (('0', 'forward'), ('sum', 'fwd+bwd, sum'), ('sumsq', 'fwd+bwd, sum sq')):
        b, i = r[('band', grad)]['mb'], r[('interp', grad)]['mb']
        print(f"  {what:15s} band_features {b:7.1f} MB   interpolate+index {i:7.1f} MB   ratio {b / i:.3f}  (target < 0.5)")
    t = bench_step(n=4 if quick else 6, rounds=2 if quick else 3)
    print("\n[step time] resnet18, batch 4 x 3 x 192 x 256, 4096 triplets (medians):")
    print(f"  refine_learner step           {t['step']*1e3:7.1f} ms")
    print(f"  plain fwd+bwd (dummy loss)    {t['plain']*1e3:7.1f} ms   ratio {t['step']/t['plain']:.3f}  (target <= 1.15)")
    print(f"  plain fwd+bwd+Adam step       {t['plain_opt']*1e3:7.1f} ms   ratio {t['step']/t['plain_opt']:.3f}")
    print(f"  of which: TripletLoss fwd+bwd {t['loss']*1e3:7.1f} ms   ({t['loss']/t['plain']:.1%} of plain fwd+bwd)")
    f, cache_s = bench_fast(n=2 if quick else 3, rounds=1 if quick else 2)
    print(f"\n[faster training] refine_learner step, batch 8 x 3 x 360 x 480, 16384 triplets, 2 threads (medians); "
          f"native bfloat16 on this CPU: {'yes' if _native_bf16() else 'no'}")
    for k, t in f.items():
        base = t['float32']
        print(f"  {k:9s} " + '   '.join(f"{v} {s*1e3:6.0f} ms ({s / base:.2f}x)" for v, s in t.items()))
    print(f"  computing the cached features: {cache_s*1e3:.0f} ms per image and view (the base forward up to the features, bfloat16, batches of 8)")

if __name__ == '__main__':
    main()
