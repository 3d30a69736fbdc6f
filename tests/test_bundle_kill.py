"""Kill `Refiner.save` at every file-system step: the bundle always loads (old or new), a user's own files survive (even
those named like a bundle's), and the next save removes what the killed one left behind."""
import os, tempfile, multiprocessing as mp
import pytest, torch
from brefine.embedder import EmbeddingNet
from brefine.prototypes import Prototypes
from brefine.refiner import Refiner

@pytest.fixture(scope='module')
def refiners():
    torch.manual_seed(0)
    net = EmbeddingNet('mobilenet_v2', emb_dim=8, pretrained=False).eval()
    protos = Prototypes(torch.randn(4, 8), torch.ones(4, dtype=torch.long), train_radius=2)
    return Refiner(net, protos, top_n=2), Refiner(net, protos, top_n=3)

def _save_and_die_at(k: int, refiner, path):
    "In a forked child: save, dying abruptly (no clean-up of any kind) at the k-th file-system step."
    calls = [0]
    def dying(f):
        def g(*a, **kw):
            calls[0] += 1
            if calls[0] == k: os._exit(17)
            return f(*a, **kw)
        return g
    os.replace, os.unlink, os.fsync, tempfile.mkstemp = (dying(f) for f in (os.replace, os.unlink, os.fsync, tempfile.mkstemp))
    refiner.save(path)
    os._exit(0)

def _kill_at(k, refiner, path) -> int:
    p = mp.get_context('fork').Process(target=_save_and_die_at, args=(k, refiner, path))
    p.start(); p.join(120)
    assert p.exitcode in (0, 17), p.exitcode
    return p.exitcode

LOOKALIKE = 'embedder-0123456789abcdef.pt'                          # a user's file named like a bundle's data file

def _names(path): return sorted(n.split('-')[0] for n in os.listdir(path))

def test_replacing_a_bundle_killed_at_each_step(refiners, tmp_path):
    old, new = refiners
    seen, k = [], 1
    while True:
        path = tmp_path/f'kill{k}'
        old.save(path); (path/'NOTES.md').write_text('mine'); (path/LOOKALIKE).write_text('mine too')
        code = _kill_at(k, new, path)
        seen.append(Refiner.load(path).top_n)                       # loadable at whatever step the save died
        assert (path/'NOTES.md').read_text() == 'mine' and (path/LOOKALIKE).read_text() == 'mine too'
        new.save(path)                                              # the next save succeeds and clears leftovers
        assert _names(path) == ['.refiner.lock', 'NOTES.md', 'embedder', 'embedder', 'prototypes', 'refiner.json']
        assert (path/LOOKALIKE).read_text() == 'mine too'           # named like a bundle's file, but not one: kept
        assert Refiner.load(path).top_n == 3
        if code == 0: break
        k += 1
    assert set(seen) == {2, 3} and seen[0] == 2 and seen[-1] == 3   # died before the switch (old) and after it (new)
    assert seen == sorted(seen)                                     # one switch: old until it, new after it
    assert k >= 8, k                                                # every step of the save was a kill point

def test_first_save_killed_at_each_step(refiners, tmp_path):
    _, new = refiners
    k = 1
    while True:
        path = tmp_path/f'new{k}'
        code = _kill_at(k, new, path)
        if (path/'refiner.json').exists(): assert Refiner.load(path).top_n == 3
        else:
            with pytest.raises((FileNotFoundError, ValueError)): Refiner.load(path)
        new.save(path)                                              # leftovers of the killed save are not "foreign" files
        assert _names(path) == ['.refiner.lock', 'embedder', 'prototypes', 'refiner.json']
        if code == 0: break
        k += 1
    assert k >= 6, k
