"""`brefine refine` under torchrun (2 CPU processes, gloo): the label PNGs are byte for byte a single process's, and a refusal
by any process leaves every output untouched."""
import os, socket, subprocess, sys, warnings
from pathlib import Path
import numpy as np
import pytest, torch
import torch.distributed as dist
import torch.multiprocessing as mp
from PIL import Image

BREFINE = Path(sys.executable).parent/'brefine'
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg')
needs = pytest.mark.skipif(not dist.is_available() or not BREFINE.exists(), reason='needs torch.distributed and the brefine script')

def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

def brefine(*args, nproc=1, retries=1):
    "`brefine ARGS` in a subprocess, alone (`nproc` 1) or under torchrun with `nproc` processes: the CompletedProcess."
    launch = [] if nproc == 1 else [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', str(nproc),
                                    '--master_port', str(_free_port()), '--no-python']
    r = subprocess.run(launch + [str(BREFINE)] + [str(a) for a in args], capture_output=True, text=True, env=ENV, timeout=600)
    if r.returncode != 0 and 'Signal 6 (SIGABRT)' in r.stderr and retries:   # as in test_distributed.py: a bare abort, once more
        warnings.warn(f"torchrun worker aborted (SIGABRT) without an error message; running once more: {' '.join(map(str, args))}")
        return brefine(*args, nproc=nproc, retries=retries - 1)
    return r

@pytest.fixture(scope='module')
def small(tmp_path_factory):
    "A 4-class bundle of an untrained embedder and 5 images (one of another size) with saved scores: no training."
    from brefine.refiner import Refiner
    from brefine.embedder import EmbeddingNet
    from brefine.prototypes import Prototypes
    d = tmp_path_factory.mktemp('ddp_refine')
    torch.manual_seed(0)
    net = EmbeddingNet('mobilenet_v2', emb_dim=8, pretrained=False).eval()
    Refiner(net, Prototypes(torch.randn(4, 8), torch.full((4,), 9), train_radius=2), top_n=3, vote=5).save(d/'bundle')
    (d/'img').mkdir(); (d/'sc').mkdir()
    rng = np.random.default_rng(0)
    for n, (h, w) in zip('abcde', [(32, 40)] * 3 + [(24, 40), (32, 40)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype(np.uint8)).save(d/'img'/f'{n}.png')
        np.save(d/'sc'/f'{n}.npy', rng.random((4, h, w), dtype=np.float32))
    return d

def _files(folder): return {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in sorted(Path(folder).iterdir())}

@needs
def test_two_processes_write_what_one_does(small, tmp_path):
    "2 processes, batches of 2 over 5 images: byte-identical PNGs, one report line; an existing output refused by both, nothing written."
    args = ['refine', small/'img', small/'sc', None, '--bundle', small/'bundle', '--bs', 2]
    one = brefine(*[tmp_path/'one' if a is None else a for a in args])
    assert one.returncode == 0, one.stderr[-3000:]
    two = brefine(*[tmp_path/'two' if a is None else a for a in args], nproc=2)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = _files(tmp_path/'one'), _files(tmp_path/'two')
    assert sorted(a) == [f'{n}.png' for n in 'abcde'] and {k: v[0] for k, v in a.items()} == {k: v[0] for k, v in b.items()}
    assert two.stdout.count('wrote ') == 1 and f"wrote 5 refined label maps to {tmp_path/'two'} in 2 processes" in two.stdout
    # again without --force: every process sees the outputs before any writes, all refuse, the first says so once
    again = brefine(*[tmp_path/'two' if a is None else a for a in args], nproc=2)
    assert again.returncode != 0 and again.stderr.count('brefine refine: error: 5 outputs exist') == 1, again.stderr[-3000:]
    assert _files(tmp_path/'two') == b
    # --skip_existing after two outputs are lost, alone and in 2 processes (one image each with --bs 1): the rest kept, the same bytes
    for d in ('one', 'two'):
        for n in 'bd': (tmp_path/d/f'{n}.png').unlink()
    skip = lambda d, **kw: brefine(*[tmp_path/d if a is None else a for a in args], '--skip_existing', '--bs', 1, **kw)
    assert skip('one').returncode == 0
    kept = skip('two', nproc=2)
    assert kept.returncode == 0 and 'wrote 2 refined label maps' in kept.stdout and '(3 existing kept)' in kept.stdout, kept.stderr[-3000:]
    c = _files(tmp_path/'two')
    assert {k: v[0] for k, v in c.items()} == {k: v[0] for k, v in _files(tmp_path/'one').items()}
    assert all(c[k] == b[k] for k in ('a.png', 'c.png', 'e.png'))

def _worker(rank, world, port, argvs, logs):
    "Process `rank` of a launch of `main(argvs[rank])`, as torchrun would start it; its exit code and stderr go to `logs`."
    import contextlib, io
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    from brefine.cli import main
    with contextlib.redirect_stderr(err := io.StringIO()), contextlib.redirect_stdout(io.StringIO()): rc = main(argvs[rank])
    Path(logs, f'{rank}.txt').write_text(f'{rc}\n{err.getvalue()}')

@needs
def test_one_process_refusing_stops_all(small, tmp_path):
    "Process 1 misses its score files (as on a machine without them): process 0, whose checks pass, writes nothing either."
    out = tmp_path/'out'
    good = ['refine', str(small/'img'), str(small/'sc'), str(out), '--bundle', str(small/'bundle')]
    bad = good[:2] + [str(tmp_path/'no_scores')] + good[3:]
    mp.spawn(_worker, args=(2, _free_port(), [good, bad], str(tmp_path)), nprocs=2, join=True)
    (rc0, *err0), (rc1, *err1) = ((t.splitlines() or ['']) for t in (Path(tmp_path, f'{r}.txt').read_text() for r in (0, 1)))
    assert (rc0, rc1) == ('2', '2')
    assert err0 == [f"brefine refine: error (process 1 of 2): Scores not found: {tmp_path/'no_scores'}"], err0
    assert err1 == []                                                   # said once, by process 0
    assert not out.exists()
