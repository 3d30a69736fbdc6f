"""Check that brefine/ is exactly what `nbdev_export` writes from nbs/, that `nbdev_clean` changes
no notebook, and that README.md is generated from nbs/index.ipynb.  Works on a copy: changes nothing."""
import shutil, subprocess, sys, tempfile
from pathlib import Path

root = Path(__file__).resolve().parent.parent
bin_ = Path(sys.executable).parent

def tree(p):
    return {f.relative_to(p): f.read_bytes() for f in sorted(p.rglob('*'))
            if f.is_file() and '__pycache__' not in f.parts and '.ipynb_checkpoints' not in f.parts}

def main():
    problems = []
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name in ('nbs', 'brefine'): shutil.copytree(root/name, d/name, ignore=shutil.ignore_patterns('__pycache__', '.ipynb_checkpoints', '_data'))
        for name in ('settings.ini', 'setup.py'): shutil.copy(root/name, d/name)
        for cmd in ('nbdev_export', 'nbdev_clean'):
            r = subprocess.run([str(bin_/cmd)], cwd=d, capture_output=True, text=True)
            if r.returncode: problems.append(f'{cmd} failed:\n{r.stdout}\n{r.stderr}')
        for name, fix in (('brefine', 'run `nbdev_export`'), ('nbs', 'run `nbdev_clean`')):
            before, after = tree(root/name), tree(d/name)
            for f in sorted(set(before) | set(after)):
                if before.get(f) != after.get(f):
                    state = 'missing' if f not in before else 'extra' if f not in after else 'differs'
                    problems.append(f'{name}/{f} {state}: {fix} and commit the result')
    r = subprocess.run([sys.executable, str(root/'tools'/'readme.py')], capture_output=True, text=True)
    if r.returncode: problems.append(r.stderr.strip() or r.stdout.strip())
    if problems: sys.exit('Out of sync:\n  ' + '\n  '.join(problems))
    print('brefine/ matches nbs/, notebooks are clean, README.md is fresh')

if __name__ == '__main__': main()
