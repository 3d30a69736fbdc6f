"""Does this version of brefine give the same answers as another one, on the models a benchmark cached?

For refactoring: the code of the working tree and the code of git revision `--against` each load the cached base model,
embedder and prototypes of `bench/benchmark.py DATASET`, refine every `--every`-th validation image with four
settings, and two with the grey-level weighted vote where both versions have it (and once with the base model itself
as `probs`, for the first three images), and calibrate over a 33-setting grid (49 with the weighted vote). The two sets
of label maps and calibration tables are compared: identical, or how many pixels and rows differ. The other version runs from a temporary `git worktree` of the revision, removed afterwards.

Usage (from the repository root):

    .venv/bin/python bench/same_output.py camvid --against 377412d --record camvid_same_output
"""
from __future__ import annotations
import argparse, inspect, json, os, subprocess, sys, tempfile
from pathlib import Path

import benchmark as B
from record import RESULTS, printout

SETTINGS = [dict(top_n=3, radius=18, tau=None, alpha=0.1, vote=5), dict(top_n=2, radius=10, tau=0.9, alpha=0., vote=9),
            dict(top_n=3, radius=4, tau=0.7, alpha=0.3, vote=0), dict(top_n=2, radius=14, tau=None, alpha=0., vote=11)]
GREY_SETTINGS = [dict(top_n=3, radius=18, tau=None, alpha=0.1, vote=11, grey=10.), dict(top_n=2, radius=10, tau=0.9, alpha=0.3, vote=9, grey=10.)]
GRID = dict(radii=(4, 18), top_ns=(2, 3), taus=(None, 0.9), alphas=(0., 0.1), votes=(0, 9))

def answers(dataset: str, cache: Path, every: int, out: Path, quick: bool = False):
    "Write the label maps (`out`.npz) and the calibration table (`out`.json) of the brefine that Python imports."
    import numpy as np, torch
    from brefine import load_embedder, Prototypes, refine_predict, calibrate     # public names: every version has them
    torch.set_num_threads(1)
    ds = B.load_dataset(dataset, quick=quick)
    f = B.cache_files(cache, ds, quick=quick)
    base = B.load_base(f['base'], ds.n_classes)
    shared = dict(base=base) if 'base' in inspect.signature(load_embedder).parameters else {}   # an embedder that reads the base's features
    emb, protos = load_embedder(f['embedder'], **shared).eval(), Prototypes.load(f['prototypes'])
    imgs, gts = zip(*[ds.read(fn) for fn in ds.files('val')[::every]])
    probs = [B.base_probs_of(base, im) for im in imgs]
    flat = lambda maps: np.concatenate([np.asarray(m).ravel() for m in maps])      # images of several sizes
    maps = {f'setting {i}': flat(refine_predict(im, p.numpy(), emb, protos, **s) for im, p in zip(imgs, probs)) for i, s in enumerate(SETTINGS)}
    maps['base model as probs'] = flat(refine_predict(im, base, emb, protos, **SETTINGS[0]) for im in imgs[:3])
    has_greys = 'greys' in inspect.signature(calibrate).parameters
    grey = has_greys and os.environ.get('SAME_OUTPUT_GREY') == '1'      # the weighted vote, where both versions have it
    for i, s in enumerate(GREY_SETTINGS if grey else []):
        maps[f'grey setting {i}'] = flat(refine_predict(im, p.numpy(), emb, protos, **s) for im, p in zip(imgs, probs))
    greys = dict(greys=(None, 10.) if grey else (None,)) if has_greys else {}
    every = dict(search='exhaustive') if 'search' in inspect.signature(calibrate).parameters else {}   # every row on every image
    cal = calibrate(emb, protos, list(imgs), probs, list(gts), ignore_index=ds.void, progress=False, **GRID, **greys, **every)
    np.savez_compressed(f'{out}.npz', **maps)
    Path(f'{out}.json').write_text(json.dumps([[r['boundary_f1'], r['miou']] for r in cal['table']]))

def compare(a: Path, b: Path, rev: str) -> bool:
    import numpy as np
    A, Bm = np.load(f'{a}.npz'), np.load(f'{b}.npz')
    same = True
    for k in A.files:
        n = int((A[k] != Bm[k]).sum()) if A[k].shape == Bm[k].shape else -1
        same &= n == 0
        print(f'  {k:20s} {A[k].size:>10} pixels: ' + ('identical' if n == 0 else 'different shapes' if n < 0 else f'{n} differ'))
    ta, tb = json.loads(Path(f'{a}.json').read_text()), json.loads(Path(f'{b}.json').read_text())
    print(f'  calibration table    {len(ta):>10} rows:   ' + ('identical' if ta == tb else f'{sum(x != y for x, y in zip(ta, tb))} differ'))
    same &= ta == tb
    print(f'the working tree and {rev} give {"the same" if same else "DIFFERENT"} answers')
    return same

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('dataset', choices=sorted(B.DATA_DIRS))
    p.add_argument('--against', required=True, help='the git revision to compare with')
    p.add_argument('--cache', type=Path, default=None, help='the cached models (default: bench/out/<dataset>_cache)')
    p.add_argument('--every', type=int, default=4, help='every N-th validation image')
    p.add_argument('--quick', action='store_true', help="the models of `bench/benchmark.py DATASET --quick` (a smoke run's cache)")
    p.add_argument('--record', metavar='NAME', default=None, help='also write the printout to bench/results/<dataset>/NAME.txt')
    p.add_argument('--answers', type=Path, default=None, help=argparse.SUPPRESS)   # internal: write this version's answers there
    a = p.parse_args(argv)
    cache = (a.cache or B.REPO/f'bench/out/{a.dataset}_cache').resolve()
    if a.answers: return answers(a.dataset, cache, a.every, a.answers, a.quick)
    with tempfile.TemporaryDirectory() as d, printout('bench/same_output.py', sys.argv[1:] if argv is None else argv,
                                                     RESULTS/a.dataset/f'{a.record}.txt' if a.record else None):
        d, env = Path(d), {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
        env['BREFINE_DATA'] = str(B.DATA)                                   # the same data for both
        subprocess.run(['git', 'worktree', 'add', '--detach', str(d/'other'), a.against], cwd=B.REPO, check=True, capture_output=True)
        try:
            have = lambda root: subprocess.run([sys.executable, '-c', 'import brefine; brefine.grey_levels'], cwd=root,
                                               env=dict(env, PYTHONPATH=str(root)), capture_output=True).returncode == 0
            env['SAME_OUTPUT_GREY'] = '1' if have(B.REPO) and have(d/'other') else '0'   # the weighted vote where both have it
            me = Path(__file__).resolve()
            (d/'other/bench'/me.name).write_text(me.read_text())          # run there with that version's bench/ and brefine/
            for name, root in (('this', B.REPO), ('other', d/'other')):
                subprocess.run([sys.executable, str(root/'bench'/me.name), a.dataset, '--against', a.against, '--cache', str(cache),
                                '--every', str(a.every), '--answers', str(d/name)] + ['--quick'] * a.quick, cwd=root, env=dict(env, PYTHONPATH=str(root)), check=True)
        finally: subprocess.run(['git', 'worktree', 'remove', '--force', str(d/'other')], cwd=B.REPO, capture_output=True)
        print(f'{B.load_dataset(a.dataset)}; every {a.every}th val image; models in {cache}')
        if not compare(d/'this', d/'other', a.against): sys.exit(1)

if __name__ == '__main__': main()
