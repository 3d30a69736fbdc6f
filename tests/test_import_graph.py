"""The package's import graph: every import of one brefine module by another is at module level (no arrow hidden in a
function), there is no circle, and every arrow points down the data flow, the order of the notebooks in `nbs/`."""
import ast, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT/'brefine'

def data_flow() -> list:
    "The modules in the order of the notebooks that define them (`#| default_exp` of nbs/NN*_*.ipynb, sorted by file name)."
    order = []
    for nb in sorted(ROOT.glob('nbs/[0-9]*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            m = re.match(r'#\|\s*default_exp\s+(\w+)', ''.join(c['source']))
            if m: order.append(m.group(1)); break
    return order

def imports(path: Path) -> list:
    "(module imported, line, at module level) for each import of another brefine module in `path`."
    out, tree = [], ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1 and n.module: mod = n.module.split('.')[0]
            elif n.level == 0 and n.module and n.module.startswith('brefine.'): mod = n.module.split('.')[1]
            elif n.level == 0 and n.module == 'brefine': mod = n.names[0].name
            else: continue
        elif isinstance(n, ast.Import):
            names = [a.name.split('.')[1] for a in n.names if a.name.startswith('brefine.')]
            if not names: continue
            mod = names[0]
        else: continue
        out.append((mod, n.lineno, id(n) in top))
    return out

def graph() -> dict:
    return {p.stem: imports(p) for p in PKG.glob('*.py') if not p.stem.startswith('_')}

def test_every_module_has_a_notebook():
    order = data_flow()
    assert len(order) == len(set(order)), f'two notebooks export one module: {order}'
    assert set(graph()) == set(order), f'modules without a notebook, or notebooks without a module: {set(graph()) ^ set(order)}'

def test_imports_are_at_module_level():
    hidden = [f'brefine/{m}.py:{line} imports brefine.{dep}' for m, deps in graph().items() for dep, line, top in deps if not top]
    assert not hidden, 'imports inside functions hide arrows of the import graph:\n' + '\n'.join(hidden)

def test_every_import_points_down():
    order = data_flow(); rank = {m: i for i, m in enumerate(order)}
    up = [f'brefine/{m}.py:{line} imports brefine.{dep}, which comes later ({order.index(dep)} > {order.index(m)})'
          for m, deps in graph().items() for dep, line, _ in deps if dep in rank and rank[dep] >= rank[m]]
    assert not up, 'imports that point up the data flow (the order of nbs/):\n' + '\n'.join(up)

def test_no_circle():
    g = {m: {d for d, _, _ in deps if d != m} for m, deps in graph().items()}
    state = {}
    def visit(m, path):
        if state.get(m) == 'done': return
        assert state.get(m) != 'open', 'import circle: ' + ' -> '.join(path + [m])
        state[m] = 'open'
        for d in sorted(g.get(m, ())): visit(d, path + [m])
        state[m] = 'done'
    for m in sorted(g): visit(m, [])

def test_the_checks_see_a_circle(tmp_path, monkeypatch):
    "The test above can fail: two modules that import each other are a circle, and one of their imports points up."
    (tmp_path/'a.py').write_text('from .b import f\n'); (tmp_path/'b.py').write_text('def f(): from brefine.a import g\n')
    monkeypatch.setattr(__import__(__name__), 'PKG', tmp_path)
    g = graph()
    assert g['a'] == [('b', 1, True)] and g['b'] == [('a', 1, False)]
