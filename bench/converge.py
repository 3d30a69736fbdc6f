"""Converged base models: the benchmark's base model trained until its validation mIoU stops improving, resumable.

The model is `benchmark.base_model` (DeepLabV3-style MobileNetV2 at output stride 16, ImageNet init), with the benchmark's
data, loss and validation mIoU. Users train their models to convergence, so brefine is measured on such models too.

Schedule and stop rule (fixed in advance, the same for every data set):
- Adam (fastai's, weight decay 0.01), batch 8, learning rate 1e-3 after a warm-up over the first epoch (cosine from 4e-5);
- after each epoch, the validation mIoU; an epoch *improves* when it beats the best so far by at least MIN_GAIN (0.3 points);
- the learning rate is divided by 5 after PLATEAU (5) epochs without improvement (at most twice), and training stops after
  PATIENCE (10) epochs without improvement, or at --max-epochs. The converged model is the best epoch's weights.
- `--extra N` then trains N more epochs in the same run: the equal-compute baseline, the base model trained for its own
  budget plus brefine's (its best epoch over the whole run is kept).

Every epoch ends with an atomic checkpoint in --cache (`converge_state.pt`: weights, optimiser, random states, learning
rate, the curve so far), so an interrupted run continues from its last completed epoch with the same command. `--export`
copies the run to `bench/checkpoints/<dataset>/` (the optimiser's moments in bfloat16, to halve the file); a run whose
--cache is empty continues from there, so a run can move between machines through the repository. The weights
after the epochs in --keep and the best ones are kept (`base_converge_e{N}.pth`, `base_converge_best.pth`,
`base_converge_plus{N}_best.pth`), as plain state dicts that `benchmark.load_base` reads.

Writes `bench/results/<dataset>_base_curve.json`: the rule, the validation mIoU, loss and learning rate of every epoch, its
seconds, and which epoch each kept file holds; rewritten after every epoch, so it is the record of a run still going.

    .venv/bin/python bench/converge.py camvid                 # until the stop rule; run it again to continue after a stop
    .venv/bin/python bench/converge.py camvid --extra 30      # then 30 epochs more, for the equal-compute baseline
"""
from __future__ import annotations
import argparse, json, sys, time
from pathlib import Path
import benchmark as B
from record import RESULTS, provenance, record

MIN_GAIN, PLATEAU, PATIENCE, MAX_CUTS, LR, WARMUP_DIV = 0.003, 5, 10, 2, 1e-3, 25
STATE, BEST = 'converge_state.pt', 'base_converge_best.pth'
RULE = (f'Adam lr {LR:g} (cosine warm-up from lr/{WARMUP_DIV} over epoch 1), batch 8; an epoch improves when its validation '
        f'mIoU beats the best by >= {100 * MIN_GAIN:g} points; lr / 5 after {PLATEAU} epochs without improvement (at most '
        f'{MAX_CUTS}x); stop after {PATIENCE} epochs without improvement')

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('dataset', choices=sorted(B.DATA_DIRS))
    p.add_argument('--data', type=Path, default=None, help='data folder (default: the shared copy beside the repository)')
    p.add_argument('--cache', type=Path, default=None, help='checkpoints and kept weights (default: bench/out/<dataset>_converge)')
    p.add_argument('--keep', default='8,16,32', help='epochs whose weights are kept, comma-separated')
    p.add_argument('--max-epochs', type=int, default=150)
    p.add_argument('--extra', type=int, default=0, help='epochs to train after the stop rule fires (the equal-compute baseline)')
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--quick', action='store_true', help='smoke run: 8/4/4 images')
    p.add_argument('--export', action='store_true',
                   help='train nothing: write the run so far to --store (the state with its optimiser moments in bfloat16, and the '
                        'kept weights), where a run on another machine continues from it')
    p.add_argument('--store', type=Path, default=None, help='where --export writes and a run without a checkpoint in --cache '
                   'continues from (default: bench/checkpoints/<dataset>)')
    a = p.parse_args(argv)
    a.data = a.data or B.DATA/B.DATA_DIRS[a.dataset]
    a.cache = a.cache or B.REPO/f'bench/out/{a.dataset}_converge'
    a.keep = sorted({int(k) for k in a.keep.split(',') if k})
    a.out = a.cache
    a.store = a.store or B.REPO/f'bench/checkpoints/{a.dataset}'
    return a

def weights(learn) -> dict: return {k: v.detach().cpu().clone() for k, v in learn.model.state_dict().items()}

def stop_epoch(curve: list) -> int|None:
    "The number of epochs after which the stop rule fired on `curve` (validation mIoU per epoch), or None."
    best, since = -1., 0
    for i, m in enumerate(curve):
        if m >= best + MIN_GAIN: best, since = m, 0
        else: since += 1
        if since >= PATIENCE: return i + 1
    return None

def _moments(o, dtype):
    "The optimiser state `o` with its floating-point tensors of more than one element in `dtype` (bfloat16 to store, float32 to train)."
    import torch
    if isinstance(o, dict): return {k: _moments(v, dtype) for k, v in o.items()}
    if isinstance(o, list): return [_moments(v, dtype) for v in o]
    return o.to(dtype) if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel() > 1 else o

def export(a):
    "Copy the run in `a.cache` to `a.store`: the state, its moments in bfloat16, and the kept weights; record its curve so far."
    import shutil
    from brefine.core import atomic_save, safe_load
    ck = safe_load(a.cache/STATE, 'converge checkpoint')
    atomic_save(dict(ck, opt=_moments(ck['opt'], __import__('torch').bfloat16)), a.store/STATE)
    for f in sorted(a.cache.glob('base_converge_*.pth')): shutil.copyfile(f, a.store/f.name)
    B.log(f"exported epoch {ck['state']['epoch']} of {a.cache} to {a.store}")
    curve = RESULTS/f'{a.dataset}_base_curve.json'
    if not a.quick and curve.exists():
        c = json.loads(curve.read_text())
        record(curve.stem, curve, c['command'].split()[2:], sum(e['seconds'] for e in c['curve']), script='bench/converge.py',
               started={k: c[k] for k in ('command', 'git_commit', 'date', 'machine')})

def restore(a):
    "When --cache holds no run but --store does, continue from the stored one: its kept weights copied to --cache."
    import shutil
    if (a.cache/STATE).exists() or not (a.store/STATE).exists(): return None
    a.cache.mkdir(parents=True, exist_ok=True)
    for f in sorted(a.store.glob('base_converge_*.pth')): shutil.copyfile(f, a.cache/f.name)
    return a.store/STATE

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    import torch, importlib
    from fastai.learner import Learner
    from fastai.callback.schedule import ParamScheduler, SchedCos
    from fastai.torch_core import set_seed
    from brefine.core import atomic_save, atomic_write, safe_load
    from brefine.checkpoints import rng_states, set_rng_states, plain_tree
    importlib.import_module('fastai.callback.schedule')
    if a.export: return export(a)
    stored = restore(a)
    ds = B.setup(a)
    out = RESULTS/f'{a.dataset}_base_curve.json' if not a.quick else a.cache/f'{a.dataset}_base_curve.json'
    set_seed(a.seed)
    dls = ds.dls(bs=8, num_workers=0)
    learn = Learner(dls, B.base_model(ds.n_classes), loss_func=B.BaseLoss(ds.void), metrics=[B.val_miou(ds.n_classes, ds.void)],
                    path=a.cache, model_dir='.')
    st = dict(epoch=0, lr=LR, cuts=0, best=-1., best_epoch=None, since=0, stopped_at=None, curve=[], kept={})
    f = a.cache/STATE
    if f.exists() or stored:
        ck = safe_load(stored or f, 'converge checkpoint')
        learn.model.load_state_dict(ck['model']); learn.create_opt(); learn.opt.load_state_dict(_moments(ck['opt'], torch.float32))
        set_rng_states(ck['rng'], dls); st = ck['state']
        B.log(f"resumed from {stored or f} after epoch {st['epoch']} (best {st['best']:.4f} at epoch {st['best_epoch']})")
    started = provenance('bench/converge.py', argv)
    target = lambda: (st['stopped_at'] + a.extra) if st['stopped_at'] is not None else a.max_epochs
    trained = 0                                          # epochs this invocation trains
    with learn.no_bar(), learn.no_logging():
        while st['epoch'] < min(target(), a.max_epochs + a.extra):
            t0, ep = time.perf_counter(), st['epoch']
            cbs = [ParamScheduler({'lr': SchedCos(LR / WARMUP_DIV, LR)})] if ep == 0 else []
            learn.fit(1, lr=st['lr'], cbs=cbs)
            tl, vl, miou = learn.recorder.values[-1]
            st['epoch'], trained = ep + 1, trained + 1
            st['curve'].append(dict(epoch=ep + 1, val_miou=float(miou), val_loss=float(vl), train_loss=float(tl), lr=st['lr'],
                                    seconds=round(time.perf_counter() - t0, 1)))
            new_best = miou > st['best']
            if miou >= st['best'] + MIN_GAIN: st['since'] = 0
            else: st['since'] += 1
            if new_best: st['best'], st['best_epoch'] = float(miou), ep + 1
            conv, plus = st['stopped_at'] is None, a.cache/f'base_converge_plus{a.extra}_best.pth'
            if not conv and 'plus_best' not in st['kept']:          # the extra phase starts from the best of the whole run so far
                atomic_save(safe_load(a.cache/BEST, 'base weights'), plus); st['kept']['plus_best'] = st['kept']['best']
            if new_best: atomic_save(weights(learn), a.cache/BEST if conv else plus); st['kept']['best' if conv else 'plus_best'] = ep + 1
            if ep + 1 in a.keep: atomic_save(weights(learn), a.cache/f'base_converge_e{ep + 1}.pth'); st['kept'][f'e{ep + 1}'] = ep + 1
            if conv and st['since'] >= PATIENCE: st['stopped_at'] = ep + 1; B.log(f'stop rule fired after epoch {ep + 1}')
            elif conv and st['since'] and st['since'] % PLATEAU == 0 and st['cuts'] < MAX_CUTS: st['lr'] /= 5; st['cuts'] += 1
            B.log(f"epoch {ep + 1}: val mIoU {miou:.4f} (best {st['best']:.4f} at {st['best_epoch']}), val loss {vl:.4f}, "
                  f"train loss {tl:.4f}, lr {st['curve'][-1]['lr']:g}, {st['curve'][-1]['seconds']:.0f} s")
            atomic_save(dict(model=weights(learn), opt=plain_tree(learn.opt.state_dict()), rng=rng_states(dls), state=st), f)
            with atomic_write(out, 'w') as fh:
                json.dump(dict(dataset=ds.name, model='DeepLabV3 MobileNetV2 OS16, ImageNet init (bench/benchmark.py base_model)',
                               stop_rule=RULE, extra_epochs=a.extra, **{k: v for k, v in st.items() if k != 'curve'},
                               curve=st['curve'], **started), fh, indent=1)
    B.log(f"done: {st['epoch']} epochs, best val mIoU {st['best']:.4f} at epoch {st['best_epoch']}; kept {st['kept']}; curve in {out}")
    if trained and not a.quick: record(out.stem, out, argv, sum(c['seconds'] for c in st['curve']), script='bench/converge.py', started=started)

if __name__ == '__main__':
    main()
