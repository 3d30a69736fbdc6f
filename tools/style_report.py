"""How the notebooks' export cells compare with fastcore's rhythm: lines over 100 and 120 characters, the median export
cell, cells over 30 lines, and definitions not followed at once by an example cell (with `-v`, which ones).

    .venv/bin/python tools/style_report.py [-v] [REPO]
"""
import json, re, statistics, sys
from pathlib import Path

EXPORT, DEFINES = re.compile(r'#\|\s*export'), re.compile(r'^(?:(?:async )?def|class) (\w+)|^([A-Z_][A-Z0-9_]*) *=', re.M)

def report(root: Path) -> dict:
    "The measures over `root/nbs/[0-9]*.ipynb`, and the definition cells that lack an example."
    lines, sizes, lacking, n_def = [], [], [], 0
    for nb in sorted((root/'nbs').glob('[0-9]*.ipynb')):
        code = [''.join(c['source']) for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'code']
        for i, src in enumerate(code):
            if not EXPORT.match(src): continue
            body = [l for l in src.splitlines() if not l.startswith('#|')]
            lines += body; sizes.append(len(body))
            names = [a or b for a, b in DEFINES.findall(src)]
            if not names: continue
            n_def += 1
            if i + 1 == len(code) or EXPORT.match(code[i + 1]): lacking.append(f'{nb.name}: {", ".join(names[:3])}')
    return dict(export_lines=len(lines), over_100=sum(len(l) > 100 for l in lines), over_120=sum(len(l) > 120 for l in lines),
                export_cells=len(sizes), median_cell=statistics.median(sizes) if sizes else 0,
                cells_over_30=sum(s > 30 for s in sizes), definition_cells=n_def, lacking_example=lacking)

if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if a != '-v']
    r = report(Path(args[0]) if args else Path(__file__).resolve().parent.parent)
    print(', '.join(f'{k} {v}' for k, v in r.items() if k != 'lacking_example') + f", lacking an example {len(r['lacking_example'])}")
    if '-v' in sys.argv: print('\n'.join('  ' + s for s in r['lacking_example']))
