"""Prototype extraction under torch.distributed (gloo, 2 CPU processes) equals a one-process run on the same data."""
import os, socket
import pytest, torch, torch.nn as nn
import torch.distributed as dist
import torch.multiprocessing as mp
from brefine import extract_prototypes

def _data():
    g = torch.Generator().manual_seed(0)
    imgs = torch.rand(8, 3, 20, 24, generator=g)
    masks = torch.randint(0, 4, (8, 1, 5, 6), generator=g).repeat_interleave(4, 2).repeat_interleave(4, 3)[:, 0]
    return imgs, masks

def _embedder():
    torch.manual_seed(0)
    return nn.Conv2d(3, 5, 3, stride=2, padding=1)

def _worker(rank, world, port, out, empty_rank=None):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world)
    imgs, masks = _data()
    shard = [(imgs[i:i+2], masks[i:i+2]) for i in range(rank * 2, 8, world * 2)]   # each process sees its own batches
    if empty_rank is not None:                                                       # one process gets nothing, another all
        shard = [] if rank == empty_rank else [(imgs[i:i+2], masks[i:i+2]) for i in range(0, 8, 2)]
    pr = extract_prototypes(_embedder(), shard, 4, train_radius=2, progress=False)
    if rank == 0: torch.save({'vectors': pr.vectors, 'counts': pr.counts}, out)
    dist.destroy_process_group()

def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available in this build')
@pytest.mark.parametrize('empty_rank', [None, 0, 1])
def test_two_process_prototypes_equal_one_process(tmp_path, empty_rank):
    out = tmp_path/'p.pt'
    mp.spawn(_worker, args=(2, _free_port(), str(out), empty_rank), nprocs=2, join=True)
    two = torch.load(out, weights_only=True)
    imgs, masks = _data()
    one = extract_prototypes(_embedder(), [(imgs[i:i+2], masks[i:i+2]) for i in range(0, 8, 2)], 4, train_radius=2, progress=False)
    assert torch.equal(two['counts'], one.counts)
    torch.testing.assert_close(two['vectors'], one.vectors, rtol=1e-5, atol=1e-6)

# --- the command line under torchrun (2 CPU processes, gloo) ---------------------------------------------------------
import subprocess, sys, warnings
from pathlib import Path
from brefine.checkpoints import load_checkpoint
from brefine.core import atomic_save
from brefine.data import make_synthetic_folder, SYNTH_CODES
from brefine.prototypes import Prototypes

BREFINE = Path(sys.executable).parent/'brefine'
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg')

def torchrun(*args, nproc=2, retries=1):
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', str(nproc), '--master_port', str(_free_port()),
           '--no-python', str(BREFINE)] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    if r.returncode != 0 and 'Signal 6 (SIGABRT)' in r.stderr and retries:
        # A worker has died of a bare SIGABRT, with no Python error, in two clean-clone CI runs on a 2-core machine;
        # once more on a fresh port, said out loud. A real failure fails again.
        warnings.warn(f"torchrun worker aborted (SIGABRT) without an error message; running once more: {' '.join(map(str, args))}")
        if '--out' in args:                                   # the output and any temporary file of it, so the rerun starts clean
            out = Path(args[args.index('--out') + 1])
            for f in out.parent.glob(f'.{out.name}.*.tmp' if '--resume' in args else f'*{out.name}*'): f.unlink()   # a resume keeps its checkpoint (written atomically)
        return torchrun(*args, nproc=nproc, retries=retries - 1)
    why = [l for l in r.stderr.splitlines() if any(w in l for w in ('Error', 'error', 'what()', 'abort', 'Abort', 'Signal'))]
    assert r.returncode == 0, (r.stdout[-2000:], why[:30], r.stderr[-3000:])
    return r

@pytest.fixture(scope='module')
def data(tmp_path_factory):
    d = make_synthetic_folder(tmp_path_factory.mktemp('ddp')/'data', n_train=8, n_valid=4, seed=1, size=(48, 64))
    (d/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    return d

@pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')
def test_torchrun_training_writes_one_checkpoint(data, tmp_path):
    pytest.importorskip('accelerate')
    out = tmp_path/'run'; out.mkdir()
    r = torchrun('train', data, '--out', out/'emb.pt', '--backbone', 'mobilenet_v2', '--emb_dim', 8, '--epochs', 2, '--bs', 2)
    assert 'data-parallel training in 2 processes (MULTI_CPU)' in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ['emb.pt']          # one checkpoint, no per-rank or temp files
    ck = load_checkpoint(out/'emb.pt')
    assert (ck['epoch'], ck['n_epochs']) == (2, 2)
    assert r.stdout.count('wrote ') == 1                               # only rank 0 reports

@pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')
def test_torchrun_prototypes_equal_one_process(data, tmp_path):
    from brefine.cli import prototypes, train
    ck = train(data, out=tmp_path/'emb.pt', backbone='mobilenet_v2', emb_dim=8, epochs=1, bs=4)
    torchrun('prototypes', ck, data, '--out', tmp_path/'p2.pt', '--bs', 2)
    prototypes(ck, data, out=tmp_path/'p1.pt', bs=2)
    one, two = Prototypes.load(tmp_path/'p1.pt'), Prototypes.load(tmp_path/'p2.pt')
    assert torch.equal(two.counts, one.counts) and one.counts.sum() > 0
    torch.testing.assert_close(two.vectors, one.vectors, rtol=1e-5, atol=1e-6)

@pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')
def test_torchrun_prototypes_more_processes_than_files(tmp_path):
    "3 processes, 2 training images: the third process has no files and still joins the sums."
    from brefine.cli import prototypes, train
    d = make_synthetic_folder(tmp_path/'data', n_train=2, n_valid=2, seed=2, size=(48, 64))
    (d/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    ck = train(d, out=tmp_path/'emb.pt', backbone='mobilenet_v2', emb_dim=8, epochs=1, bs=2)
    torchrun('prototypes', ck, d, '--out', tmp_path/'p3.pt', '--bs', 1, nproc=3)
    prototypes(ck, d, out=tmp_path/'p1.pt', bs=1)
    one, three = Prototypes.load(tmp_path/'p1.pt'), Prototypes.load(tmp_path/'p3.pt')
    assert torch.equal(three.counts, one.counts) and one.counts.sum() > 0
    torch.testing.assert_close(three.vectors, one.vectors, rtol=1e-5, atol=1e-6)

@pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')
def test_torchrun_stop_and_resume_matches_uninterrupted(data, tmp_path):
    "Two processes stop after epoch 1 and resume: each continues from its own random states, as if never stopped."
    pytest.importorskip('accelerate')
    args = ['--backbone', 'mobilenet_v2', '--emb_dim', 8, '--epochs', 2, '--bs', 2, '--lr', 3e-3, '--seed', 7]
    torchrun('train', data, '--out', tmp_path/'straight.pt', *args)
    torchrun('train', data, '--out', tmp_path/'stopped.pt', *args, '--stop_after', 1)
    ck = load_checkpoint(tmp_path/'stopped.pt')
    assert ck['epoch'] == 1 and len(ck['rng_ranks']) == 2
    assert not torch.equal(ck['rng_ranks'][0]['torch'], ck['rng_ranks'][1]['torch'])   # the processes' streams part ways
    atomic_save({k: v for k, v in ck.items() if k != 'rng_ranks'}, tmp_path/'first_only.pt')   # as before rng_ranks
    r = torchrun('train', data, '--out', tmp_path/'stopped.pt', *args, '--resume')
    assert 'resuming from epoch 1 of 2' in r.stdout and 'training process(es)' not in r.stderr
    straight, resumed = (load_checkpoint(tmp_path/f)['state_dict'] for f in ('straight.pt', 'stopped.pt'))
    for k in straight: torch.testing.assert_close(resumed[k].float(), straight[k].float(), rtol=0, atol=1e-5, msg=f'{k} differs')
    # the control: both processes resumed from the first one's states end elsewhere, so the check above can fail
    r = torchrun('train', data, '--out', tmp_path/'first_only.pt', *args, '--resume')
    assert 'written by 1 training process(es) and this run has 2' in r.stderr
    other = load_checkpoint(tmp_path/'first_only.pt')['state_dict']
    assert max((other[k].float() - straight[k].float()).abs().max().item() for k in straight) > 1e-3

@pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')
def test_torchrun_on_learner_features(data, tmp_path):
    "`train --learner` in 2 processes: each loads the model, trains the head on its features, one checkpoint; `prototypes --learner` in 2 processes equals one."
    pytest.importorskip('accelerate')
    from fastai.data.core import Datasets
    from fastai.learner import Learner
    from brefine.cli import prototypes
    from brefine.backbones import DeepLabV3MobileNetV2
    torch.manual_seed(0)
    ds = Datasets([0, 1], tfms=[[lambda o: torch.zeros(3, 8, 8)], [lambda o: torch.zeros(8, 8, dtype=torch.long)]], splits=[[0], [1]])
    Learner(ds.dataloaders(bs=1), DeepLabV3MobileNetV2(len(SYNTH_CODES), pretrained=False), loss_func=nn.CrossEntropyLoss()).export(tmp_path/'seg.pkl')
    out = tmp_path/'run'; out.mkdir()
    r = torchrun('train', data, '--out', out/'emb.pt', '--learner', tmp_path/'seg.pkl', '--train_blocks', 0, '--emb_dim', 8, '--epochs', 1, '--bs', 2)
    assert 'data-parallel training in 2 processes (MULTI_CPU)' in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ['emb.pt'] and load_checkpoint(out/'emb.pt')['kind'] == 'shared'
    torchrun('prototypes', out/'emb.pt', data, '--out', tmp_path/'p2.pt', '--bs', 2, '--learner', tmp_path/'seg.pkl')
    prototypes(out/'emb.pt', data, out=tmp_path/'p1.pt', bs=2, learner=tmp_path/'seg.pkl')
    one, two = Prototypes.load(tmp_path/'p1.pt'), Prototypes.load(tmp_path/'p2.pt')
    assert torch.equal(two.counts, one.counts) and one.counts.sum() > 0
    torch.testing.assert_close(two.vectors, one.vectors, rtol=1e-5, atol=1e-6)
