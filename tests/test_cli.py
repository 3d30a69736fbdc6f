"""The `brefine` command end to end, through real subprocesses, on a tiny synthetic data set."""
import os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from PIL import Image
from brefine.data import make_synthetic_folder, SYNTH_CODES

BREFINE = [sys.executable, '-c', 'import sys; from brefine.cli import main; sys.exit(main())']
ENV = dict(os.environ, OMP_NUM_THREADS='2', MPLBACKEND='Agg')

def run(*args, ok=True):
    r = subprocess.run(BREFINE + [str(a) for a in args], capture_output=True, text=True, env=ENV, timeout=600)
    if ok: assert r.returncode == 0, r.stderr[-3000:]
    return r

@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp('cli')
    data = make_synthetic_folder(d/'data', n_train=8, n_valid=4, seed=1, size=(64, 80))
    (data/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    ck = d/'emb.pt'
    run('train', data, '--out', ck, '--backbone', 'mobilenet_v2', '--emb_dim', 16, '--epochs', 1, '--bs', 4)
    return d, data, ck

def test_help_and_unknown():
    assert 'train' in run('--help').stdout
    r = run('frobnicate', ok=False)
    assert r.returncode == 2 and 'unknown command' in r.stderr

def test_chain(trained):
    d, data, ck = trained
    assert ck.exists()
    protos = d/'protos.pt'
    run('prototypes', ck, data, '--out', protos)
    # refusing to overwrite without --force
    r = run('prototypes', ck, data, '--out', protos, ok=False)
    assert r.returncode == 2 and '--force' in r.stderr
    # base scores: noisy one-hot of the truth, saved as .npy next to each image name
    scores = d/'scores'; scores.mkdir()
    rng = np.random.default_rng(0)
    for f in sorted((data/'val').iterdir()):
        gt = np.asarray(Image.open(data/'valannot'/f.name)).astype(np.int64)
        p = np.eye(len(SYNTH_CODES))[gt].transpose(2, 0, 1) + rng.random((len(SYNTH_CODES),) + gt.shape)
        np.save(scores/(f.stem + '.npy'), (p / p.sum(0)).astype(np.float32))
    out = d/'refined'
    run('refine', data/'val', scores, out, '--checkpoint', ck, '--protos', protos, '--top_n', 3)
    outs = sorted(out.iterdir())
    assert [o.name for o in outs] == sorted(f.name for f in (data/'val').iterdir())
    lab = np.asarray(Image.open(outs[0]))
    assert lab.shape == (64, 80) and lab.max() < len(SYNTH_CODES)
    # the same folder through a DataLoader with 2 worker processes and batches of 3: the same maps (up to float near-ties)
    out2 = d/'refined_batched'
    run('refine', data/'val', scores, out2, '--checkpoint', ck, '--protos', protos, '--top_n', 3, '--bs', 3, '--workers', 2)
    a = np.stack([np.asarray(Image.open(o)) for o in outs])
    b = np.stack([np.asarray(Image.open(o)) for o in sorted(out2.iterdir())])
    assert a.shape == b.shape and (a != b).mean() <= 1e-3
    r = run('refine', data/'val', scores, out2, '--checkpoint', ck, '--protos', protos, ok=False)
    assert r.returncode == 2 and '--skip_existing' in r.stderr
    r = run('evaluate', out, data/'valannot', '--n_classes', len(SYNTH_CODES))
    assert 'boundary' in r.stdout.lower()

def test_clear_errors(tmp_path, trained):
    d, data, ck = trained
    r = run('train', tmp_path/'nope', ok=False)
    assert r.returncode == 2 and 'not found' in r.stderr and 'Traceback' not in r.stderr
    bad = tmp_path/'bad.pt'; bad.write_bytes(b'not a checkpoint')
    r = run('prototypes', bad, data, '--out', tmp_path/'p.pt', ok=False)
    assert r.returncode == 2 and 'corrupt' in r.stderr
    r = run('train', data, '--out', ck, ok=False)
    assert r.returncode == 2 and '--force' in r.stderr

def test_train_init_from(tmp_path, trained):
    "`--init_from` starts the backbone from a weights file (here fastai's learn.save layout, {'model': state dict})."
    import torch, torchvision
    d, data, _ = trained
    src = torchvision.models.resnet18(weights=None).state_dict()
    torch.save({'model': {'backbone.' + k: v for k, v in src.items()}}, tmp_path/'base.pth')
    ck = tmp_path/'emb.pt'
    run('train', data, '--out', ck, '--backbone', 'resnet18', '--emb_dim', 8, '--epochs', 1, '--bs', 4, '--lr', 0,
        '--init_from', tmp_path/'base.pth')
    got = torch.load(ck, weights_only=True)['state_dict']
    assert torch.equal(got['backbone.conv1.weight'], src['conv1.weight'])          # lr 0: the copied weights, untouched
    assert torch.equal(got['backbone.layer4.1.conv2.weight'], src['layer4.1.conv2.weight'])
    torch.save(torchvision.models.mobilenet_v2(weights=None).state_dict(), tmp_path/'other.pth')
    r = run('train', data, '--out', tmp_path/'e2.pt', '--backbone', 'resnet18', '--init_from', tmp_path/'other.pth', ok=False)
    assert r.returncode == 2 and 'same architecture' in r.stderr
