"""Untrusted files never run code; saves are atomic even when the writer is killed mid-save."""
import os, json, signal, subprocess, sys, time, textwrap
import pytest, torch
from brefine import Prototypes, Refiner, EmbeddingNet
from brefine.checkpoints import load_checkpoint

class Evil:
    def __init__(self, marker): self.marker = marker
    def __reduce__(self): return (os.system, (f'touch {self.marker}',))

@pytest.mark.parametrize('kind', ['prototypes', 'checkpoint', 'refiner', 'refiner_prototypes'])
def test_malicious_pickle_is_refused(tmp_path, kind):
    marker = tmp_path/'pwned'
    payload = {'format': 'brefine.prototypes', 'version': 1, 'vectors': Evil(marker)}
    if kind == 'prototypes':
        f = tmp_path/'p.pt'; torch.save(payload, f); load = lambda: Prototypes.load(f)
    elif kind == 'checkpoint':
        f = tmp_path/'c.pt'; torch.save(dict(payload, format='brefine.embedder'), f); load = lambda: load_checkpoint(f)
    else:
        net = EmbeddingNet('resnet18', emb_dim=4, pretrained=False)
        d = Refiner(net, Prototypes(torch.zeros(3, 4), torch.ones(3))).save(tmp_path/'bundle')
        files = json.loads((d/'refiner.json').read_text())['files']      # the data files refiner.json names
        if kind == 'refiner': torch.save(dict(payload, format='brefine.refiner'), d/files['embedder'])
        else: torch.save(payload, d/files['prototypes'])
        load = lambda: Refiner.load(d)
    with pytest.raises(ValueError, match='nothing in it was executed'): load()
    assert not marker.exists()

WRITER = textwrap.dedent('''
    import sys, torch
    from brefine import Prototypes
    path, i = sys.argv[1], 0
    while True:
        i += 1
        Prototypes(torch.full((400, 512), float(i)), torch.ones(400, dtype=torch.long)).save(path)
''')

def test_killed_mid_save_leaves_a_valid_file(tmp_path):
    f = tmp_path/'protos.pt'
    Prototypes(torch.zeros(400, 512), torch.ones(400, dtype=torch.long)).save(f)
    for k in range(4):
        p = subprocess.Popen([sys.executable, '-c', WRITER, str(f)])
        time.sleep(4 + 0.37 * k)                      # imports take a few seconds; then it saves in a loop
        p.send_signal(signal.SIGKILL); p.wait()
        pr = Prototypes.load(f)                       # never half-written: old or new, always loadable
        assert pr.vectors.shape == (400, 512) and torch.all(pr.vectors == pr.vectors[0, 0])
    leftovers = [x for x in os.listdir(tmp_path) if x != 'protos.pt']
    assert all(x.endswith('.tmp') for x in leftovers)   # a killed writer may leave a temp file, never a broken target
