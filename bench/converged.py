"""The converged-base table: brefine on a converged base model, against that base trained longer with brefine's compute.

Reads three records and writes `bench/results/<dataset>_converged.json`:
- the learning curve of `bench/converge.py` (`bench/results/<dataset>_base_curve.json`): the stop rule, the epoch it fired
  after, the best epoch, and the validation mIoU of every epoch;
- a `bench/benchmark.py --ablation --base <converged weights>` run's JSON: the base, DenseCRF, the vote alone, the
  prototypes alone, brefine and the oracle, each on the test split with settings chosen on val;
- a `bench/benchmark.py --ablation --base <equal-compute weights>` run's JSON: the base trained for its own budget plus the
  embedder's (`bench/converge.py --extra N`), and brefine on it; or a `--base-only` run's, which scores that base alone
  (then `equal_compute_brefine` is null and `not_measured` names it).

Every row holds `miou`, `boundary_iou`, `boundary_f1`, `trimap_iou` and `seconds_per_image` (None for the oracle, which
reads the ground truth).

    .venv/bin/python bench/converged.py camvid --run bench/results/camvid/camvid_converged_run.json \\
        --equal bench/results/camvid/camvid_equal_compute_run.json
"""
from __future__ import annotations
import argparse, json, sys
from pathlib import Path
from record import RESULTS, provenance, record

ROWS = ('base', 'densecrf', 'vote_only', 'prototypes_only', 'brefine', 'oracle')
METRICS = ('miou', 'boundary_iou', 'boundary_f1', 'trimap_iou', 'seconds_per_image')

def table(curve: dict, run: dict, equal: dict) -> dict:
    "The converged-base record from the learning `curve` and the two benchmark runs' JSON."
    missing = [k for k in ROWS if k not in run] + (['equal-compute base'] if 'base' not in equal else [])
    if missing: raise ValueError(f'the runs lack {missing}: run bench/benchmark.py with --ablation and --base')
    row = lambda r: {k: r[k] for k in METRICS}
    return dict(dataset=run['dataset'], **{k: row(run[k]) for k in ROWS}, equal_compute_base=row(equal['base']),
                equal_compute_brefine=row(equal['brefine']) if 'brefine' in equal else None,
                not_measured=[] if 'brefine' in equal else ['equal_compute_brefine'],
                settings=dict(brefine=run['settings'], ablation=run.get('ablation_settings'),
                              equal_compute_brefine=equal.get('settings')),
                training=dict(base_epochs=curve['kept'].get('best', curve['best_epoch']),   # the converged weights' epoch
                              stopped_after=curve['stopped_at'], stop_rule=curve['stop_rule'],
                              equal_compute_epochs=curve['epoch'], embedder_epochs=run['training']['embedder_epochs'],
                              base_weights=run.get('base_weights'), equal_compute_weights=equal.get('base_weights'),
                              val_miou_curve=[c['val_miou'] for c in curve['curve']]),
                runs=dict(converged=run['command'], equal_compute=equal['command'], curve=curve['command']))

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('dataset')
    p.add_argument('--run', type=Path, required=True, help='the benchmark JSON on the converged base (--ablation)')
    p.add_argument('--equal', type=Path, required=True, help='the benchmark JSON on the equal-compute base (--ablation)')
    p.add_argument('--curve', type=Path, default=None, help="bench/converge.py's curve (default: bench/results/<dataset>_base_curve.json)")
    p.add_argument('--out', type=Path, default=None, help='default: bench/results/<dataset>_converged.json')
    a = p.parse_args(argv)
    read = lambda f: json.loads(Path(f).read_text())
    res = dict(table(read(a.curve or RESULTS/f'{a.dataset}_base_curve.json'), read(a.run), read(a.equal)), **provenance('bench/converged.py', argv))
    out = a.out or RESULTS/f'{a.dataset}_converged.json'
    from brefine.core import atomic_write
    with atomic_write(out, 'w') as fh: fh.write(json.dumps(res, indent=1) + '\n')
    print(json.dumps({k: res[k] for k in (*ROWS, 'equal_compute_base', 'equal_compute_brefine')}, indent=1))
    if out.resolve().is_relative_to(RESULTS.resolve()): record(out.stem, out, argv, 0, script='bench/converged.py')

if __name__ == '__main__':
    main()
