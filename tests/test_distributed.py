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

def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world)
    imgs, masks = _data()
    shard = [(imgs[i:i+2], masks[i:i+2]) for i in range(rank * 2, 8, world * 2)]   # each process sees its own batches
    pr = extract_prototypes(_embedder(), shard, 4, radius=2, progress=False)
    if rank == 0: torch.save({'vectors': pr.vectors, 'counts': pr.counts}, out)
    dist.destroy_process_group()

def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available in this build')
def test_two_process_prototypes_equal_one_process(tmp_path):
    out = tmp_path/'p.pt'
    mp.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    two = torch.load(out, weights_only=True)
    imgs, masks = _data()
    one = extract_prototypes(_embedder(), [(imgs[i:i+2], masks[i:i+2]) for i in range(0, 8, 2)], 4, radius=2, progress=False)
    assert torch.equal(two['counts'], one.counts)
    torch.testing.assert_close(two['vectors'], one.vectors, rtol=1e-5, atol=1e-6)
