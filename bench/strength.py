"""brefine's gain against the base model's strength: what to expect for a model like yours.

Reads `bench/benchmark.py --base FILE` runs (their JSON) on base checkpoints of increasing quality (`bench/converge.py`
keeps the weights after chosen epochs and the best), and plots, per data set, brefine's test gain over the base in mIoU and
in boundary F @ 3 px against the base's test mIoU (the x axis is what a user can measure of their own model). Writes
`bench/results/strength.png` and `bench/results/strength.json` (one row per run: data set, base weights, base test mIoU
and boundary F, brefine's, the gains, the run's command).

    .venv/bin/python bench/strength.py bench/results/camvid/camvid_e8.json bench/results/camvid/camvid_e16.json ... \\
        bench/results/stanford/stanford_e8.json ...
"""
from __future__ import annotations
import argparse, json, sys
from pathlib import Path
from record import RESULTS, provenance, record

def rows(files) -> list:
    "One row per benchmark JSON: its data set, base weights, base and brefine test scores and the gains (points)."
    out = []
    for f in files:
        r = json.loads(Path(f).read_text())
        b, m = r['base'], r['brefine']
        out.append(dict(dataset=r['dataset'], run=str(f), base_weights=r.get('base_weights'), base_miou=b['miou'],
                        base_boundary_f1=b['boundary_f1'], brefine_miou=m['miou'], brefine_boundary_f1=m['boundary_f1'],
                        gain_miou=100 * (m['miou'] - b['miou']), gain_boundary_f1=100 * (m['boundary_f1'] - b['boundary_f1']),
                        command=r.get('command')))
    return sorted(out, key=lambda r: (r['dataset'], r['base_miou']))

def plot(rs: list, path: Path):
    "Gain in mIoU and in boundary F against the base's mIoU, a line per data set."
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    for ds in sorted({r['dataset'] for r in rs}):
        pts = [r for r in rs if r['dataset'] == ds]
        for ax, k in zip(axs, ('gain_miou', 'gain_boundary_f1')):
            ax.plot([100 * r['base_miou'] for r in pts], [r[k] for r in pts], 'o-', label=ds)
    for ax, t in zip(axs, ('mIoU gain (points)', 'boundary F gain (points)')):
        ax.axhline(0, color='grey', lw=0.8); ax.set_xlabel("the base model's test mIoU"); ax.set_ylabel(t); ax.legend()
    fig.suptitle('brefine on base models of increasing quality (test split, settings chosen on val)')
    fig.tight_layout()
    tmp = path.with_name('.' + path.stem + '.tmp.png'); fig.savefig(tmp, dpi=90); plt.close(fig); tmp.replace(path)

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('runs', nargs='+', type=Path, help="bench/benchmark.py runs' JSON, on base checkpoints")
    p.add_argument('--out', type=Path, default=RESULTS, help='folder for strength.png and strength.json')
    a = p.parse_args(argv)
    rs = rows(a.runs)
    a.out.mkdir(parents=True, exist_ok=True)
    plot(rs, a.out/'strength.png')
    from brefine.core import atomic_write
    with atomic_write(a.out/'strength.json', 'w') as fh:
        fh.write(json.dumps(dict(rows=rs, **provenance('bench/strength.py', argv)), indent=1) + '\n')
    for r in rs: print(f"{r['dataset']}: base mIoU {100 * r['base_miou']:.2f}: gain {r['gain_miou']:+.2f} mIoU, {r['gain_boundary_f1']:+.2f} boundary F")
    if (a.out/'strength.json').resolve().is_relative_to(RESULTS.resolve()):
        record('strength', a.out/'strength.json', argv, 0, script='bench/strength.py', also=[a.out/'strength.png'])

if __name__ == '__main__':
    main()
