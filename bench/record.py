"""The experiment record: `bench/results/manifest.json` and the index `bench/results/README.md` generated from it.

Every script in `bench/` that measures something can record its run (`--record`): its results file goes under
`bench/results/`, and `record` adds an entry to the manifest:

    {"name", "file", "also" (companion files, optional), "command", "git_commit", "date", "machine", "seconds"}

with `file` and `also` relative to `bench/results/`. An entry whose script has since left `bench/` says which commit
last held it (`removed`: {"script", "commit"}), so that `git checkout COMMIT` brings it back. Entries for results
recorded before the manifest existed have null run date, commit and machine, and say instead which commit recorded the
file (`recorded_in`), where their command came from when it was rebuilt from a log (`command_reconstructed`), and any
remark on the command's line (`note`). An entry
for a file already in the manifest replaces the old one, so the manifest lists each results file once, with the command
that last wrote it. The manifest is rewritten atomically (a temporary file, then `os.replace`) under a lock on the
folder, and the index is regenerated each time. `bench/results/HISTORY.md`, the experiments' story (what was tried, run
by run, with names and commits), is written by hand; the index links to it and this script never writes it.

    .venv/bin/python bench/record.py          # regenerate bench/results/README.md from the manifest
"""
from __future__ import annotations
import contextlib, datetime, fcntl, io, json, os, platform, subprocess, sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO/'bench/results'
MANIFEST, INDEX, HISTORY = RESULTS/'manifest.json', RESULTS/'README.md', RESULTS/'HISTORY.md'   # HISTORY.md: by hand

def command(script: str, argv) -> str:
    "The command line of `script` (a path from the repository root) run with arguments `argv`."
    return ' '.join(['.venv/bin/python', script] + [str(a) for a in argv])

def provenance(script: str, argv) -> dict:
    "The command, commit, date and machine of this run."
    try: commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError: commit = ''
    return dict(command=command(script, argv), git_commit=commit, date=datetime.date.today().isoformat(),
                machine=f'{platform.machine()}, {os.cpu_count()} cores, {platform.system()}')

def in_results(path) -> bool:
    "Whether `path` lies under bench/results (where results are recorded)."
    return Path(path).resolve().is_relative_to(RESULTS.resolve())

def _atomic_text(path: Path, text: str):
    tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
    with open(tmp, 'w', encoding='utf-8') as fh: fh.write(text); fh.flush(); os.fsync(fh.fileno())
    os.replace(tmp, path)

@contextlib.contextmanager
def _locked():
    "An exclusive lock on bench/results, held while the manifest is read and rewritten."
    RESULTS.mkdir(parents=True, exist_ok=True)
    fd = os.open(RESULTS, os.O_RDONLY)
    try: fcntl.flock(fd, fcntl.LOCK_EX); yield
    finally: os.close(fd)

def load() -> list:
    "The manifest's entries (none when it does not exist yet)."
    return json.loads(MANIFEST.read_text(encoding='utf-8')) if MANIFEST.exists() else []

def record(name: str, results_path, argv, seconds, script: str | None = None, also=(), started: dict | None = None) -> dict:
    "Add the run that wrote `results_path` (under bench/results) to the manifest and regenerate the index; returns the entry. `started`: the run's `provenance`, taken when it started (default: now)."
    results_path = Path(results_path).resolve()
    if not in_results(results_path): raise ValueError(f'{results_path} is not under {RESULTS}: only results there are recorded.')
    rel = lambda p: Path(p).resolve().relative_to(RESULTS.resolve()).as_posix()
    script = script or Path(sys.argv[0]).resolve().relative_to(REPO).as_posix()
    entry = dict(name=name, file=rel(results_path), **({'also': [rel(p) for p in also]} if also else {}),
                 **(started or provenance(script, argv)), seconds=None if seconds is None else round(seconds, 1))
    with _locked():
        entries = [e for e in load() if e['file'] != entry['file']] + [entry]
        _atomic_text(MANIFEST, json.dumps(entries, indent=1) + '\n')
        write_index(entries)
    return entry

# ---------------------------------------------------------------------------------------------------------------- index
INTRO = """# Results

The record of the measurements in `bench/`, one row per results file. This file is generated from `manifest.json` by
`bench/record.py`; do not edit it by hand. A script run with `--record` writes its results here and adds its row.

- `camvid/`: the CamVid benchmark and its analyses. They were made with an earlier CamVid-only script, `bench/camvid.py`,
  whose defaults `bench/benchmark.py camvid` reproduces (8 + 32 epochs, the same calibration and DenseCRF grids), and
  with `bench/camvid_choice.py`, `camvid_errors.py` and `camvid_settings.py`, now `bench/analyse.py choice|errors|settings
  camvid`. The commands quote their flags as they were, some of which no longer exist. Each `.md` table has its `.log`
  beside it.
- `<dataset>/`: runs of `bench/benchmark.py <dataset> --record NAME` (`NAME.md`, `.json`, `_figure.png`, `.log`) and of
  `bench/analyse.py ... --record NAME` (`NAME.txt`).
- the top level: each data set's headline run, `bench/benchmark.py <dataset> --out bench/results` with the defaults
  (`<dataset>_results.md`, `<dataset>.json`, `<dataset>_figure.png`, and its log `<dataset>/<dataset>.log`), and the
  micro-benchmarks (`band.txt`, `learner.txt`, `metrics.txt`, `speed.txt`); each starts with its command. The headline
  runs made before the default embedder became the shared one are `<dataset>/<dataset>_separate.*`, moved there (the
  manifest says so); their commands ran the separate embedder, then the default.

Date and commit are those of the run. Where the run did not record them, the cells show in brackets the commit that
recorded the file's content and its date; a command marked (reconstructed) was rebuilt from the `args:` line of the
run's log (`manifest.json` says against which version of the script). A script that has since left `bench/` is
marked *removed* with the commit that last held it: `git checkout COMMIT` brings it back to rerun the command.

[HISTORY.md](HISTORY.md), written by hand and never touched by `record.py`, is the story behind these files: what was
tried and what each change gave, run by run, with the run names and commits.
"""

def _cell(s) -> str: return str(s).replace('|', '\\|').replace('\n', ' ')

def index_text(entries: list) -> str:
    "The index: the intro, then a table of every entry, grouped by folder, with any results file the manifest lacks."
    listed = {e['file'] for e in entries} | {a for e in entries for a in e.get('also', ())}
    lines = [INTRO]
    groups = {}
    for e in entries: groups.setdefault(str(Path(e['file']).parent), []).append(e)
    for folder in sorted(groups, key=lambda f: (f != '.', f)):
        lines += ['', f'## {"bench/results/" if folder == "." else folder + "/"}', '',
                  '| results | command | date | commit | seconds |', '|---|---|---|---|---:|']
        for e in sorted(groups[folder], key=lambda e: e['file']):
            rec = e.get('recorded_in') or {}
            files = ', '.join(f'[`{Path(f).name}`]({f})' for f in [e['file']] + list(e.get('also', ())))
            cmd = (f"`{_cell(e['command'])}`" + (' (reconstructed)' if e.get('command_reconstructed') else '')) if e.get('command') else '—'
            if gone := e.get('removed'): cmd += f" (`{gone['script']}` removed; `git checkout {gone['commit']}` has it)"
            date = e.get('date') or (f"({rec['date']})" if rec else '—')
            commit = e.get('git_commit') or (f"({rec['commit']})" if rec else '—')
            secs = '' if e.get('seconds') is None else f"{e['seconds']:.0f}"
            lines.append(f'| {files} | {cmd} | {date} | {commit} | {secs} |')
    stray = sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob('*') if p.is_file()
                   and p.name not in (MANIFEST.name, INDEX.name, HISTORY.name) and not p.name.startswith('.')
                   and p.relative_to(RESULTS).as_posix() not in listed)
    if stray: lines += ['', '## Not in the manifest', ''] + [f'- [`{f}`]({f})' for f in stray]
    return '\n'.join(lines) + '\n'

def write_index(entries: list | None = None):
    "Regenerate bench/results/README.md from the manifest."
    _atomic_text(INDEX, index_text(load() if entries is None else entries))

# ------------------------------------------------------------------------------------------------- recording a printout
class _Tee(io.TextIOBase):
    "A text stream writing to all of `streams`."
    def __init__(self, *streams): self.streams = streams
    def write(self, s):
        for st in self.streams: st.write(s)
        return len(s)
    def flush(self):
        for st in self.streams: st.flush()

@contextlib.contextmanager
def tee_stdout(stream):
    "Copy everything printed inside the block to `stream` as well."
    old = sys.stdout
    sys.stdout = _Tee(old, stream)
    try: yield
    finally: sys.stdout.flush(); sys.stdout = old

@contextlib.contextmanager
def printout(script: str, argv, path=None, name: str | None = None):
    """Print `$ command` and run the block; with `path`, what it prints (from that line on) is written to `path` and recorded.

    The file is written atomically once the block has finished without error; a failed run records nothing."""
    import time
    t0, buf, started = time.perf_counter(), io.StringIO(), provenance(script, argv)   # the commit whose code runs
    with tee_stdout(buf) if path else contextlib.nullcontext():
        print(f'$ {command(script, argv)}', flush=True)
        yield
    if path:
        path = Path(path); path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_text(path, buf.getvalue())
        e = record(name or path.stem, path, argv, time.perf_counter() - t0, script=script, started=started)
        print(f"recorded bench/results/{e['file']} in bench/results/manifest.json", file=sys.stderr)

def main_recorded(ap, name: str, run, results=None):
    "Parse `ap`'s arguments and a `--record` flag, then `run(args)`; with --record the printout is kept as bench/results/<name>.txt, or <results(args)>.txt."
    ap.add_argument('--record', action='store_true', help=f'also write the printout to bench/results/{name}.txt and record it in the manifest')
    a = ap.parse_args()
    with printout(f'bench/{name}.py', sys.argv[1:], RESULTS/f'{results(a) if results else name}.txt' if a.record else None): run(a)

if __name__ == '__main__':
    write_index()
    print(f'wrote {INDEX.relative_to(REPO)} ({len(load())} entries)')
