"""Speed of brefine.metrics on CamVid-sized data: 233 label maps of 360x480, 11 classes, void 11.
Prints each metric's time and its ratio to a bare np.bincount confusion matrix over the same data, measured in the
same run (so the ratios do not depend on the machine). Uses the CamVid test labels when present (under $BREFINE_DATA,
by default ../shared/data), else synthetic maps.
`--record` also writes the printout to bench/results/metrics.txt and records it in bench/results/manifest.json.
usage: .venv/bin/python bench/metrics.py [--record]"""
import argparse, os, time
from pathlib import Path
import numpy as np, cv2
from brefine.metrics import mean_iou, boundary_iou, boundary_f1, trimap_iou
from brefine.evaluation import evaluate
from record import main_recorded

def synthetic(n=233, size=(360, 480), seed=0):
    rng = np.random.default_rng(seed)
    out = np.zeros((n,) + size, np.uint8)
    for g in out:
        g[:] = rng.integers(0, 11)
        for _ in range(12):
            x, y = int(rng.integers(0, size[1])), int(rng.integers(0, size[0]))
            cv2.circle(g, (x, y), int(rng.integers(5, 80)), int(rng.integers(0, 12)), -1)
    return out

def low_res(g, f):
    h, w = g.shape
    return cv2.resize(cv2.resize(g, (w // f, h // f), interpolation=cv2.INTER_NEAREST), (w, h), interpolation=cv2.INTER_NEAREST)

def timed(f, reps=3):
    best = float('inf')
    for _ in range(reps):
        t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t)
    return best

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    main_recorded(ap, 'metrics', lambda a: run())

def run():
    d = Path(os.environ.get('BREFINE_DATA', Path(__file__).resolve().parents[2]/'shared/data'))/'camvid/CamVid/testannot'
    gts = np.stack([cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in sorted(d.glob('*.png'))]) if d.exists() else synthetic()
    print(f"{'CamVid test labels' if d.exists() else 'synthetic maps'}: {gts.shape}")
    base = np.stack([low_res(np.where(g == 11, 0, g), 8) for g in gts])
    ref = np.stack([low_res(np.where(g == 11, 0, g), 2) for g in gts])
    def baseline():
        for p, g in zip(base, gts):
            v = g != 11
            np.bincount(11*g[v].astype(np.int64) + p[v], minlength=121)
    t0 = timed(baseline)
    print(f'baseline (bare bincount confusion matrix): {t0:.2f} s')
    for name, f in [('mean_iou', lambda: mean_iou(base, gts, 11, ignore_index=11)),
                    ('boundary_iou', lambda: boundary_iou(base, gts, 11, ignore_index=11)),
                    ('boundary_f1', lambda: boundary_f1(base, gts, 11, ignore_index=11)),
                    ('trimap_iou x6 widths', lambda: trimap_iou(base, gts, 11, (1, 2, 3, 5, 8, 12), ignore_index=11)),
                    ('evaluate base+refined', lambda: evaluate(gts, base, ref, n_classes=11, ignore_index=11, plot=False))]:
        t = timed(f, 1 if name.startswith('evaluate') else 3)
        print(f'{name:>24}: {t:.2f} s  ({t / t0:.1f}x baseline)')

if __name__ == '__main__':
    main()
