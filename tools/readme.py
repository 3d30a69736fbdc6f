"""README.md from nbs/index.ipynb without Quarto (`nbdev_readme` needs it).

`python tools/readme.py --write` rewrites README.md; without `--write` it exits 1 when README.md is stale."""
import re, sys
from pathlib import Path
import nbformat
from nbconvert import MarkdownExporter

root = Path(__file__).resolve().parent.parent
HEADER = "<!-- generated from nbs/index.ipynb by `make readme`: edit the notebook, not this file -->\n\n"

def _keep(cell):
    src = cell.source.lstrip()
    if cell.cell_type != 'code': return True
    return not re.search(r'^#\|\s*(hide|export|exporti|exports|default_exp)\b', src, re.M)

def _strip_directives(cell):
    if cell.cell_type == 'code':
        cell.source = '\n'.join(l for l in cell.source.split('\n') if not l.startswith('#|')).strip()
    return cell

def render():
    nb = nbformat.read(root/'nbs'/'index.ipynb', as_version=4)
    nb.cells = [_strip_directives(c) for c in nb.cells if _keep(c)]
    body, _ = MarkdownExporter().from_notebook_node(nb)
    body = re.sub(r'\n{3,}', '\n\n', body).strip() + '\n'
    body = body.replace('](images/', '](nbs/images/')   # notebook-relative image paths, seen from the repository root
    body = re.sub(r'\]\((?!https?:|nbs/)([\w./-]+\.ipynb)\)', r'](nbs/\1)', body)   # links to other notebooks, likewise
    return HEADER + body

if __name__ == '__main__':
    new = render()
    readme = root/'README.md'
    if '--write' in sys.argv:
        tmp = readme.with_suffix('.md.tmp'); tmp.write_text(new); tmp.replace(readme)
        print('wrote README.md')
    elif not readme.exists() or readme.read_text() != new:
        sys.exit('README.md is stale: it must be generated from nbs/index.ipynb. Run `make readme` and commit it.')
    else: print('README.md is up to date')
