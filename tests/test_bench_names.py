"""bench/ uses brefine through public names only: every `from brefine.X import name`, `import brefine.X` and `brefine.X.name`
in bench/*.py names a module that exists and a name in its `__all__` (from the package itself, any name without a leading
underscore), so the benchmarks keep running when brefine's private helpers change or move."""
import ast, importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _public(module: str) -> set:
    "The names of `module` that bench/ may use: its `__all__` (for the package, every name without a leading underscore), and the dunders."
    m = importlib.import_module(module)
    return ({n for n in vars(m) if not n.startswith('_')} if module == 'brefine' else set(getattr(m, '__all__', []))) | {
        n for n in dir(m) if n.startswith('__') and n.endswith('__')}


def _exists(module: str) -> bool:
    try: importlib.import_module(module); return True
    except ImportError: return False


def problems(src: str, where: str = '<src>') -> list:
    "What `src` takes from brefine that is not public, or from a brefine module that does not exist."
    out, alias = [], {}                                   # local name -> the brefine module it stands for
    nodes = list(ast.walk(ast.parse(src)))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split('.')[0] != 'brefine': continue
                if not _exists(a.name): out.append(f'{where}:{node.lineno}: no module {a.name}'); continue
                alias[a.asname or 'brefine'] = a.name if a.asname else 'brefine'
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or '').split('.')[0] == 'brefine':
            if not _exists(node.module): out.append(f'{where}:{node.lineno}: no module {node.module}'); continue
            public = _public(node.module)
            for a in node.names:
                if _exists(f'{node.module}.{a.name}') and not a.name.startswith('_'): alias[a.asname or a.name] = f'{node.module}.{a.name}'
                elif a.name not in public: out.append(f'{where}:{node.lineno}: {node.module}.{a.name} is not public')
    for node in nodes:                                    # brefine.X.name, or M.name for a brefine module imported as M
        if not isinstance(node, ast.Attribute): continue
        parts, v = [node.attr], node.value
        while isinstance(v, ast.Attribute): parts.insert(0, v.attr); v = v.value
        if not isinstance(v, ast.Name) or v.id not in alias: continue
        module = alias[v.id]
        for p in parts:                                   # walk down the submodules, then check the first name that is not one
            if _exists(f'{module}.{p}') and not p.startswith('_'): module = f'{module}.{p}'; continue
            if p not in _public(module): out.append(f'{where}:{node.lineno}: {module}.{p} is not public')
            break
    return out


def test_the_check_can_fail():
    assert problems('from brefine.calibration import _best') == ['<src>:1: brefine.calibration._best is not public']
    assert problems('import brefine.refine as r\nr._relabel(1)') == ['<src>:2: brefine.refine._relabel is not public']
    assert problems('import brefine\nbrefine.refine._candidates') == ['<src>:2: brefine.refine._candidates is not public']
    assert problems('import brefine.inference') == ['<src>:1: no module brefine.inference']
    assert problems('from brefine import relabel, refine\nfrom brefine.refine import RefineStages\nrefine.relabel, refine.__all__') == []


def test_bench_uses_public_names():
    found = [p for f in sorted((ROOT/'bench').glob('*.py')) for p in problems(f.read_text(encoding='utf-8'), f.relative_to(ROOT))]
    assert not found, 'bench/ takes these from brefine, which are not public (or do not exist):\n' + '\n'.join(found)
