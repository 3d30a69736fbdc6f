"""The documentation site: tools/build_docs.py builds it offline, its internal links resolve, and headless
Chromium reads it as a person would (landing page -> the page that documents `refine_predict`).

The browser test needs Debian's `chromium` and `chromium-driver` (tools/install_chromium.sh) and the `selenium`
package; without them it is skipped with a message, unless BREFINE_REQUIRE_CHROMIUM=1, which makes it fail."""
import functools, inspect, os, re, shutil, subprocess, sys, threading, time
from http.server import ThreadingHTTPServer, SimpleHTTPRequestHandler
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'tools'))
import build_docs  # noqa: E402

CHROME_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
                '--disable-component-update', '--no-first-run', '--disable-dev-shm-usage', '--window-size=1400,1000']


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    "The site built by `tools/build_docs.py` into a temporary folder (processed notebooks are cached in .cache/)."
    out = tmp_path_factory.mktemp('docs')/'site'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'build_docs.py'), '--out', str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f'build_docs.py failed:\n{r.stdout}\n{r.stderr}'
    return out


def _pages_in_order():
    "(title, page) for each notebook, in nbs/sidebar.yml's order: what the sidebar must show."
    from nbdev.config import get_config
    cfg = get_config(path=ROOT)
    titles = {}
    for nb in build_docs.notebooks(cfg):
        first = next((c.source for c in build_docs.read_notebook(nb).cells if c.cell_type == 'markdown'), '')
        m = re.match(r'\s*#\s+(.+)', first)
        titles[nb.relative_to(cfg.nbs_path)] = m.group(1).strip() if m else nb.stem
    order = list(build_docs._flatten(build_docs.sidebar_entries(cfg)))
    return [(titles[p], build_docs.page_name(p).as_posix()) for p in order if p in titles]


def test_site_pages_and_links(site):
    "One page per notebook, in the sidebar's order; every internal link and anchor resolves; cell options applied."
    expected = _pages_in_order()
    assert expected[0][1] == 'index.html' and ('refine', 'refine.html') in expected
    for _, page in expected: assert (site/page).exists(), f'{page} missing'
    assert build_docs.check_links(site) == []
    inf = (site/'refine.html').read_text()
    assert 'def refine_predict(' in re.sub(r'<[^>]+>', '', inf)       # show_doc rendered (signature)
    assert 'id="refine_predict"' in inf                                # the anchor nbdev's doc links point to
    index = (site/'index.html').read_text()
    assert re.search(r'<a href="refine.html#refine_predict"><code>refine_predict</code></a>', index), \
        'the doc link `refine_predict` on the landing page should point to refine.html#refine_predict'
    for page in site.rglob('*.html'):
        text = page.read_text()
        code = ' '.join(re.findall(r'<div class="input_area">(.*?)</div>\s*</div>', text, re.S))
        assert '#|' not in code, f'{page.name}: a cell directive leaked into the page'
        assert 'show_doc(' not in code, f'{page.name}: a show_doc input cell is shown'
        assert 'nbdev_export' not in code and 'default_exp' not in code, f'{page.name}: a #| hide cell is shown'
    assert any('src="data:image/png;base64,' in p.read_text() for p in site.rglob('*.html')), 'no figure embedded'


def _find(names, *extra):
    for n in names:
        if p := shutil.which(n): return p
    for p in extra:
        if p and Path(p).exists(): return str(p)


def _skip_or_fail(msg):
    if os.environ.get('BREFINE_REQUIRE_CHROMIUM'): pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture
def browser(tmp_path):
    try: from selenium import webdriver
    except ImportError: _skip_or_fail('selenium is not installed: pip install selenium (a dev requirement)')
    chrome = _find(['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'])
    driver = _find(['chromedriver'], '/usr/lib/chromium/chromedriver',
                   os.environ.get('CHROMEWEBDRIVER') and Path(os.environ['CHROMEWEBDRIVER'])/'chromedriver')
    if not chrome or not driver:
        _skip_or_fail('headless Chromium is not installed: run `sudo bash tools/install_chromium.sh` '
                      '(Debian packages chromium and chromium-driver)')
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for f in CHROME_FLAGS + [f'--user-data-dir={tmp_path/"chrome-profile"}']: opts.add_argument(f)
    opts.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture
def server(site):
    "The site served by http.server on 127.0.0.1 (a free port), in a thread."
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True); t.start()
    yield f'http://127.0.0.1:{httpd.server_address[1]}/'
    httpd.shutdown(); httpd.server_close()


def _screenshot(driver, path: Path):
    driver.save_screenshot(str(path))
    docs = ROOT/'_docs'
    if docs.is_dir():                                                 # a copy next to `make docs`'s site
        (docs/'_screenshots').mkdir(exist_ok=True); shutil.copy(path, docs/'_screenshots'/path.name)
    return path


def test_browser_follows_doc_link_to_refine_predict(browser, site, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from brefine.refine import refine_predict
    d = browser
    d.get(server + 'index.html')
    assert 'brefine' in d.title

    # the sidebar: every page, in notebook order, on the left of the content, the current page marked
    sidebar, content = d.find_element(By.ID, 'sidebar'), d.find_element(By.ID, 'content')
    shown = [a.text for a in sidebar.find_elements(By.CSS_SELECTOR, 'a')]
    assert shown == [t for t, _ in _pages_in_order()]
    assert sidebar.is_displayed() and sidebar.location['x'] + sidebar.size['width'] <= content.location['x']
    assert sidebar.find_element(By.CSS_SELECTOR, 'a.active').text == 'brefine'
    # markdown tables are rendered as tables, code is highlighted (keywords coloured unlike plain text)
    rows = d.find_elements(By.CSS_SELECTOR, '#content table tbody tr')
    assert len(rows) >= 5 and all(r.is_displayed() for r in rows[:3])
    kw = d.find_elements(By.CSS_SELECTOR, '#content .highlight .kn, #content .highlight .k')
    assert kw and kw[0].value_of_css_property('color') != content.value_of_css_property('color')
    # the stylesheets loaded (the layout above depends on them): no failed request in the console
    _screenshot(d, tmp_path/'landing.png')

    # follow the doc link that nbdev made of `refine_predict` on the landing page
    link = d.find_element(By.XPATH, "//main//a[normalize-space()='refine_predict']")
    assert link.get_attribute('href').endswith('refine.html#refine_predict')
    d.execute_script('arguments[0].scrollIntoView({block: "center"})', link)
    link.click()
    WebDriverWait(d, 30).until(lambda d: 'refine.html' in d.current_url)
    assert d.current_url.endswith('refine.html#refine_predict')
    assert d.find_element(By.CSS_SELECTOR, '#sidebar a.active').text == 'refine'
    target = d.find_element(By.ID, 'refine_predict')
    top = d.execute_script('return arguments[0].getBoundingClientRect().top', target)
    assert 0 <= top < d.execute_script('return window.innerHeight'), 'the browser did not scroll to the anchor'

    # refine_predict's signature and docstring, as show_doc rendered them
    sig = next(p for p in d.find_elements(By.CSS_SELECTOR, '#content pre') if p.text.startswith('def refine_predict('))
    assert sig.is_displayed()
    for name in inspect.signature(refine_predict).parameters: assert re.search(rf'\b{name}\b', sig.text), name
    doc = sig.find_element(By.XPATH, 'following::p[1]')
    assert doc.text.strip() == inspect.getdoc(refine_predict).replace('`', '').strip()
    d.execute_script('arguments[0].scrollIntoView({block: "center"})', sig)
    time.sleep(0.2)
    _screenshot(d, tmp_path/'refine_predict.png')

    failed = [e['message'] for e in d.get_log('browser') if e['level'] == 'SEVERE']
    assert not failed, f'the browser reported errors: {failed}'
    assert (tmp_path/'landing.png').stat().st_size > 10_000 and (tmp_path/'refine_predict.png').stat().st_size > 10_000
