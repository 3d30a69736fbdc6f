"""The package and the repository's other Python (brefine/, tests/, bench/, tools/) have no unused imports, undefined names
or unused variables (pyflakes). `_modidx.py` is nbdev's index, and the star imports of `brefine/__init__.py` are the
package's public API (its `__all__` is built from the modules' own)."""
import ast
from pathlib import Path
import pytest

pyflakes = pytest.importorskip('pyflakes')
from pyflakes import checker, messages

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT/'brefine'
STAR = (messages.ImportStarUsed, messages.ImportStarUsage)


def _problems(f: Path) -> list:
    res = []
    for m in checker.Checker(ast.parse(f.read_text(), str(f)), filename=str(f)).messages:
        star_import = isinstance(m, STAR) or (isinstance(m, messages.UnusedImport) and str(m.message_args[0]).endswith('.*'))
        if not (f.name == '__init__.py' and star_import): res.append(str(m))
    return res


def test_pyflakes_clean():
    problems = [p for f in sorted(PKG.glob('*.py')) if f.name != '_modidx.py' for p in _problems(f)]
    assert not problems, 'pyflakes (fix the notebook, then nbdev_export):\n' + '\n'.join(problems)


def test_pyflakes_clean_beyond_the_package():
    "The tests, bench scripts and tools: no package file exports them, so nothing else would flag a stale import there."
    problems = [p for d in ('tests', 'bench', 'tools') for f in sorted((ROOT/d).rglob('*.py')) for p in _problems(f)]
    assert not problems, 'pyflakes:\n' + '\n'.join(problems)
