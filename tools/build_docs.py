"""Build brefine's documentation site offline: `make docs` writes a static HTML site to `_docs/`.

Why not `nbdev_docs`
--------------------
`nbdev_docs` renders with Quarto, and no package registry we can reach (PyPI, Debian, npm) provides Quarto:
nbdev downloads its .deb from GitHub at run time.  The standard nbdev set-up stays in place for wherever
Quarto exists (nbs/_quarto.yml, nbs/nbdev.yml, nbs/sidebar.yml, nbs/styles.css and
.github/workflows/deploy.yaml, which publishes with `nbdev_docs` to GitHub Pages); this script builds the
same site from the same notebooks without Quarto.

What it does, in nbdev's own order
----------------------------------
1. nbdev's config files: nbs/nbdev.yml from settings.ini (nbdev's `refresh_quarto_yml` template) and
   nbs/sidebar.yml (`nbdev_sidebar`), written only when their content changes; nbs/_quarto.yml is
   created from nbdev's template if it is missing.
2. nbdev's notebook processing, exactly the processors `nbdev_proc_nbs` applies
   (`nbdev.processors.FilterDefaults`): front matter from the `# title` / `> description` cell,
   `show_doc` cells executed and rendered as markdown, `show_doc` added after exported definitions that
   lack one, doc links (`refine_predict` in backticks -> `refine.html#refine_predict`), `#| hide`
   and `#| export` cells removed, magics cleaned.  Two deliberate differences, both in `exec_show_docs`:
   cells flagged with settings.ini's `tst_flags` (slow|cuda|camvid) are never executed by the docs build
   (nbdev would run a CamVid training cell if it also contained an import), and a cell that mixes imports
   with other code and fails (nbdev's FAQ case "cells containing imports and other code") keeps its stored
   outputs and is reported instead of aborting the build; `--strict` makes those reports errors, which is
   what `nbdev_docs` would do.  Processed notebooks are cached in .cache/docs_proc/, keyed on the
   notebook, settings.ini, brefine/*.py and this script.
3. Rendering: nbconvert's HTMLExporter with a small template (tools/docs_template/brefine_docs,
   extending nbconvert's `classic` cell markup) turns each processed notebook into one page; the page
   shell mirrors Quarto's website layout: navbar, sidebar in nbs/sidebar.yml's order (the notebook
   order), page title and description from the front matter, a table of contents of the h2/h3 headings.
   Quarto's conventions that nbdev relies on are reproduced: page names without the number prefix
   (`05b_refine.ipynb` -> `refine.html`, the names in brefine/_modidx.py), pandoc's heading
   identifiers (so `refine.html#refine_predict` lands on `refine_predict`'s show_doc), cell options
   (`#| echo: false`, `output: false/asis`, `include: false`, `code-fold`), link attributes and fenced
   divs (callouts).  Links to the published site (settings.ini doc_host + doc_baseurl) and to other
   notebooks become relative links, so the site works from disk or any static server.  Images from
   cell outputs are embedded as data URIs; images referenced from markdown are copied.  Math becomes
   MathML (rendered by the browser, no JavaScript) when `latex2mathml` is installed.

Why nbconvert and not pandoc
----------------------------
nbconvert is already a dev requirement (tools/readme.py uses it), it is the reference renderer of every
Jupyter output type (PNG/SVG embedded, HTML tables from pandas and fastai, streams, errors), it
highlights code with Pygments, and its Jinja templates make the page shell a small template file.
Debian's pandoc 2.17 reads .ipynb too, but it would add a system package to every developer machine and CI,
and nbdev's `show_doc` output (markdown inside `execute_result` outputs) would still need the same
post-processing.  Search (Quarto's lunr index) is the one Quarto feature this build does not reproduce.

usage: python tools/build_docs.py [--out DIR] [--force] [--strict] [--quiet]
"""
from __future__ import annotations
import argparse, ast, contextlib, html, io, os, posixpath, re, shutil, sys, tempfile, time, warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = Path(__file__).resolve().parent/'docs_template'
TEMPLATE = 'brefine_docs'
IMAGE_EXTS = {'.png', '.jpg', '.jpeg', '.gif', '.svg', '.webp'}

# ---------------------------------------------------------------------------------------------------------
# 1. nbdev's config files

def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding='utf-8') == text: return False
    tmp = path.with_name(f'.{path.name}.tmp'); tmp.write_text(text, encoding='utf-8'); tmp.replace(path)
    return True

def nbdev_config_files(cfg) -> list[Path]:
    "Write nbs/nbdev.yml, nbs/sidebar.yml (and nbs/_quarto.yml if missing) as `nbdev_docs` would; return those changed."
    import nbdev.quarto as q
    nbs, changed = cfg.nbs_path, []
    vals = {k: cfg[k] for k in ['title', 'description', 'branch', 'git_url', 'doc_host', 'doc_baseurl']}
    vals['doc_path'] = cfg.doc_path.name
    if _write_if_changed(nbs/'nbdev.yml', q._nbdev_yml.format(**vals)): changed.append(nbs/'nbdev.yml')
    if not (nbs/'_quarto.yml').exists():
        (nbs/'_quarto.yml').write_text(q._quarto_yml + '\n', encoding='utf-8'); changed.append(nbs/'_quarto.yml')
    if not cfg.custom_sidebar:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf): q.nbdev_sidebar.__wrapped__(path=nbs, printit=True, force=True)
        if _write_if_changed(nbs/'sidebar.yml', buf.getvalue()): changed.append(nbs/'sidebar.yml')
    return changed

# ---------------------------------------------------------------------------------------------------------
# 2. nbdev's processing

def _docs_procs(cfg, problems: list):
    """nbdev's `FilterDefaults`, with an `exec_show_docs` that never executes cells flagged with `tst_flags` and runs
    only the import statements of cells that mix imports with other code (keeping their stored outputs)."""
    from nbdev.processors import FilterDefaults, exec_show_docs, _do_eval, _show_docs
    flags = set(filter(None, re.split(r'[|,\s]+', cfg.get('tst_flags', '') or '')))
    shown = {'export', 'exports', 'exporti', 'exec_doc'}

    class docs_exec_show_docs(exec_show_docs):
        def __call__(self, cell):
            if cell.cell_type != 'code': return
            dirs = set(getattr(cell, 'directives_', None) or {})
            if flags & dirs: return
            trees = cell.parsed_() or []
            imports = [t for t in trees if isinstance(t, (ast.Import, ast.ImportFrom))]   # top-level ones
            has_import = any(isinstance(n, (ast.Import, ast.ImportFrom)) for t in trees for n in ast.walk(t))
            if (not (dirs & shown) and not _show_docs(trees) and has_import and len(imports) < len(trees)
                    and hasattr(self, 'k') and self.nb.has_docs_ and _do_eval(cell)):
                # nbdev would execute this whole cell (and replace its outputs) just to get its imports
                problems.append(f"{self.nb.path_}: cell {cell.idx_} mixes imports and other code: nbdev_docs executes "
                                f"all of it (the offline build runs only its imports). Put the imports in a cell of their "
                                f"own.\n      {cell.source.splitlines()[0][:100]} ...")
                if imports: self.k.run_cell(ast.unparse(ast.Module(body=imports, type_ignores=[])))
                if self.k.exc:
                    e, self.k.exc = self.k.exc, None
                    raise RuntimeError(f"{self.nb.path_}: the imports of cell {cell.idx_} fail: {e!r}") from e
                return
            super().__call__(cell)

    class DocsFilter(FilterDefaults):
        def base_procs(self): return [docs_exec_show_docs if p is exec_show_docs else p for p in super().base_procs()]
    return DocsFilter()

def notebooks(cfg) -> list[Path]:
    "The notebooks nbdev documents (nbdev's `nbglob`: recursive, skipping names that start with _ or .)."
    from nbdev.doclinks import nbglob
    return sorted(Path(p) for p in nbglob(cfg.nbs_path))

def process(cfg, cache: Path, force=False, say=print, problems=None) -> dict[Path, Path]:
    "Run nbdev's processors on every notebook into `cache` (mirroring nbs/); only stale ones are redone."
    from execnb.nbio import read_nb, write_nb
    from fastcore.xtras import working_directory
    problems = [] if problems is None else problems
    key_files = [cfg.config_file, Path(__file__)] + [p for p in cfg.lib_path.rglob('*.py') if p.name != '_modidx.py']
    key = max(p.stat().st_mtime for p in key_files if p.exists())
    out, todo = {}, []
    for nb in notebooks(cfg):
        dst = cache/nb.relative_to(cfg.nbs_path)
        out[nb] = dst
        if force or not dst.exists() or dst.stat().st_mtime < max(nb.stat().st_mtime, key): todo.append((nb, dst))
        elif dst.with_suffix('.warnings').exists():                        # re-report what processing found
            problems += dst.with_suffix('.warnings').read_text(encoding='utf-8').split('\0')
    if not todo: return out
    os.environ['IN_TEST'] = '1'
    os.environ.setdefault('MPLBACKEND', 'Agg')
    for nb, dst in todo:
        t0, mine = time.time(), []
        filt = _docs_procs(cfg, mine)
        doc = read_nb(nb)
        doc.path_ = str(nb.relative_to(cfg.config_path))
        with working_directory(nb.parent), warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='Found cells containing imports')
            filt(doc)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if mine: dst.with_suffix('.warnings').write_text('\0'.join(mine), encoding='utf-8')
        else: dst.with_suffix('.warnings').unlink(missing_ok=True)
        tmp = dst.with_name(f'.{dst.name}.{os.getpid()}.tmp'); write_nb(doc, tmp); tmp.replace(dst)
        problems += mine
        say(f'  processed {nb.relative_to(cfg.config_path)} ({time.time() - t0:.1f}s)')
    return out

# ---------------------------------------------------------------------------------------------------------
# 3. rendering

def read_notebook(path):
    "An nbformat notebook node; tolerates outputs stored on markdown cells (dropped: nbformat calls them invalid)."
    import json, nbformat
    d = json.loads(Path(path).read_text(encoding='utf-8'))
    for c in d.get('cells', []):
        if c.get('cell_type') != 'code': c.pop('outputs', None); c.pop('execution_count', None)
    return nbformat.reads(json.dumps(d), as_version=4)

def page_name(nb_rel: Path) -> Path:
    "Quarto's page for a notebook: the number prefix dropped, `.html` (`05b_refine.ipynb` -> `refine.html`)."
    return nb_rel.with_name(re.sub(r'^\d+[a-zA-Z0-9]*_', '', nb_rel.stem) + '.html')   # as nbdev's _nbpath2html: 03a_training -> training

def _frontmatter(nb) -> dict:
    import yaml
    for i, c in enumerate(nb.cells):
        if c.cell_type == 'raw' and c.source.lstrip().startswith('---'):
            body = c.source.strip().strip('-').strip()
            try: fm = yaml.safe_load(body) or {}
            except yaml.YAMLError: fm = {}
            del nb.cells[i]
            return fm if isinstance(fm, dict) else {}
    return {}

_re_link_attrs = re.compile(r'(\]\([^)\s]*(?:\s+"[^"]*")?\))\{([^}\n]*)\}')
_re_div_open = re.compile(r'^:::+\s*\{([^}]*)\}\s*$|^:::+\s*([\w-]+)\s*$')
_re_div_close = re.compile(r'^:::+\s*$')

def quarto_markdown(src: str) -> str:
    "Quarto/pandoc markdown extensions that nbdev emits or notebooks use, as plain markdown + HTML."
    src = _re_link_attrs.sub(lambda m: m.group(1), src)        # [source](url){target="_blank" ...}: attributes dropped
    lines, fence = [], None
    for line in src.split('\n'):
        f = re.match(r'^\s*(```+|~~~+)', line)
        if f:
            if fence is None: fence = f.group(1)[:3]
            elif line.strip().startswith(fence): fence = None
        if fence is None and (m := _re_div_open.match(line)):
            attrs = m.group(1) or ('.' + m.group(2))
            classes = [a[1:] for a in attrs.split() if a.startswith('.')]
            if any(c.startswith('callout') for c in classes): classes.insert(0, 'callout')
            lines += [f'<div class="{html.escape(" ".join(classes))}">', '']
        elif fence is None and _re_div_close.match(line): lines += ['', '</div>']
        else: lines.append(line)
    return '\n'.join(lines)

_re_option = re.compile(r'^\s*#\|\s*([\w-]+)\s*:\s*(.*?)\s*$')

def prepare_cells(nb):
    "Apply Quarto's cell options and markdown conventions to a processed notebook, in place."
    cells = []
    for c in nb.cells:
        if c.cell_type == 'markdown':
            c.source = quarto_markdown(c.source)
            if c.source.strip(): cells.append(c)
            continue
        if c.cell_type != 'code': continue
        lines, opts = c.source.split('\n'), {}
        while lines and lines[0].lstrip().startswith('#|'):
            if m := _re_option.match(lines[0]): opts[m.group(1)] = m.group(2).strip('\'"')
            lines.pop(0)
        c.source = '\n'.join(lines).strip('\n')
        if opts.get('include') == 'false': continue
        if opts.get('output') == 'false': c.outputs = []
        if opts.get('echo') == 'false' or not c.source.strip():
            c.metadata.setdefault('transient', {})['remove_source'] = True
        if 'code-fold' in opts and opts['code-fold'] != 'false':
            c.metadata['code_fold'] = opts['code-fold']; c.metadata['code_summary'] = opts.get('code-summary', 'Code')
        c.outputs = [o for o in c.get('outputs', []) if not (o.get('output_type') == 'stream' and not ''.join(o.get('text', '')).strip())]
        for o in c.get('outputs', []):
            md = o.get('data', {}).get('text/markdown')
            if md is not None:
                o['data']['text/markdown'] = quarto_markdown(md if isinstance(md, str) else ''.join(md))
                o['data'].pop('text/plain', None)
        if c.source.strip() or c.get('outputs'): cells.append(c)
    nb.cells = cells
    return nb

def pandoc_id(text: str) -> str:
    "pandoc's auto_identifiers: lower case, punctuation except _-. removed, spaces to hyphens, up to the first letter dropped."
    s = re.sub(r'[^\w\s.-]', '', text.strip().lower())
    s = re.sub(r'\s+', '-', s)
    s = re.sub(r'^[^a-z]+', '', s)
    return s or 'section'

def _mathml(tex: str, display: bool):
    try: from latex2mathml.converter import convert
    except ImportError: return None
    try: return convert(tex.strip(), display='block' if display else 'inline')
    except Exception: return None

_re_math = re.compile(r'\$\$(.+?)\$\$|(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])', re.S)

def _render_math(soup, container):
    from bs4 import BeautifulSoup, NavigableString
    for node in list(container.find_all(string=_re_math)):
        if node.find_parent(['code', 'pre', 'script', 'style', 'math']) or not isinstance(node, NavigableString): continue
        text, pos, parts = str(node), 0, []
        for m in _re_math.finditer(text):
            ml = _mathml(m.group(1) or m.group(2), m.group(1) is not None)
            if ml is None: continue
            parts += [NavigableString(text[pos:m.start()]), BeautifulSoup(ml, 'html.parser')]
            pos = m.end()
        if not parts: continue
        parts.append(NavigableString(text[pos:]))
        for p in parts: node.insert_before(p)
        node.extract()

def postprocess(page_html: str, page: Path, pages: dict, site_url: str, nbs_rel: Path):
    """Heading ids, links, TOC and math for one rendered page (`page` relative to the site root).
    Returns the soup and nbdev's doc links in it, as (target page, anchor, <a> tag)."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(page_html, 'html.parser')
    main = soup.find('main', id='content')
    seen, toc = {}, []
    for h in main.find_all(re.compile(r'^h[1-6]$')):
        if h.find_parent(class_='title-block'): continue
        for a in h.find_all('a', class_='anchor-link'): a.decompose()
        base = pandoc_id(h.get_text(' ', strip=True))
        ident = base if base not in seen else f'{base}-{seen[base]}'
        seen[base] = seen.get(base, 0) + 1
        h['id'] = ident
        anchor = soup.new_tag('a', attrs={'class': 'anchor-link', 'href': f'#{ident}', 'aria-label': 'link to this section'})
        anchor.string = '¶'; h.append(anchor)
        if h.name in ('h2', 'h3'): toc.append((h.name, ident, h.get_text(' ', strip=True).rstrip('¶').strip()))
    page_dir = posixpath.dirname(page.as_posix())
    links = []
    for a in soup.find_all('a', href=True):
        href = a['href']
        target = None
        if site_url and href.startswith(site_url): target = href[len(site_url):].lstrip('/') or 'index.html'
        elif not re.match(r'^[a-z][\w+.-]*:|^#|^/', href):          # relative: maybe a notebook link
            path, _, frag = href.partition('#')
            if path.endswith('.ipynb'):
                nb = Path(posixpath.normpath(posixpath.join(nbs_rel.parent.as_posix(), path)))
                if nb in pages: target = pages[nb].as_posix() + (f'#{frag}' if frag else '')
        if target is not None:
            path, _, frag = target.partition('#')
            rel = posixpath.relpath(path, page_dir or '.')
            a['href'] = rel + (f'#{frag}' if frag else '')
            links.append((path, frag, a))
        if a.get_text(strip=True) == 'source' and 'github.com' in a['href']:
            a['class'] = a.get('class', []) + ['source-link']; a['target'] = '_blank'; a['rel'] = 'noopener'
    _render_math(soup, main)
    nav = soup.find('nav', id='toc')
    if toc:
        ul = soup.new_tag('ul')
        for level, ident, text in toc:
            li = soup.new_tag('li', attrs={'class': f'toc-{level}'}); a = soup.new_tag('a', href=f'#{ident}'); a.string = text
            li.append(a); ul.append(li)
        nav.append(ul)
    else: nav.decompose()
    return soup, links

def sidebar_entries(cfg) -> list:
    "nbs/sidebar.yml as a list of notebook paths (relative to nbs/) and (section, [entries]) tuples."
    import yaml
    y = yaml.safe_load((cfg.nbs_path/'sidebar.yml').read_text(encoding='utf-8')) or {}
    def conv(items):
        res = []
        for it in items or []:
            if isinstance(it, str): res.append(Path(it))
            elif isinstance(it, dict) and 'section' in it:
                res.append((str(it['section']), conv(it.get('contents')), Path(it['href']) if it.get('href') else None))
            elif isinstance(it, dict) and 'href' in it: res.append(Path(it['href']))
        return res
    return conv(y.get('website', {}).get('sidebar', {}).get('contents', []))

def sidebar_html(entries, pages: dict, titles: dict, current: Path) -> str:
    cur_dir = posixpath.dirname(pages[current].as_posix()) or '.'
    def link(nb):
        href = posixpath.relpath(pages[nb].as_posix(), cur_dir)
        cls = ' class="active" aria-current="page"' if nb == current else ''
        return f'<li><a href="{html.escape(href)}"{cls}>{html.escape(titles[nb])}</a></li>'
    def walk(items):
        out = ['<ul>']
        for it in items:
            if isinstance(it, Path):
                if it in pages: out.append(link(it))
            else:
                name, sub, href = it
                label = html.escape(name.replace('_', ' '))
                if href in pages: label = f'<a href="{html.escape(posixpath.relpath(pages[href].as_posix(), cur_dir))}">{label}</a>'
                out.append(f'<li class="section"><span class="section-title">{label}</span>{walk(sub)}</li>')
        out.append('</ul>')
        return ''.join(out)
    return walk(entries)

def render(cfg, processed: dict, out: Path, say=print):
    "Render the processed notebooks into a static site in `out`."
    import nbdev
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    from pygments.formatters import HtmlFormatter
    nbs = cfg.nbs_path
    docs, pages, titles, descs = {}, {}, {}, {}
    for src, proc in processed.items():
        rel = src.relative_to(nbs)
        nb = read_notebook(proc)
        fm = _frontmatter(nb)
        pages[rel] = rel.parent/fm['output-file'] if fm.get('output-file') else page_name(rel)
        titles[rel] = str(fm.get('title') or rel.stem)
        descs[rel] = str(fm.get('description') or '')
        docs[rel] = prepare_cells(nb)
    entries = sidebar_entries(cfg)
    listed = {p for p in _flatten(entries)}
    entries += [rel for rel in sorted(pages) if rel not in listed]         # a notebook newer than sidebar.yml
    exporter = HTMLExporter(template_name=TEMPLATE, extra_template_basedirs=[str(TEMPLATE_DIR)],
                            exclude_input_prompt=True, exclude_output_prompt=True, anchor_link_text='¶')
    site_url = f"{cfg.doc_host}{cfg.doc_baseurl}".rstrip('/') + '/'
    soups, doclinks = {}, []
    for rel, nb in docs.items():
        page = pages[rel]
        root = '../' * len(page.parent.parts)
        desc_html = markdown2html_mistune(descs[rel]) if descs[rel] else ''
        resources = {'page': dict(
            title=titles[rel], description=desc_html, description_text=descs[rel], root=root,
            site_title=cfg.get('title', cfg.lib_name), version=f"v{cfg.version}", repo_url=cfg.git_url,
            copyright=f"© {cfg.copyright}", source=f'nbs/{rel.as_posix()}', nbdev_version=nbdev.__version__,
            sidebar=sidebar_html(entries, pages, titles, rel))}
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        soups[page.as_posix()], links = postprocess(body, page, pages, site_url, rel)
        doclinks += links
    ids = {p: {t['id'] for t in soup.find_all(id=True)} for p, soup in soups.items()}
    dropped = set()
    for path, frag, a in doclinks:          # nbdev links every name in _modidx, private ones have no show_doc to land on
        if path in ids and frag and frag not in ids[path]: dropped.add(f'{path}#{frag}'); a.unwrap()
    if dropped: say(f"  unlinked {len(dropped)} doc links without a target (names with no show_doc): {', '.join(sorted(dropped))}")
    for page, soup in soups.items():
        dst = out/page; dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(str(soup), encoding='utf-8')
    (out/'pygments.css').write_text(HtmlFormatter(style='default').get_style_defs('.highlight'), encoding='utf-8')
    shutil.copy(TEMPLATE_DIR/'site.css', out/'site.css')
    if (nbs/'styles.css').exists(): shutil.copy(nbs/'styles.css', out/'styles.css')
    else: (out/'styles.css').write_text('', encoding='utf-8')
    for f in nbs.rglob('*'):                                               # images referenced from markdown
        r = f.relative_to(nbs)
        if f.is_file() and f.suffix.lower() in IMAGE_EXTS and not any(p[0] in '_.' for p in r.parts[:-1]):
            (out/r).parent.mkdir(parents=True, exist_ok=True); shutil.copy(f, out/r)
    (out/'.nojekyll').write_text('', encoding='utf-8')
    say(f'  rendered {len(docs)} pages')

def _flatten(entries):
    for it in entries:
        if isinstance(it, Path): yield it
        else:
            if it[2] is not None: yield it[2]
            yield from _flatten(it[1])

def check_links(out: Path) -> list[str]:
    "Links between the site's pages (and to files in it) whose page, file or anchor does not exist."
    from bs4 import BeautifulSoup
    from urllib.parse import unquote
    pages = {p.relative_to(out).as_posix(): BeautifulSoup(p.read_text(encoding='utf-8'), 'html.parser') for p in out.rglob('*.html')}
    ids = {p: {t['id'] for t in s.find_all(id=True)} for p, s in pages.items()}
    bad = []
    for page, soup in pages.items():
        for tag, attr in (('a', 'href'), ('link', 'href'), ('img', 'src')):
            for t in soup.find_all(tag, **{attr: True}):
                url = t[attr]
                if re.match(r'^[a-z][\w+.-]*:', url) or url.startswith('//'): continue      # external, data:
                path, _, frag = url.partition('#')
                target = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(path))) if path else page
                if not (out/target).exists(): bad.append(f'{page}: {tag} to missing {target}')
                elif frag and target in ids and frag not in ids[target]: bad.append(f'{page}: link to missing anchor {target}#{frag}')
    return bad

# ---------------------------------------------------------------------------------------------------------

def build(out=None, force=False, strict=False, quiet=False) -> Path:
    "The whole build; returns the site folder."
    from nbdev.config import get_config
    say = (lambda *a, **k: None) if quiet else (lambda *a, **k: print(*a, **k, flush=True))
    t0 = time.time()
    os.chdir(ROOT)
    cfg = get_config()
    out = Path(out) if out else cfg.doc_path
    for p in nbdev_config_files(cfg): say(f'  wrote {p.relative_to(ROOT)}')
    problems = []
    processed = process(cfg, ROOT/'.cache'/'docs_proc', force=force, say=say, problems=problems)
    if problems:
        msg = "Cells that nbdev_docs would execute whole (nbdev's FAQ: imports and other code in one cell):\n  " + '\n  '.join(problems)
        if strict: sys.exit(msg)
        print('WARNING: ' + msg, file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f'.{out.name}.'))
    try:
        render(cfg, processed, tmp, say=say)
        bad = check_links(tmp)
        if bad:
            msg = 'Broken internal links:\n  ' + '\n  '.join(bad)
            if strict: sys.exit(msg)
            print('WARNING: ' + msg, file=sys.stderr)
        old = out.with_name(f'.{out.name}.old')
        shutil.rmtree(old, ignore_errors=True)
        if out.exists(): out.replace(old)
        tmp.replace(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True); raise
    say(f'docs: {out} ({time.time() - t0:.0f}s); open {out/"index.html"}')
    return out

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', help='site folder (default: settings.ini doc_path, _docs)')
    ap.add_argument('--force', action='store_true', help='re-process every notebook, ignoring the cache')
    ap.add_argument('--strict', action='store_true', help='fail on cells nbdev_docs would fail on, and on broken links')
    ap.add_argument('--quiet', action='store_true')
    a = ap.parse_args(argv)
    build(a.out, a.force, a.strict, a.quiet)

if __name__ == '__main__': main()
