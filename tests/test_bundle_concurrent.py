"""Several processes save into one bundle folder at the same moment, while others load it: the folder ends as one complete
bundle (one of the saved ones, with no stray data files), every load in between gets a complete bundle, and a user's
file in the folder survives."""
import os, multiprocessing as mp
import torch
from brefine.embedder import EmbeddingNet
from brefine.prototypes import Prototypes
from brefine.refiner import Refiner

N_SAVERS, ROUNDS = 4, 3

def _save(path, ref, start, q):
    "In a forked child: wait for the others, then save the bundle `ref` ROUNDS times; report failures on `q`."
    try:
        start.wait(120)
        for _ in range(ROUNDS): ref.save(path)
        q.put(None)
    except BaseException as e: q.put(f'save top_n={ref.top_n}: {type(e).__name__}: {e}')

def _load(path, start, q):
    "In a forked child: load the bundle over and over while the others save; every load must give a complete bundle."
    try:
        start.wait(120)
        for _ in range(4 * ROUNDS):
            r = Refiner.load(path)
            assert r.top_n in range(2, 2 + N_SAVERS) and r.prototypes.n_classes == 6
        q.put(None)
    except BaseException as e: q.put(f'load: {type(e).__name__}: {e}')

def test_simultaneous_saves_leave_one_complete_bundle(tmp_path):
    path, net = tmp_path/'bundle', EmbeddingNet('mobilenet_v2', emb_dim=8, pretrained=False).eval()
    refs = [Refiner(net, Prototypes(torch.randn(6, 8), torch.ones(6, dtype=torch.long), train_radius=2), top_n=2 + i)
            for i in range(N_SAVERS)]
    refs[0].save(path)
    (path/'NOTES.md').write_text('mine')
    ctx = mp.get_context('spawn')                                    # fresh processes: torch's thread pools do not survive a fork
    start, q = ctx.Barrier(N_SAVERS + 2), ctx.Queue()
    procs = [ctx.Process(target=_save, args=(path, r, start, q)) for r in refs]
    procs += [ctx.Process(target=_load, args=(path, start, q)) for _ in range(2)]
    for p in procs: p.start()
    try: errors = [q.get(timeout=300) for _ in procs]
    finally:
        for p in procs: p.join(30); p.kill()
    assert [e for e in errors if e] == []
    assert [p.exitcode for p in procs] == [0] * len(procs)
    names = sorted(os.listdir(path))
    assert [n.split('-')[0] for n in names] == ['.refiner.lock', 'NOTES.md', 'embedder', 'prototypes', 'refiner.json'], names
    assert (path/'NOTES.md').read_text() == 'mine'
    assert Refiner.load(path).top_n in range(2, 2 + N_SAVERS)
    assert (path/'.refiner.lock').read_text() == ''                  # every save finished: nothing left to claim
