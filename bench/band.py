"""Benchmark for brefine.band (printed ratios, nothing asserted).

Time of the band (radius 3) of one 1024x2048 label map, by the Canny path (`near_boundary_mask`, OpenCV on the CPU) and
by the torch path (`batch_band`), against one forward pass of torchvision's MobileNetV2 feature extractor
(`mobilenet_v2(weights=None).features`) on a 1x3x1024x2048 image: the cheapest backbone brefine offers, so the ratio
says how much the band adds to an inference. All measured in the same run, interleaved, medians of `--rounds`.
Label maps: a synthetic scene (6 classes), a blocky map with 19 classes (Cityscapes' count) and one with 300 classes.

`--record` also writes the printout to bench/results/band.txt and records it in bench/results/manifest.json.

usage: .venv/bin/python bench/band.py [--rounds N] [--threads N] [--record]
"""
import argparse, os, platform, statistics, time
import numpy as np
import torch
import torchvision

from brefine.band import near_boundary_mask, batch_band
from brefine.data import synthetic_scene
from record import main_recorded

H, W = 1024, 2048

def blocky(n_classes, block=32, seed=0):
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, n_classes, (H // block, W // block)).astype(np.int32)
    return np.repeat(np.repeat(coarse, block, 0), block, 1)

def timed(f):
    t = time.perf_counter(); f(); return time.perf_counter() - t

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--threads', type=int, default=None, help='torch threads (default: torch default)')
    main_recorded(ap, 'band', run)

def run(a):
    if a.threads: torch.set_num_threads(a.threads)
    dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    maps = {'synthetic scene, 6 classes': synthetic_scene(0, (H, W))[1],
            'blocky, 19 classes': blocky(19), 'blocky, 300 classes': blocky(300)}
    net = torchvision.models.mobilenet_v2(weights=None).features.eval().to(dev)
    img = torch.randn(1, 3, H, W, device=dev)
    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)

    def forward():
        with torch.inference_mode(): net(img)
        sync()
    def torch_band(t):
        def f(): batch_band(t, 3, ignore_index=0); sync()
        return f

    tmaps = {k: torch.from_numpy(v).to(dev) for k, v in maps.items()}
    for k in maps: np.testing.assert_array_equal(near_boundary_mask(maps[k], 3, 0), batch_band(tmaps[k], 3, 0).cpu().numpy())
    forward(); [torch_band(t)() for t in tmaps.values()]                       # warm-up
    fwd, canny, tband = [], {k: [] for k in maps}, {k: [] for k in maps}
    for _ in range(a.rounds):                                                   # interleaved: load changes hit all alike
        fwd.append(timed(forward))
        for k, m in maps.items():
            canny[k].append(timed(lambda: near_boundary_mask(m, 3, ignore_index=0)))
            tband[k].append(timed(torch_band(tmaps[k])))
    f = statistics.median(fwd)
    print(f'brefine band benchmark: {H}x{W} label map, radius 3; device {dev.type}, torch {torch.__version__}, '
          f'{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}')
    print(f'baseline: MobileNetV2 features forward, 1x3x{H}x{W}: {f*1000:.0f} ms (median of {a.rounds})')
    print(f'{"label map":30s} {"Canny path":>14s} {"ratio":>7s} {"batch_band":>14s} {"ratio":>7s}')
    for k in maps:
        c, t = statistics.median(canny[k]), statistics.median(tband[k])
        print(f'{k:30s} {c*1000:11.0f} ms {c/f:7.2f} {t*1000:11.0f} ms {t/f:7.3f}')
    print('ratio = band time / MobileNetV2 forward time (lower is better); both paths give identical bands (checked).')

if __name__ == '__main__':
    main()
