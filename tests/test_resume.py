"""Interrupted training resumes: `brefine train --resume` continues the same run (weights, optimiser, schedule, random states)."""
import os, signal, subprocess, sys, time
import pytest, torch
from brefine.checkpoints import load_checkpoint
from brefine.core import atomic_save
from brefine.data import make_synthetic_folder, SYNTH_CODES

BREFINE = [sys.executable, '-c', 'import sys; from brefine.cli import main; sys.exit(main())']
# Training runs on the CPU, where it is deterministic, so a resumed run must end where the uninterrupted one does.
# On a GPU some training kernels (bilinear upsampling's backward, among others) are not deterministic, and two identical
# 3-epoch runs end far apart, so exactness cannot be checked there; tests/test_cuda.py resumes a GPU run.
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', CUDA_VISIBLE_DEVICES='')
EPOCHS = 3
ARGS = ['--backbone', 'mobilenet_v2', '--emb_dim', 8, '--epochs', EPOCHS, '--bs', 2, '--lr', 3e-3, '--seed', 7]

def train(data, out, *extra, ok=True):
    r = subprocess.run(BREFINE + ['train', str(data), '--out', str(out)] + [str(a) for a in ARGS + list(extra)],
                       capture_output=True, text=True, env=ENV, timeout=600)
    if ok: assert r.returncode == 0, r.stderr[-3000:]
    return r

def weights(ck): return load_checkpoint(ck)['state_dict']

def assert_same(a, b, atol=1e-5):
    for k in a: torch.testing.assert_close(b[k].float(), a[k].float(), rtol=0, atol=atol, msg=f'{k} differs')

def max_diff(a, b): return max((a[k].float() - b[k].float()).abs().max().item() for k in a)

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "A synthetic data folder and the checkpoint of an uninterrupted 3-epoch run."
    d = tmp_path_factory.mktemp('resume')
    data = make_synthetic_folder(d/'data', n_train=6, n_valid=2, seed=3, size=(48, 64))
    (data/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    train(data, d/'straight.pt')
    assert load_checkpoint(d/'straight.pt')['epoch'] == EPOCHS
    return d, data, weights(d/'straight.pt')

def test_stop_and_resume_matches_uninterrupted(run):
    d, data, straight = run
    r = train(data, d/'stopped.pt', '--stop_after', 1)
    assert load_checkpoint(d/'stopped.pt')['epoch'] == 1 and '--resume' in r.stdout
    r = train(data, d/'stopped.pt', '--resume')
    assert 'resuming from epoch 1 of 3' in r.stdout
    assert load_checkpoint(d/'stopped.pt')['epoch'] == EPOCHS
    assert_same(straight, weights(d/'stopped.pt'))

def test_sigkill_then_resume_matches_uninterrupted(run):
    "Kill the process (no clean-up at all) once the first epoch's checkpoint exists, then resume."
    d, data, straight = run
    out = d/'killed.pt'
    p = subprocess.Popen(BREFINE + ['train', str(data), '--out', str(out)] + [str(a) for a in ARGS],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    t0 = time.time()
    while not out.exists() and p.poll() is None and time.time() - t0 < 300: time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    ck = load_checkpoint(out)                       # whatever epoch it reached, the file is whole
    assert 1 <= ck['epoch'] <= EPOCHS
    train(data, out, '--resume')
    assert_same(straight, weights(out))

def test_random_states_are_what_makes_resume_exact(run):
    "Resuming the same checkpoint without its random states ends elsewhere: the check above can fail."
    d, data, straight = run
    train(data, d/'norng.pt', '--stop_after', 1)
    ck = load_checkpoint(d/'norng.pt'); del ck['rng']
    atomic_save(ck, d/'norng.pt')
    train(data, d/'norng.pt', '--resume')
    assert max_diff(straight, weights(d/'norng.pt')) > 1e-3

def test_resume_refusals(run, tmp_path):
    d, data, _ = run
    r = train(data, tmp_path/'none.pt', '--resume', ok=False)
    assert r.returncode == 2 and 'Nothing to resume' in r.stderr
    r = train(data, d/'straight.pt', '--resume')
    assert 'nothing to do' in r.stdout
    r = train(data, tmp_path/'x.pt', '--stop_after', 0, ok=False)
    assert r.returncode == 2 and 'stop_after' in r.stderr
