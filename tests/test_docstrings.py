"""Every name brefine exports (each module's `__all__`, the modules listed in brefine/_modidx.py) has a docstring,
is documented in the docs, and is used in an example in the notebook that exports it.

Documented means: defined at the top of an `#| export` cell of its own notebook, after which nbdev's docs build adds
its `show_doc` (so the documentation sits with the code), or shown with an explicit `show_doc(name)` cell.

Names that lack one of these when this test was written are listed in KNOWN_GAPS with the owner to fix them;
the test fails for any other gap, and warns when a listed gap has been fixed (then delete it from the list)."""
import importlib, inspect, json, re, warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'

# name -> what is missing, as reported by this test; fix the notebook, then remove the entry. Keep it empty.
KNOWN_GAPS = {}


def _notebooks():
    return sorted(p for p in NBS.rglob('*.ipynb') if not any(part[0] in '._' for part in p.relative_to(NBS).parts))


def _code_cells(nb: Path):
    cells = json.loads(nb.read_text(encoding='utf-8'))['cells']
    return [''.join(c['source']) if isinstance(c['source'], list) else c['source'] for c in cells if c['cell_type'] == 'code']


def _directives(src):
    return {m.group(1) for m in re.finditer(r'^\s*#\|\s*([\w-]+)', src, re.M)}


def _module_notebooks():
    "module name -> its notebook (from `#| default_exp`)."
    res = {}
    for nb in _notebooks():
        for src in _code_cells(nb):
            if m := re.search(r'^\s*#\|\s*default_exp\s+(\S+)', src, re.M): res[f'brefine.{m.group(1)}'] = nb
    return res


def _show_docs():
    "notebook -> the `show_doc(X...)` targets in it, as written (`refine_predict`, `Refiner.save`, ...)."
    return {nb: {t for src in _code_cells(nb) for t in re.findall(r'\bshow_doc\(\s*([\w.]+)', src)} for nb in _notebooks()}


def _defined_in_export_cells(nb) -> set:
    "Top-level functions and classes defined in the `#| export` cells of notebook `nb`: nbdev's docs build shows each."
    return {m.group(1) for src in _code_cells(nb) if _directives(src) & {'export', 'exports'}
            for m in re.finditer(r'^(?:async\s+)?(?:def|class)\s+(\w+)', src, re.M)}


def _exported():
    from brefine._modidx import d
    for mod in sorted(d['syms']):
        if mod.endswith('__init__'): continue
        m = importlib.import_module(mod)
        for name in getattr(m, '__all__', []): yield mod, name, getattr(m, name)


def _documentable(obj): return inspect.isclass(obj) or inspect.isroutine(obj)


def _docstring(obj):
    doc = obj.__dict__.get('__doc__') if inspect.isclass(obj) else getattr(obj, '__doc__', None)
    return (doc or '').strip()


def find_gaps():
    "{'module.name': [what is missing]} for every exported function or class."
    shown, nbs, gaps = _show_docs(), _module_notebooks(), {}
    exported = list(_exported())
    count = {}
    for _, name, _ in exported: count[name] = count.get(name, 0) + 1
    for mod, name, obj in exported:
        if not _documentable(obj): continue                       # constants (e.g. SYNTH_CODES): prose, not show_doc
        missing = []
        if not _docstring(obj): missing.append('docstring')
        nb = nbs.get(mod)
        # show_doc(name) in its own notebook; elsewhere too when the name is unambiguous, or show_doc(module.name)
        where = [shown.get(nb, set()) | (_defined_in_export_cells(nb) if nb else set())] + ([t for k, t in shown.items() if k != nb] if count[name] == 1 else [])
        if not (any(name in ts for ts in where) or any(t == f'{mod}.{name}' or t == f'{mod.split(".")[-1]}.{name}'
                                                      for ts in shown.values() for t in ts)): missing.append('show_doc')
        examples = [s for s in _code_cells(nb) if not _directives(s) & {'export', 'exporti', 'exports', 'hide'}
                    and not re.fullmatch(r'\s*(show_doc\([^\n]*\)\s*)+', s)] if nb else []
        if not any(re.search(rf'(?<![\w.]){re.escape(name)}\b', s) for s in examples): missing.append('example')
        if missing: gaps[f'{mod}.{name}'] = missing
    return gaps


def test_exports_exist():
    names = [f'{m}.{n}' for m, n, _ in _exported()]
    assert 'brefine.refine.refine_predict' in names and len(names) > 20


def test_every_export_has_docstring_show_doc_and_example():
    gaps = find_gaps()
    new = {k: v for k, v in gaps.items() if set(v) - set(KNOWN_GAPS.get(k, []))}
    fixed = {k: v for k, v in KNOWN_GAPS.items() if set(v) - set(gaps.get(k, []))}
    if fixed: warnings.warn(f'fixed, remove from KNOWN_GAPS in {__file__}: {fixed}')
    assert not new, ('exported names without ' + '; '.join(f'{k}: {", ".join(v)}' for k, v in sorted(new.items()))
                     + '. Add the docstring, define it in an `#| export` cell (or add a `show_doc(name)` cell) and add an example cell to the notebook that exports it.')


if __name__ == '__main__':                                      # python tests/test_docstrings.py: the report
    for k, v in sorted(find_gaps().items()): print(f'{k}: {", ".join(v)}')
