"""The built site in a real browser: every page of ``_build/html`` opened in headless Chromium, offline.

Serves ``_build/html`` on 127.0.0.1 (a free port), drives one headless Chromium through the DevTools
protocol over a pipe (no extra Python package), and fails when a page

- leaves raw TeX (``$$``, ``\\[``, ``\\(``, ``\\begin``) in the rendered text, has a formula MathJax did
  not typeset, or a TeX error;
- has a broken internal link, anchor or image, or requests anything that is not on the site
  (every other host is unreachable for the browser: the site must work offline);
- has a saved widget that did not render, or a widget that rendered as an error;
- shows a Python traceback (outside cells tagged ``raises-exception``), throws a JavaScript error or
  writes an error to the console (including failed requests, e.g. a missing favicon);
- has a figure without alt text, a transparent figure (unreadable on the dark theme), a figure
  shown twice by one cell, or a figure printed as text (``<Figure size ...>``).

Every page is also opened at 390 px as on a phone (the page must not be wider than the screen, and
no table of the text may scroll sideways), in the dark theme, and as printed (sidebars hidden,
code and outputs wrapped so that nothing is cut at the right edge); none of these may write an
error to the console either.

The build must have no execution-error reports (``_build/html/reports/``), and every chapter must
offer its executed notebook for download. Screenshots of every page go to ``_build/screenshots/``,
for a person to look at: ``<page>.png`` (1280 px, light) and ``phone__<page>.png`` (390 px); with
``CONVRES_SCREENSHOTS=all`` also ``dark__<page>.png`` and ``print__<page>.png`` (the print layout, A4
width); their checks run either way (the two screenshots cost about a second a page, so ``make
test`` leaves them out).

Every explorer (``convres.explorers``, drawn by ``web/explorer.js``) is played as a reader would:
each slider is moved with the keyboard (End, Home, arrows) and one with the mouse, and after every
move the drawn curves (the SVG path data and markers of every chart, mapped back through the
chart's axes), the legend, the readout and the slider's value must change and equal the data the
page embeds for that position; the explorer must also fit a 390 px wide phone screen. A page with
saved ipywidgets next to MathJax 3 must not throw (the MathJax 2 shim of ``web/mathjax2-shim.js``).

Run it after building the book (``make browser``; ``make test`` runs it after the strict build).
Without a built site or a Chromium it is skipped with the reason, unless ``CONVRES_SITE_REQUIRED=1``
(set by the Makefile), which turns the skip into a failure. ``CHROMIUM=/path/to/chrome`` picks
the browser; ``CONVRES_SITE_DIR`` another built site (default ``_build/html``).
``CONVRES_SITE_SHARD=K/N`` checks only every N-th page from the K-th on (and the explorer pages
likewise), the checks of the whole site in shard 0 only: ``make browser`` runs two shards at once,
one Chromium per core.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()
SHOTS = SITE.parent / "screenshots"
ALL_SHOTS = os.environ.get("CONVRES_SCREENSHOTS", "") == "all"  # the dark and print ones too
REQUIRED = os.environ.get("CONVRES_SITE_REQUIRED") == "1"
WIDTH, HEIGHT = 1280, 1400
#: The longest an API reference page may be, in px at WIDTH (about 25,000 px at 1400 px: measured,
#: the pages are 8-9% taller at 1280 px); longer ones are split (API_PAGES in web/convres_site.py).
MAX_API_HEIGHT = 27_000
HEIGHTS: dict[str, int] = {}  # page -> height at WIDTH px, written to _build/page-heights.json
MAX_SHOT_HEIGHT = 16000  # Chromium cannot capture taller images in one piece
SKIP_DIRS = {"_static", "_sources", "_images", "reports", "vendor"}


def _pages() -> list[str]:
    if not (SITE / "index.html").exists():
        return []
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if not SKIP_DIRS.intersection(p.relative_to(SITE).parts))


def _browser() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome",
                 "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _skip_or_fail(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason} (CONVRES_SITE_REQUIRED=1 makes this a failure)")
    pytest.skip(reason)


def _shard() -> tuple[int, int]:
    """``(K, N)`` of ``CONVRES_SITE_SHARD=K/N`` (``(0, 1)``, the whole site, when unset)."""
    value = os.environ.get("CONVRES_SITE_SHARD", "0/1")
    m = re.fullmatch(r"(\d+)/(\d+)", value)
    if not m or not int(m[1]) < int(m[2]):
        raise pytest.UsageError(f"CONVRES_SITE_SHARD={value!r}: expected K/N with 0 <= K < N, e.g. 0/2.")
    return int(m[1]), int(m[2])


SHARD = _shard()
ALL_PAGES = _pages()
PAGES = ALL_PAGES[SHARD[0]::SHARD[1]]
#: A check of the whole site (not of one page): run by shard 0 only.
whole_site = pytest.mark.skipif(SHARD[0] != 0, reason="a check of the whole site: shard 0 runs it")


# --------------------------------------------------------------------------- the browser
class Chromium:
    """Headless Chromium driven through the DevTools protocol on ``--remote-debugging-pipe``."""

    FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
             "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--mute-audio", "--remote-debugging-pipe",
             # offline: every host but the local server is unreachable
             "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
             f"--window-size={WIDTH},{HEIGHT}"]

    def __init__(self, exe: str):
        self.profile = tempfile.mkdtemp(prefix="convres-chromium-")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)

        def child_fds():  # the protocol wants fd 3 (commands in) and fd 4 (replies out)
            os.dup2(hi[0], 3)
            os.dup2(hi[1], 4)

        self.proc = subprocess.Popen(
            [exe, *self.FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=child_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        for fd in hi:
            os.close(fd)
        self._id = 0
        self._replies: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        with os.fdopen(self._r, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                buf += chunk
                *messages, buf = buf.split(b"\0")
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg and msg["id"] in self._replies:
                        self._replies[msg["id"]].put(msg)
                    else:
                        self.events.put(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30) -> dict:
        with self._lock:
            self._id += 1
            mid = self._id
            self._replies[mid] = queue.Queue()
            msg = {"id": mid, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            os.write(self._w, json.dumps(msg).encode() + b"\0")
        try:
            reply = self._replies[mid].get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"Chromium did not answer {method} within {timeout} s") from None
        finally:
            self._replies.pop(mid, None)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        shutil.rmtree(self.profile, ignore_errors=True)


class Tab:
    """One page of the browser, reused for every URL."""

    def __init__(self, browser: Chromium):
        self.b = browser
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.call("Target.attachToTarget",
                                    {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})

    def call(self, method, params=None, timeout=30):
        return self.b.call(method, params, session=self.session, timeout=timeout)

    def _drain(self) -> list[dict]:
        out = []
        while True:
            try:
                out.append(self.b.events.get_nowait())
            except queue.Empty:
                return out

    def open(self, url: str, timeout: float = 30) -> list[dict]:
        """Navigate, wait for the load event, return the protocol events of this page load."""
        self._drain()
        self.call("Page.navigate", {"url": url})
        events = []
        while True:
            msg = self.b.events.get(timeout=timeout)
            events.append(msg)
            if msg.get("method") == "Page.loadEventFired" and msg.get("sessionId") == self.session:
                return events

    def evaluate(self, expression: str, timeout: float = 30):
        res = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True, "timeout": timeout * 1000},
                        timeout=timeout + 5)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot_element(self, element_id: str, path: Path, width: int = WIDTH):
        """A screenshot of one element, scrolled to the top of the viewport (which must be tall
        enough to hold it): drawn as a reader sees it, without resizing the page."""
        top, h = self.evaluate(f"""(() => {{ const e = document.getElementById({json.dumps(element_id)});
            e.scrollIntoView(); const r = e.getBoundingClientRect();
            return [r.top + scrollY, r.height]; }})()""")
        clip = {"x": 0, "y": max(0, top - 8), "width": width, "height": h + 16, "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip}, timeout=60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def screenshot_page(self, path: Path, height: int, width: int = WIDTH, mobile: bool = False):
        """The whole page (up to MAX_SHOT_HEIGHT) with the viewport made that tall, which draws it
        as a screen does (a capture beyond the viewport misplaces the dark theme's layout)."""
        height = min(height, MAX_SHOT_HEIGHT)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        self.evaluate("new Promise(r => requestAnimationFrame(() => setTimeout(r, 100)))")
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": {
            "x": 0, "y": 0, "width": width, "height": height, "scale": 1}}, timeout=60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))


# What the page reports about itself once MathJax and the widget manager are done.
INSPECT = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  if (window.convresExplorersReady) await window.convresExplorersReady;
  const views = [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')];
  const area = v => { const a = v.previousElementSibling;
                      return a && a.classList.contains('widget-subarea') ? a : null; };
  const rendered = v => { const a = area(v);
                          return !!a && a.childElementCount > 0 && a.getBoundingClientRect().height > 0; };
  for (let t = 0; t < 100 && views.some(v => !rendered(v)); t++) await sleep(100);
  await Promise.all([...document.images].map(i => i.complete ? null : i.decode().catch(() => null)));

  const main = document.querySelector('main') || document.body;
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .widget-subarea, .sig';
  const tex = [];
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  const rawTex = /\$\$|\\\[|\\\(|\\begin\{|\$[^$\n]*[\\^_][^$\n]*\$/;
  for (let n; (n = walker.nextNode()); ) {
    if (n.parentElement.closest(skip)) continue;
    if (rawTex.test(n.textContent)) tex.push(n.textContent.trim().slice(0, 120));
  }
  const untypeset = [...main.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container'))
                       .map(e => e.textContent.slice(0, 80));
  const texErrors = [...main.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent);

  const brokenImages = [...document.images].filter(i => !i.complete || i.naturalWidth === 0)
                         .map(i => i.getAttribute('src'));
  const figures = [...main.querySelectorAll('img')].filter(i => !i.closest('.widget-subarea, .sidebar-primary-items__start'));
  const noAlt = figures.filter(i => { const a = (i.getAttribute('alt') || '').trim();
                                      return !a || /\.(png|jpe?g|svg|gif)$/i.test(a); })
                       .map(i => i.getAttribute('src'));
  const transparent = [];
  for (const i of figures) {
    if (!/\.png($|\?)/i.test(i.getAttribute('src') || '') || !i.naturalWidth) continue;
    const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;
    const g = c.getContext('2d'); g.drawImage(i, 0, 0);
    const w = c.width - 1, h = c.height - 1;
    const corners = [[0, 0], [w, 0], [0, h], [w, h], [w >> 1, h >> 1]];
    if (corners.some(([x, y]) => g.getImageData(x, y, 1, 1).data[3] < 250)) transparent.push(i.getAttribute('src'));
  }

  const widgets = { total: views.length, blank: views.filter(v => !rendered(v)).length,
                    errors: [...main.querySelectorAll('.jupyter-widgets-error-widget')].length };
  const tracebacks = [...main.querySelectorAll('.output.traceback, .output.error')]
                       .filter(e => !e.closest('.tag_raises-exception')).map(e => e.textContent.slice(0, 300));
  const tbText = [...main.querySelectorAll('.cell_output, .output')]
                   .filter(e => !e.closest('.tag_raises-exception') && /Traceback \(most recent call last\)/.test(e.textContent))
                   .map(e => e.textContent.slice(0, 300));
  const textFigures = [...main.querySelectorAll('.cell_output')]
                        .filter(e => /<Figure size \d+x\d+ with/.test(e.textContent))
                        .map(e => e.textContent.trim().slice(0, 80));
  const doubled = [...main.querySelectorAll('.cell')].flatMap(c => {
    // a linked thumbnail (the report's claims table) may repeat; a drawn figure may not
    const srcs = [...c.querySelectorAll('.cell_output img')].filter(i => !i.closest('a'))
                   .map(i => i.getAttribute('src'));
    return srcs.filter((x, k) => srcs.indexOf(x) !== k); });
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const downloads = [...document.querySelectorAll('a[href$=".ipynb"]')].map(a => a.getAttribute('href'));
  return { title: document.title, height: document.documentElement.scrollHeight,
           mathjax: !!window.MathJax, mathCount: main.querySelectorAll('.math').length,
           typeset: main.querySelectorAll('mjx-container').length,
           tex, untypeset, texErrors, brokenImages, noAlt, transparent, widgets,
           tracebacks: tracebacks.concat(tbText), textFigures, doubled, links, downloads,
           figures: figures.length };
})()
"""


# --------------------------------------------------------------------------- fixtures
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extra: dict[str, bytes] = {}  # pages a test serves from memory (path -> HTML)

    def do_GET(self):
        body = self.extra.get(urlsplit(self.path).path)
        if body is None:
            return super().do_GET()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    if not PAGES:
        _skip_or_fail(f"no built site at {SITE} (build it first: make book, or make strict-build)")
    if SHARD[1] == 1:  # the screenshots of this run only (shards: the Makefile empties the folder)
        shutil.rmtree(SHOTS, ignore_errors=True)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tab(site):
    exe = _browser()
    if exe is None:
        _skip_or_fail("no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)")
    browser = Chromium(exe)
    try:
        yield Tab(browser)
    finally:
        browser.close()


@functools.cache
def _ids(path: Path) -> frozenset:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r'\sid="([^"]+)"', text)) | frozenset(re.findall(r'\sname="([^"]+)"', text))


def _check_link(url: str, base: str) -> str | None:
    """None if ``url`` (on the local server) points at an existing file and anchor, else why not."""
    parts = urlsplit(url)
    rel = unquote(parts.path[len(urlsplit(base).path):])
    target = SITE / rel
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{url}: no such file {target.relative_to(SITE) if SITE in target.parents else target}"
    if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
        return f"{url}: no element with id {parts.fragment!r} in {target.relative_to(SITE)}"
    return None


def _console_problems(events: list[dict], site: str) -> list[str]:
    """Everything a page load or an interaction must not produce: a request outside the site, a
    failed request, an uncaught JavaScript error, an error written to the console."""
    problems = []
    for msg in events:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if url.startswith(("http:", "https:")) and not url.startswith(site):
                problems.append(f"request outside the site (works only online): {url}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            problems.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        elif method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            problems.append("JavaScript error: " + (d.get("exception", {}).get("description") or d["text"])[:300])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            problems.append(f"console.{params['type']}: {args[:300]}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            e = params["entry"]
            problems.append(f"console error ({e.get('source')}): {e.get('text', '')[:200]} "
                            f"{e.get('url', '')}")
    return problems


# --------------------------------------------------------------------------- the tests
@whole_site
def test_no_execution_error_reports():
    if not PAGES:
        _skip_or_fail(f"no built site at {SITE} (build it first)")
    reports = sorted((SITE / "reports").glob("*.log")) if (SITE / "reports").is_dir() else []
    # reports/<doc>.err.log of an earlier build stay behind; a page written after it is fixed
    page = lambda r: SITE / (r.name.removesuffix(".err.log") + ".html")  # noqa: E731
    reports = [r for r in reports if not page(r).is_file() or page(r).stat().st_mtime <= r.stat().st_mtime]
    assert not reports, "execution errors during the build:\n" + "\n".join(
        f"--- {r.name}\n{r.read_text(errors='replace')[-2000:]}" for r in reports)


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_page(page, site, tab):
    """At WIDTH px (a desktop screen): every formula typeset, every figure drawn with alt text, every
    saved widget rendered, every link inside the site alive, nothing to the console, no page of the
    API reference taller than MAX_API_HEIGHT. Screenshot ``<page>.png``; the height of every page is
    written to ``_build/page-heights.json`` (``page-heights-K.json`` by shard K) and printed."""
    redirect = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', (SITE / page).read_text())
    if redirect:  # index.html only forwards to the first page
        assert _check_link(site + redirect.group(1), site) is None, f"{page} forwards to a missing page"
        return
    events = tab.open(site + page)
    info = tab.evaluate(INSPECT, timeout=40)
    events += tab._drain()  # what happened after the load event (MathJax, explorers) counts too
    try:  # the viewport made as tall as the page: a capture beyond it can come out shifted sideways
        tab.screenshot_page(SHOTS / page.replace("/", "__").replace(".html", ".png"), info["height"])
    finally:
        _reset(tab)
    HEIGHTS[page] = info["height"]
    out = SITE.parent / ("page-heights.json" if SHARD[1] == 1 else f"page-heights-{SHARD[0]}.json")
    out.write_text(json.dumps(dict(sorted(HEIGHTS.items())), indent=1))
    print(f"\n{page}: {info['height']} px at {WIDTH} px")

    problems = []
    if _is_api(page) and info["height"] > MAX_API_HEIGHT:
        problems.append(f"{info['height']:,} px tall at {WIDTH} px, more than {MAX_API_HEIGHT:,} px: "
                        "split it (API_PAGES in web/convres_site.py)")
    if info["mathCount"] and not info["mathjax"]:
        problems.append(f"{info['mathCount']} formulas but MathJax did not load")
    for key, what in [("tex", "raw TeX left in the text"), ("untypeset", "formula not typeset"),
                      ("texErrors", "TeX error"), ("brokenImages", "broken image"),
                      ("noAlt", "figure without alt text (give the cell `mystnb: image: alt:`)"),
                      ("transparent", "transparent figure, unreadable in dark mode (white face)"),
                      ("tracebacks", "Python traceback"),
                      ("textFigures", "figure printed as text, not drawn (MPLBACKEND=Agg in the kernel?)"),
                      ("doubled", "figure shown twice in one cell (plt.close(fig) before returning it)")]:
        problems += [f"{what}: {x}" for x in info[key]]
    w = info["widgets"]
    if w["blank"]:
        problems.append(f"{w['blank']} of {w['total']} saved widgets did not render")
    if w["errors"]:
        problems.append(f"{w['errors']} widgets rendered as errors")
    problems += [p for link in info["links"] if link.startswith(site)
                 for p in [_check_link(link, site)] if p]

    problems += _console_problems(events, site)
    assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


@whole_site
def test_notebook_downloads_are_executed(site):
    """Every chapter offers its executed notebook (.ipynb with outputs) for download."""
    chapters = [p for p in ALL_PAGES if (ROOT / "book" / p.replace(".html", ".md")).is_file()
                and "kernelspec" in (ROOT / "book" / p.replace(".html", ".md")).read_text()[:500]]
    assert chapters, "no notebook chapters found in the built site"
    for page in chapters:
        nb_path = SITE / "_sources" / page.replace(".html", ".ipynb")
        assert nb_path.is_file(), f"{page}: no executed notebook {nb_path.relative_to(SITE)} to download"
        assert f'_sources/{page.replace(".html", ".ipynb")}' in (SITE / page).read_text(), \
            f"{page}: the page does not link its .ipynb download"
        nb = json.loads(nb_path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"
                and "skip-execution" not in c.get("metadata", {}).get("tags", [])]
        assert all(c.get("execution_count") for c in code), f"{page}: the .ipynb has unexecuted cells"
        assert any(c.get("outputs") for c in code), f"{page}: the .ipynb has no outputs"


@whole_site
def test_site_javascript_is_pinned():
    """The JavaScript the site serves is pinned to exact versions, and the lock file agrees."""
    web = ROOT / "web"
    wanted = json.loads((web / "package.json").read_text())["dependencies"]
    locked = json.loads((web / "package-lock.json").read_text())["packages"]
    assert set(wanted) == {"mathjax", "requirejs", "@jupyter-widgets/html-manager", "vega", "vega-lite"}
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: {version!r} is not an exact version"
        assert locked[f"node_modules/{name}"]["version"] == version, f"{name}: lock file differs"
        assert locked[f"node_modules/{name}"]["integrity"].startswith("sha512-")


# --------------------------------------------------------------------------- the explorers
EXPLORER_MARK = 'class="convres-explorer'
ALL_EXPLORER_PAGES = [p for p in ALL_PAGES if EXPLORER_MARK in (SITE / p).read_text(errors="replace")]
EXPLORER_PAGES = ALL_EXPLORER_PAGES[SHARD[0]::SHARD[1]]
PHONE = 390

# What an explorer shows now: the raw pixel coordinates of every line (SVG path data) and marker of
# every chart, the scales' domains and ranges, the legend, the readout and the sliders.
READ_EXPLORER = r"""
(async (id) => {
  if (!(window.convresExplorers || {})[id] && window.convresExplorersReady) await window.convresExplorersReady;
  const ex = window.convresExplorers[id];
  await ex.idle();
  const root = document.getElementById(id);
  const num = /-?\d*\.?\d+(?:e[-+]?\d+)?/gi;
  const charts = {};
  for (const [name, view] of Object.entries(ex.views)) {
    const box = root.querySelector(`.cx-chart[data-chart="${name}"]`);
    const path = p => {
      const v = (p.getAttribute('d').match(num) || []).map(Number);
      const pts = [];
      for (let i = 0; i + 1 < v.length; i += 2) pts.push([v[i], v[i + 1]]);
      return {d: p.getAttribute('d'), pts};
    };
    // the current position's lines and markers; the ghost trace (previous position) apart
    const lines = [...box.querySelectorAll('.mark-line:not(.ghost_marks) path')].map(path);
    const ghost = [...box.querySelectorAll('.mark-line.ghost_marks path')].map(path);
    const symbols = [...box.querySelectorAll('.mark-symbol:not(.hover_points_marks) path')]
      .filter(p => !p.closest('.role-legend'))
      .map(p => /translate\(([-\d.e]+),\s*([-\d.e]+)\)/.exec(p.getAttribute('transform') || ''))
      .map(m => m ? [Number(m[1]), Number(m[2])] : null);
    const legend = [...box.querySelectorAll('.role-legend-label text')].map(t => t.textContent);
    const sx = view.scale('x'), sy = view.scale('y');
    const svg = box.querySelector('svg');
    charts[name] = {lines, ghost, symbols, legend, x: [sx.domain(), sx.range(), sx.type],
                    y: [sy.domain(), sy.range(), sy.type], width: svg ? svg.getBoundingClientRect().width : 0};
  }
  const readout = [...root.querySelectorAll('.cx-readout .cx-line')].map(l => ({
    text: l.textContent,
    numbers: [...l.querySelectorAll('.cx-num')].map(s => [Number(s.dataset.value), s.textContent])}));
  const sliders = [...root.querySelectorAll('input[type=range]')].map(i => ({
    name: i.dataset.control, index: Number(i.value), shown: i.parentElement.querySelector(
      `output[for="${i.id}"]`).textContent, label: i.getAttribute('aria-valuetext')}));
  // the overview panel: the text of every cell and where the outline is (pixel centres)
  let overview = null;
  const obox = root.querySelector('.cx-overview');
  if (obox) {
    const centre = e => { const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; };
    const cells = [...obox.querySelectorAll('.cells_text_marks text')].map(t => [t.textContent, centre(t)]);
    const outline = [...obox.querySelectorAll('.current_marks path')].map(centre);
    overview = {cells, outline, width: obox.querySelector('svg') ? obox.querySelector('svg').getBoundingClientRect().width : 0};
  }
  const pressed = [...root.querySelectorAll('button.cx-preset')].filter(b => b.getAttribute('aria-pressed') === 'true')
    .map(b => b.dataset.preset);
  return {position: root.dataset.position, ghost: root.dataset.ghost || null, charts, readout, sliders,
          overview, pressed, look: (root.querySelector('.cx-look') || {}).textContent || '',
          ghostNote: (root.querySelector('.cx-ghost-note') || {}).textContent || '',
          overflow: root.scrollWidth - root.clientWidth, width: root.getBoundingClientRect().width};
})
"""


def _explorers_of(page: str) -> list[dict]:
    """The data each explorer of a built page embeds (the JSON that explorer.js reads)."""
    text = (SITE / page).read_text(encoding="utf-8")
    found = re.findall(r'<div class="convres-explorer[^"]*" id="([^"]+)".*?'
                       r'<script type="application/json" class="cx-data">(.*?)</script>', text, re.S)
    return [{"id": i, "data": json.loads(raw.replace("<\\/", "</")), "bytes": len(raw.encode())}
            for i, raw in found]


def _pixels(value: float, axis) -> float:
    """``value`` mapped to pixels by a chart axis ``[domain, range, type]`` as the page reports it."""
    (d0, d1), (r0, r1), kind = axis
    if kind == "log":
        import math
        value, d0, d1 = math.log(value), math.log(d0), math.log(d1)
    return r0 + (value - d0) / (d1 - d0) * (r1 - r0)


def _check_explorer_state(state: dict, data: dict, key: str) -> list[str]:
    """Differences between what the explorer shows and what its data hold for position ``key``."""
    from convres.vega import readout_text, series_rows
    rec, problems = data["positions"][key], []
    if state["position"] != key:
        return [f"the explorer shows position {state['position']!r}, the sliders are at {key!r}"]
    for k, (c, s) in enumerate(zip(data["controls"], state["sliders"])):
        i = int(key.split(",")[k])
        if s["shown"] != c["text"][i]:
            problems.append(f"slider {c['name']} shows {s['shown']!r}, its value is {c['text'][i]!r}")
    for chart in data["charts"]:
        got, name = state["charts"][chart["name"]], chart["name"]
        enc = chart["spec"]["layer"][0]["encoding"]
        for axis, spec_axis in (("x", enc["x"]), ("y", enc["y"])):
            if [float(v) for v in got[axis][0]] != [float(v) for v in spec_axis["scale"]["domain"]]:
                problems.append(f"{name}: {axis} axis domain {got[axis][0]}, the data say "
                                f"{spec_axis['scale']['domain']}")
        expected = [(s["key"], rows) for s in chart["series"] if (rows := series_rows(s, rec, chart.get("floor")))]
        px = [[(_pixels(r["x"], got["x"]), _pixels(r["y"], got["y"])) for r in rows] for _, rows in expected]
        drawn = [line["pts"] for line in got["lines"]]
        if len(drawn) != len(px):
            problems.append(f"{name}: {len(drawn)} lines drawn, the data have {len(px)} series")
        for (skey, _), want in zip(expected, px):
            if not any(len(d) == len(want) and all(abs(a - c) < 0.05 and abs(b - e) < 0.05
                                                    for (a, b), (c, e) in zip(d, want)) for d in drawn):
                problems.append(f"{name}: no drawn line matches the series {skey!r} of position {key}")
        want_marks = sorted((round(x, 1), round(y, 1)) for rows, pts in zip([r for _, r in expected], px)
                            for r, (x, y) in zip(rows, pts) if r["m"])
        got_marks = sorted((round(x, 1), round(y, 1)) for x, y in got["symbols"] if x is not None)
        if len(want_marks) != len(got_marks) or any(abs(a - c) > 0.15 or abs(b - d) > 0.15
                                                    for (a, b), (c, d) in zip(want_marks, got_marks)):
            problems.append(f"{name}: markers differ from the data ({len(got_marks)} drawn, "
                            f"{len(want_marks)} expected)")
        labels = rec.get("labels", {})
        want_legend = [labels.get(s["key"], s["key"]) for s in chart["series"]]
        if got["legend"] != want_legend:
            problems.append(f"{name}: legend {got['legend']}, the data say {want_legend}")
    problems += _check_ghost_and_overview(state, data)
    want_text = readout_text(rec["readout"])
    if [line["text"] for line in state["readout"]] != want_text:
        problems.append(f"readout {[line['text'] for line in state['readout']]}, the data say {want_text}")
    want_numbers = [p[0] if isinstance(p, list) else p for line in rec["readout"] for p in line
                    if not isinstance(p, str)]
    got_numbers = [v for line in state["readout"] for v, _ in line["numbers"]]
    if got_numbers != want_numbers:
        problems.append(f"readout numbers {got_numbers}, the data say {want_numbers}")
    return problems


def _check_ghost_and_overview(state: dict, data: dict) -> list[str]:
    """The ghost trace is the previous position's series, faint; the overview shows every cell's
    text and outlines the current one; the pressed preset is the one at this position."""
    from convres.vega import overview_rows, series_rows
    problems, key = [], state["position"]
    for chart in data["charts"]:
        got = state["charts"][chart["name"]]
        if state["ghost"] is None:
            if got["ghost"]:
                problems.append(f"{chart['name']}: a ghost trace with no previous position")
            continue
        old = data["positions"][state["ghost"]]
        want = [[(_pixels(r["x"], got["x"]), _pixels(r["y"], got["y"])) for r in rows]
                for s in chart["series"] if (rows := series_rows(s, old, chart.get("floor")))]
        if len(got["ghost"]) != len(want) or not all(
                any(len(d["pts"]) == len(w) and all(abs(a - c) < 0.05 and abs(b - e) < 0.05
                                                    for (a, b), (c, e) in zip(d["pts"], w)) for d in got["ghost"])
                for w in want):
            problems.append(f"{chart['name']}: the ghost trace is not the previous position {state['ghost']}")
    if state["ghost"] and state["ghost"] == key:
        problems.append("the ghost trace is the current position")
    if data.get("overview"):
        index = [int(i) for i in key.split(",")]
        rows = overview_rows(data["overview"], data["controls"], data["positions"], index)
        got = state["overview"]
        if got is None:
            return problems + ["no overview panel drawn"]
        if sorted(t for t, _ in got["cells"]) != sorted(r["t"] for r in rows):
            problems.append(f"overview: cell texts {sorted(t for t, _ in got['cells'])}, the data say "
                            f"{sorted(r['t'] for r in rows)}")
        current = [r for r in rows if r["cur"]]
        cur_text = [c for t, c in got["cells"] if t == current[0]["t"]]
        if len(got["outline"]) != 1 or not any(abs(c[0] - got["outline"][0][0]) < 1 and
                                               abs(c[1] - got["outline"][0][1]) < 1 for c in cur_text):
            problems.append(f"overview: the outline is not on the current cell {key}")
    want_pressed = [p["id"] for p in data.get("presets", []) if p["key"] == key]
    if state["pressed"] != want_pressed:
        problems.append(f"presets pressed {state['pressed']}, at this position {want_pressed}")
    return problems


def _key_press(tab: Tab, key: str) -> None:
    codes = {"ArrowRight": 39, "ArrowLeft": 37, "Home": 36, "End": 35}
    for kind in ("keyDown", "keyUp"):
        tab.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                            "windowsVirtualKeyCode": codes[key],
                                            "nativeVirtualKeyCode": codes[key]})


def _click_slider(tab: Tab, input_id: str, index: int, count: int) -> None:
    """A mouse click on the slider's track where position ``index`` of ``count`` lies."""
    box = tab.evaluate(f"""(() => {{ const i = document.getElementById({json.dumps(input_id)});
        i.scrollIntoView({{block: 'center'}}); const r = i.getBoundingClientRect();
        return [r.left, r.top, r.width, r.height]; }})()""")
    thumb = 16  # Chromium's thumb: the track's ends are half a thumb inside the box
    x = box[0] + thumb / 2 + (box[2] - thumb) * index / (count - 1)
    y = box[1] + box[3] / 2
    for kind in ("mousePressed", "mouseReleased"):
        tab.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                              "clickCount": 1})


def _wait_position(tab: Tab, explorer_id: str, key: str) -> dict:
    for _ in range(100):
        state = tab.evaluate(f"({READ_EXPLORER})({json.dumps(explorer_id)})")
        if state["position"] == key:
            return state
        tab.evaluate("new Promise(r => setTimeout(r, 50))")
    return state


def _fingerprint(state: dict) -> tuple:
    return (tuple(line["d"] for c in state["charts"].values() for line in c["lines"]),
            tuple(line["text"] for line in state["readout"]))


@pytest.mark.parametrize("page", EXPLORER_PAGES or ["(no explorer)"])
def test_explorers_play(page, site, tab):
    """Move every slider of every explorer of ``page`` as a reader would; after each move the page
    must show exactly the embedded data of the new position, and something must have changed."""
    if page not in EXPLORER_PAGES:
        _skip_or_fail("no page with an explorer in the built site")
    explorers = _explorers_of(page)
    assert explorers, f"{page}: explorer element without its data"
    tab.call("Emulation.setDeviceMetricsOverride",
             {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
    events = tab.open(site + page)
    timing = tab.evaluate("""(async () => { await window.convresExplorersReady;
        const nav = performance.getEntriesByType('navigation')[0];
        return [nav.loadEventEnd, window.convresExplorersDrawnAt]; })()""")
    print(f"\n{page}: load event at {timing[0]:.0f} ms, explorers drawn at {timing[1]:.0f} ms; "
          + ", ".join(f"{e['id']}: {e['bytes'] / 1000:.0f} kB of data" for e in explorers))
    problems = []
    for ex in explorers:
        eid, data = ex["id"], ex["data"]
        if ex["bytes"] > 2_000_000:
            problems.append(f"{eid}: {ex['bytes']} bytes of embedded data, more than 2 MB")
        state = _wait_position(tab, eid, data["start"])
        problems += [f"{eid} at the start: {p}" for p in _check_explorer_state(state, data, data["start"])]
        tab.screenshot_element(eid, SHOTS / f"explorer__{eid}.png")
        index = [int(i) for i in data["start"].split(",")]
        for k, control in enumerate(data["controls"]):
            input_id = f"{eid}-{control['name']}"
            count = len(control["values"])
            # keyboard: to the end, the start, one and two steps right; then a mouse click
            click = count - 2 if count - 2 != 2 else count - 1
            moves = [("End", count - 1), ("Home", 0), ("ArrowRight", 1), ("ArrowRight", 2),
                     ("click", click)]
            tab.evaluate(f"document.getElementById({json.dumps(input_id)}).focus(); 1")
            previous, visited = ",".join(map(str, index)), set()
            for how, target in moves:
                before = _fingerprint(state)
                if how == "click":
                    _click_slider(tab, input_id, target, count)
                else:
                    _key_press(tab, how)
                index[k] = target
                key = ",".join(map(str, index))
                state = _wait_position(tab, eid, key)
                where = f"{eid}, {control['name']} moved by {how} to {control['text'][target]}"
                got = [s["index"] for s in state["sliders"]][k]
                if got != target:
                    problems.append(f"{where}: the slider is at position {got}, not {target}")
                    index[k] = got
                    continue
                problems += [f"{where}: {p}" for p in _check_explorer_state(state, data, key)]
                moved = key != previous
                if moved:
                    visited.add(key)
                if moved and _fingerprint(state) == before:
                    problems.append(f"{where}: neither the figure nor the readout changed")
                previous = key
            if len(visited) < 3:
                problems.append(f"{eid}, {control['name']}: only {len(visited)} positions visited")
            # back to the start value, by keyboard
            start = int(data["start"].split(",")[k])
            _key_press(tab, "Home")
            for _ in range(start):
                _key_press(tab, "ArrowRight")
            index[k] = start
            state = _wait_position(tab, eid, data["start"])
            problems += [f"{eid}, {control['name']} back to its start: {p}"
                         for p in _check_explorer_state(state, data, data["start"])]
    events += tab._drain()
    problems += _console_problems(events, site)
    assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


def _mouse_click(tab: Tab, x: float, y: float) -> None:
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        tab.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                              "clickCount": 1})


# Where (viewport pixels) a data point lies in an explorer's chart, after scrolling it into view:
# (explorer id, chart name or "overview", x value, y value or null for the middle of the plot).
POINT_AT = r"""
((id, chart, xv, yv) => {
  const ex = window.convresExplorers[id], root = document.getElementById(id);
  const view = chart === 'overview' ? ex.overview : ex.views[chart];
  const box = root.querySelector(`.cx-chart[data-chart="${chart}"]`);
  box.scrollIntoView({block: 'center'});
  const svg = box.querySelector('svg'), r = svg.getBoundingClientRect();
  const k = r.width / Number(svg.getAttribute('width')), o = view.origin();
  const sx = view.scale('x'), sy = view.scale('y');
  const band = s => (s.bandwidth ? s.bandwidth() / 2 : 0);
  const y = yv === null ? view.height() / 2 : sy(yv) + band(sy);
  return [r.left + (o[0] + sx(xv) + band(sx)) * k, r.top + (o[1] + y) * k];
})
"""


@pytest.mark.parametrize("page", EXPLORER_PAGES or ["(no explorer)"])
def test_explorer_presets_links_overview_and_hover(page, site, tab):
    """Every preset button, clicked with the mouse, moves the explorer to its setting (and the
    figure changes, the previous setting staying behind as a faint trace); every link of the prose
    to a preset does the same and scrolls to the explorer; a click on a cell of the overview goes
    there; the pointer over a chart shows the values at the nearest step. No console error."""
    from convres.vega import format_number
    if page not in EXPLORER_PAGES:
        _skip_or_fail("no page with an explorer in the built site")
    tab.call("Emulation.setDeviceMetricsOverride",
             {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
    events = tab.open(site + page)
    problems = []
    for ex in _explorers_of(page):
        eid, data = ex["id"], ex["data"]
        if not data.get("presets"):
            problems.append(f"{eid}: no presets")
        state = _wait_position(tab, eid, data["start"])
        for preset in data.get("presets", []):
            before, previous = _fingerprint(state), state["position"]
            x, y = tab.evaluate(f"""(() => {{ const b = document.querySelector(
                '#{eid} button.cx-preset[data-preset="{preset['id']}"]'); b.scrollIntoView({{block: 'center'}});
                const r = b.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
            _mouse_click(tab, x, y)
            state = _wait_position(tab, eid, preset["key"])
            where = f"{eid}, preset {preset['id']!r}"
            problems += [f"{where}: {p}" for p in _check_explorer_state(state, data, preset["key"])]
            if preset["key"] != previous:
                if _fingerprint(state) == before:
                    problems.append(f"{where}: neither the figure nor the readout changed")
                if state["ghost"] != previous:
                    problems.append(f"{where}: the faint trace is {state['ghost']}, not the previous {previous}")
                if not state["ghostNote"].startswith(" Faint lines: the previous setting"):
                    problems.append(f"{where}: no note on the faint trace ({state['ghostNote']!r})")
            if preset["look"] and not state["look"]:
                problems.append(f"{where}: what to look at is not shown")
        # the links of the prose
        links = tab.evaluate(f"""[...document.querySelectorAll('a.cx-preset-link[href="#{eid}"]')]
                                 .map(a => a.dataset.cxPreset)""")
        by_id = {p["id"]: p for p in data.get("presets", [])}
        for k, preset_id in enumerate(links):
            if preset_id not in by_id:
                problems.append(f"{eid}: a link of the prose to the unknown preset {preset_id!r}")
                continue
            x, y = tab.evaluate(f"""(() => {{ const a = document.querySelectorAll('a.cx-preset-link[href="#{eid}"]')[{k}];
                a.scrollIntoView({{block: 'center'}}); const r = a.getClientRects()[0];
                return [r.left + Math.min(r.width / 2, 20), r.top + r.height / 2]; }})()""")
            _mouse_click(tab, x, y)
            key = by_id[preset_id]["key"]
            state = _wait_position(tab, eid, key)
            problems += [f"{eid}, link to {preset_id!r}: {p}" for p in _check_explorer_state(state, data, key)]
            top = tab.evaluate(f"document.getElementById('{eid}').getBoundingClientRect().top")
            if not -2 <= top <= 120:   # below the theme's sticky header
                problems.append(f"{eid}, link to {preset_id!r}: the explorer is not scrolled into view (top {top})")
        if not links:
            problems.append(f"{eid}: the prose links none of its presets")
        # a click on a cell of the overview
        if data.get("overview"):
            ov, index = data["overview"], [int(i) for i in state["position"].split(",")]
            kx, ky = ov["x"], ov["y"]
            index[kx] = (index[kx] + 2) % len(data["controls"][kx]["values"])
            index[ky] = (index[ky] + 1) % len(data["controls"][ky]["values"])
            key = ",".join(map(str, index))
            xt, yt = data["controls"][kx]["text"][index[kx]], data["controls"][ky]["text"][index[ky]]
            x, y = tab.evaluate(f"({POINT_AT})({json.dumps(eid)}, 'overview', {json.dumps(xt)}, {json.dumps(yt)})")
            _mouse_click(tab, x, y)
            state = _wait_position(tab, eid, key)
            problems += [f"{eid}, overview cell {key}: {p}" for p in _check_explorer_state(state, data, key)]
        # hover: the values at the step nearest the pointer
        rec = data["positions"][state["position"]]
        for chart in data["charts"]:
            series = [s for s in chart["series"] if "const_x" not in s and rec.get(s["y"])]
            xs = series_x(series[0], rec)
            xv = xs[len(xs) // 2]
            x, y = tab.evaluate(f"({POINT_AT})({json.dumps(eid)}, {json.dumps(chart['name'])}, {xv}, null)")
            tab.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
            tab.evaluate("new Promise(r => setTimeout(r, 100))")
            got = tab.evaluate(f"""(() => {{ const box = document.querySelector('#{eid} .cx-chart[data-chart="{chart['name']}"]');
                return [box.nextElementSibling.textContent, box.querySelectorAll('.hover_points_marks path').length,
                        box.querySelectorAll('.hover_rule_marks line, .hover_rule_marks path').length]; }})()""")
            want = f"{chart['x_name']} = {xv:g}: "
            value = format_number(rec[series[0]["y"]][len(xs) // 2])
            if not got[0].startswith(want) or value not in got[0] or got[1] < 1 or got[2] != 1:
                problems.append(f"{eid}, hover over {chart['name']} at {xv}: shows {got!r}, "
                                f"expected {want!r} with {value!r}, a rule and circles")
        tab.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 1, "y": 1})
    events += tab._drain()
    problems += _console_problems(events, site)
    assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


def series_x(series: dict, rec: dict) -> list:
    """The x values of one series of a record (as ``series_rows`` gives them)."""
    from convres.vega import series_rows
    return [r["x"] for r in series_rows(series, rec)]


@pytest.mark.parametrize("page", EXPLORER_PAGES or ["(no explorer)"])
def test_explorers_on_a_phone(page, site, tab):
    """At 390 px (a phone) every explorer fits the screen, draws its charts and still plays."""
    if page not in EXPLORER_PAGES:
        _skip_or_fail("no page with an explorer in the built site")
    # a phone's width; tall enough to hold a whole explorer in one screenshot
    tab.call("Emulation.setDeviceMetricsOverride",
             {"width": PHONE, "height": 2000, "deviceScaleFactor": 2, "mobile": True})
    try:
        events = tab.open(site + page)
        tab.evaluate("window.convresExplorersReady.then(() => 1)")
        problems = []
        for ex in _explorers_of(page):
            eid, data = ex["id"], ex["data"]
            state = _wait_position(tab, eid, data["start"])
            if state["overflow"] > 1 or state["width"] > PHONE:
                problems.append(f"{eid}: wider than the screen ({state['width']:.0f} px, overflow "
                                f"{state['overflow']} px)")
            for name, chart in state["charts"].items():
                if not chart["lines"] or chart["width"] > state["width"] + 1:
                    problems.append(f"{eid}: chart {name} not drawn or wider than the explorer")
            problems += [f"{eid} on a phone: {p}" for p in _check_explorer_state(state, data, data["start"])]
            tab.screenshot_element(eid, SHOTS / f"phone__{eid}.png", width=PHONE)
            # one move by keyboard at this size too
            tab.evaluate(f"document.getElementById({json.dumps(eid + '-' + data['controls'][0]['name'])}).focus(); 1")
            _key_press(tab, "Home")
            index = data["start"].split(",")
            index[0] = "0"
            key = ",".join(index)
            problems += [f"{eid} on a phone, after Home: {p}"
                         for p in _check_explorer_state(_wait_position(tab, eid, key), data, key)]
        events += tab._drain()
        problems += _console_problems(events, site)
        assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))
    finally:
        tab.call("Emulation.setDeviceMetricsOverride",
                 {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})


# --------------------------------------------------------------------------- saved widgets and MathJax 3
def _widget_page(with_shim: bool, explorer: str = "") -> bytes:
    """A page like one Jupyter Book writes for a notebook with a saved widget (MathJax 3 from the
    site, require.js, the embed manager; with or without the MathJax 2 shim), holding one HTMLMath
    widget whose description and value are TeX, and optionally an explorer's element (which must
    then load Vega through require.js)."""
    ipywidgets = pytest.importorskip("ipywidgets")
    from ipywidgets.embed import embed_data
    widget = ipywidgets.HTMLMath(value=r"\(x^2 + \beta\)", description=r"\(\mu\)")
    data = embed_data(views=[widget])
    shim = '<script src="_static/convres/mathjax2-shim.js"></script>' if with_shim else ""
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>widget check</title><link rel="icon" href="_static/favicon.svg">
<script>window.MathJax = {{"options": {{"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}}}</script>
<script defer="defer" src="_static/vendor/mathjax/tex-mml-chtml.js"></script>
<script type="application/vnd.jupyter.widget-state+json">{json.dumps(data["manager_state"])}</script>
{shim}
<script>var require = {{paths: {{'@jupyter-widgets/html-manager/dist': new URL('_static/vendor/html-manager', document.baseURI).href}}}};</script>
<script src="_static/vendor/require.js"></script>
<script src="_static/vendor/html-manager/embed-amd.js"></script>
{'<link rel="stylesheet" href="_static/convres/explorer.css">' if explorer else ""}
{'<script defer="defer" src="_static/convres/explorer.js"></script>' if explorer else ""}
</head><body><main><div class="cell_output"><div class="output text_html">
<script type="application/vnd.jupyter.widget-view+json">{json.dumps(data["view_specs"][0])}</script>
</div></div>{explorer}</main></body></html>""".encode()


@whole_site
def test_saved_widgets_with_mathjax3(site, tab):
    """The embed manager typesets widget labels through MathJax 2's ``MathJax.Hub.Queue``: with the
    site's MathJax 3 and the shim, a page with a saved widget throws nothing and its TeX is
    typeset; without the shim, the same page throws (so the check can fail)."""
    # an explorer on the same page, if the site has one: its Vega then comes through require.js
    explorer = ""
    for page in ALL_EXPLORER_PAGES[:1]:
        found = re.search(r'<div class="convres-explorer.*?</script>\s*</div>', (SITE / page).read_text(), re.S)
        explorer = found.group(0) if found else ""
    results = {}
    for with_shim in (True, False):
        path = f"__widget_check_{int(with_shim)}.html"
        _QuietHandler.extra["/" + path] = _widget_page(with_shim, explorer if with_shim else "")
        events = tab.open(site + path)
        results[with_shim] = tab.evaluate("""(async () => {
            const sleep = ms => new Promise(r => setTimeout(r, ms));
            for (let t = 0; t < 100 && !document.querySelector('.widget-htmlmath'); t++) await sleep(50);
            if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
            await sleep(300);
            const w = document.querySelector('.widget-htmlmath');
            if (window.convresExplorersReady) await window.convresExplorersReady;
            const lines = document.querySelectorAll('.convres-explorer .mark-line path').length;
            return {rendered: !!w, typeset: w ? w.querySelectorAll('mjx-container').length : 0,
                    explorerLines: lines, amd: !!(window.requirejs && window.requirejs.defined('vega'))}; })()""")
        results[with_shim]["problems"] = _console_problems(events + tab._drain(), site)
    good, bad = results[True], results[False]
    print(f"\nwidget page with the shim: {good}")
    assert good["rendered"] and not good["problems"], f"with the shim: {good}"
    assert good["typeset"] >= 2, f"with the shim the widget's TeX was not typeset: {good}"
    if ALL_EXPLORER_PAGES:   # the explorer drew its charts, with Vega loaded as an AMD module
        assert good["explorerLines"] > 0 and good["amd"], f"explorer next to require.js: {good}"
    assert any("Queue" in p for p in bad["problems"]), \
        f"without the shim the page should throw the MathJax 2 error (else this check proves nothing): {bad}"


def _same(a, b, rtol: float = 1e-4) -> bool:
    """Equal up to the 5 significant digits a page embeds (numbers, lists of numbers, the rest)."""
    import numpy as np
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, (int, float)):
        return bool(np.isclose(a, b, rtol=rtol, atol=0))
    if isinstance(b, list) and isinstance(a, list) and b and not isinstance(b[0], str):
        return len(a) == len(b) and bool(np.allclose(a, b, rtol=rtol, atol=0))
    return a == b


@whole_site
def test_explorer_data_is_what_convres_computes():
    """The data a built page embeds are what convres computes now: a few positions of every explorer
    recomputed (one run at a time, off the page's batched grid) from the grid settings it embeds."""
    if not ALL_EXPLORER_PAGES:
        _skip_or_fail("no page with an explorer in the built site")
    from convres import vega
    from convres.experiments import explorers as grids

    recompute = {"rank-collapse": grids.rank_collapse_position, "convergence": grids.convergence_position}
    problems = []
    for page in ALL_EXPLORER_PAGES:
        for ex in _explorers_of(page):
            data = ex["data"]
            keys = [data["start"], ",".join("0" * len(data["controls"])),
                    ",".join(str(len(c["values"]) - 1) for c in data["controls"])]
            for key in dict.fromkeys(keys):
                values = [c["values"][int(i)] for c, i in zip(data["controls"], key.split(","))]
                now = vega.rounded(recompute[data["name"]](*values, data["grid"]))
                stored = data["positions"][key]
                for field, value in now.items():
                    if field in ("labels", "readout"):
                        continue
                    if not _same(stored.get(field), value):
                        problems.append(f"{page} {ex['id']} at {key} ({values}): {field} differs from "
                                        "what convres computes now (rebuild the book)")
    assert not problems, "\n  ".join(problems)


# --------------------------------------------------------------------------- phone, dark theme, print
PRINT_WIDTH = 718  # px: an A4 page (210 mm at 96 px per inch) less Chromium's default margins

# Waits until the page is drawn as a reader sees it: MathJax, explorers, images, and site.js's
# second look at the tables after MathJax; returns the page's height.
SETTLE = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  if (window.convresExplorersReady) await window.convresExplorersReady;
  await Promise.all([...document.images].map(i => i.complete ? null : i.decode().catch(() => null)));
  await sleep(250);
  return document.documentElement.scrollHeight;
})()
"""

# What sticks out to the right: the page's own width, the outermost visible elements beyond the
# screen that are not inside a scrolling box (they widen the page), the tables of the text whose
# box scrolls sideways, and (for print) the code and output blocks that are cut.
LAYOUT = r"""
(() => {
  const vw = document.documentElement.clientWidth;
  const shown = e => { const s = getComputedStyle(e);
                       return s.display !== 'none' && s.visibility !== 'hidden' && s.position !== 'fixed'; };
  const inScroller = e => { for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
                              const s = getComputedStyle(a);
                              if (s.overflowX !== 'visible' || s.position === 'fixed') return true; }
                            return false; };
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                    [...e.classList].slice(0, 2).map(c => '.' + c).join('');
  const wide = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (!r.width || r.right <= vw + 1 || !shown(e) || inScroller(e)) continue;
    const p = e.parentElement.getBoundingClientRect();
    if (p.right > vw + 1 && e.parentElement !== document.body) continue;  // report the outermost
    wide.push(`${name(e)} ends at ${Math.round(r.right)} px: ` +
              (e.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60));
  }
  const main = document.querySelector('main') || document.body;
  const tables = [...main.querySelectorAll('table.table')]
    .filter(t => t.parentElement.scrollWidth > t.parentElement.clientWidth + 1)
    .map(t => `${t.parentElement.scrollWidth - t.parentElement.clientWidth} px too wide: ` +
              (t.querySelector('tr') || t).textContent.trim().replace(/\s+/g, ' ').slice(0, 60));
  const cut = [...main.querySelectorAll('pre')].filter(e => shown(e) && e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.scrollWidth - e.clientWidth} px cut: ` + e.textContent.trim().split('\n')[0].slice(0, 60));
  const sidebars = [...document.querySelectorAll('.bd-sidebar-primary, .bd-sidebar-secondary')]
    .filter(e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().width > 0).map(name);
  const math = [...main.querySelectorAll('mjx-container[display="true"]')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).length;
  return {vw, scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 10),
          tables, cut, sidebars, math, theme: document.documentElement.dataset.theme};
})()
"""


def _redirect(page: str) -> bool:
    return 'http-equiv="Refresh"' in (SITE / page).read_text(errors="replace")[:2000]


def _shot_name(kind: str, page: str) -> str:
    return f"{kind}__" + page.replace("/", "__").replace(".html", ".png")


def _view(tab, page, site, *, width, height, mobile=False, media="", dark=False):
    """Open ``page`` at ``width`` px (emulating a phone, print media or the dark colour scheme),
    wait until it is drawn, return (its height, LAYOUT, the console problems)."""
    tab.call("Emulation.setDeviceMetricsOverride",
             {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    tab.call("Emulation.setEmulatedMedia", {"media": media, "features": [
        {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})
    events = tab.open(site + page)
    full = tab.evaluate(SETTLE, timeout=40)
    layout = tab.evaluate(LAYOUT, timeout=40)
    return full, layout, _console_problems(events + tab._drain(), site)


def _reset(tab):
    tab.call("Emulation.setEmulatedMedia", {"media": "", "features": []})
    tab.call("Emulation.setDeviceMetricsOverride",
             {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})


PHONE_VIEWS: dict[str, tuple] = {}  # page -> what _phone_view saw


def _phone_view(tab, page: str, site: str) -> tuple[dict, list[str], dict]:
    """The page at 390 px on a phone, loaded once for both phone checks: LAYOUT, the console
    problems and CLIPPED_MATH; the screenshot ``phone__<page>.png`` is taken before
    CLIPPED_MATH unfolds the folded content."""
    if page not in PHONE_VIEWS:
        try:
            full, info, problems = _view(tab, page, site, width=PHONE, height=844, mobile=True)
            tab.screenshot_page(SHOTS / _shot_name("phone", page), full, width=PHONE, mobile=True)
            math = tab.evaluate(CLIPPED_MATH, timeout=40)
        finally:
            _reset(tab)
        PHONE_VIEWS[page] = (info, problems, math)
    return PHONE_VIEWS[page]


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_phone(page, site, tab):
    """At 390 px on a phone: the page is not wider than the screen (wide code and equations scroll
    inside their own box), no table of the text scrolls sideways, nothing goes to the console.
    Screenshot ``phone__<page>.png``."""
    if page not in PAGES or _redirect(page):
        pytest.skip("no page here (index.html only forwards)")
    info, seen, _ = _phone_view(tab, page, site)
    problems = list(seen)
    if info["scrollWidth"] > info["vw"]:
        problems.append(f"the page is {info['scrollWidth']} px wide on a {info['vw']} px screen; "
                        "sticking out: " + "; ".join(info["wide"] or ["(not found)"]))
    problems += [f"table scrolls sideways, {t}" for t in info["tables"]]
    assert not problems, f"{page} at {PHONE} px:\n  " + "\n  ".join(dict.fromkeys(problems))


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_dark_theme(page, site, tab):
    """In the dark theme (the reader's system setting; the site starts in "auto"): the theme
    switches and nothing goes to the console. Screenshot ``dark__<page>.png`` (with
    ``CONVRES_SCREENSHOTS=all``), for a person to see that figures keep their white face and text
    stays readable."""
    if page not in PAGES or _redirect(page):
        pytest.skip("no page here (index.html only forwards)")
    try:
        full, info, problems = _view(tab, page, site, width=WIDTH, height=HEIGHT, dark=True)
        if ALL_SHOTS:
            tab.screenshot_page(SHOTS / _shot_name("dark", page), full)
    finally:
        _reset(tab)
    if info["theme"] != "dark":
        problems.append(f"the theme is {info['theme']!r} with a dark system setting")
    assert not problems, f"{page} in the dark theme:\n  " + "\n  ".join(dict.fromkeys(problems))


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_print(page, site, tab):
    """Printed (print media, the width of an A4 page): no sidebars, and no code or output block
    and no table is cut at the right edge (web/site.css wraps them). Screenshot
    ``print__<page>.png`` (with ``CONVRES_SCREENSHOTS=all``). Display equations wider than the
    page are counted, not failed (an equation cannot wrap; the chapter has to split it)."""
    if page not in PAGES or _redirect(page):
        pytest.skip("no page here (index.html only forwards)")
    try:
        full, info, problems = _view(tab, page, site, width=PRINT_WIDTH, height=HEIGHT, media="print")
        if ALL_SHOTS:
            tab.screenshot_page(SHOTS / _shot_name("print", page), full, width=PRINT_WIDTH)
    finally:
        _reset(tab)
    if info["math"]:
        print(f"\n{page}: {info['math']} display equations wider than the printed page")
    problems += [f"sidebar printed: {s}" for s in info["sidebars"]]
    problems += [f"code or output {c}" for c in info["cut"]]
    problems += [f"table cut, {t}" for t in info["tables"]]
    if info["scrollWidth"] > info["vw"]:
        problems.append(f"the printed page is {info['scrollWidth']} px wide, the paper "
                        f"{info['vw']} px: " + "; ".join(info["wide"] or ["(not found)"]))
    assert not problems, f"{page} printed:\n  " + "\n  ".join(dict.fromkeys(problems))


# --------------------------------------------------------------------------- phone math

# Display equations (MathJax's `mjx-container[display="true"]`) whose typeset formula does not fit
# the part of the page it is shown in: wider than the visible width of the container or of any
# box around it that clips or scrolls, or beyond the screen. On a phone such a formula is cut off or
# needs a sideways scroll. Folded content (proofs in toggles, dropdowns) is opened first.
CLIPPED_MATH = r"""
(async () => {
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('details').forEach(e => { e.open = true; });
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const vw = document.documentElement.clientWidth;
  const main = document.querySelector('main') || document.body;
  const out = [];
  for (const c of main.querySelectorAll('mjx-container[display="true"]')) {
    const m = c.querySelector('mjx-math') || c;
    const r = m.getBoundingClientRect();
    if (!r.width || getComputedStyle(c).display === 'none') continue;
    let left = 0, right = vw;
    for (let a = c; a && a !== document.documentElement; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (a === c || s.overflowX !== 'visible') {
        const b = a.getBoundingClientRect();
        left = Math.max(left, b.left + a.clientLeft);
        right = Math.min(right, b.left + a.clientLeft + a.clientWidth);
      }
    }
    const over = Math.max(0, r.right - right) + Math.max(0, left - r.left);
    if (over > 1 || c.scrollWidth > c.clientWidth + 1) {
      const box = c.closest('[id]');
      out.push(`${Math.round(r.width)} px wide in ${Math.round(right - left)} px` +
               (box ? ` (#${box.id})` : '') + ': ' +
               (c.getAttribute('aria-label') || c.textContent || '').replace(/\s+/g, ' ').slice(0, 70));
    }
  }
  return {total: main.querySelectorAll('mjx-container[display="true"]').length, clipped: out};
})()
"""


def _is_api(page: str) -> bool:
    return page == "api.html" or page.startswith(("api/", "api_"))


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_display_math_fits_a_phone(page, site, tab):
    """At 390 px on a phone every display equation fits the column it is shown in (none is cut off
    or scrolls sideways): a long one is split over lines (``aligned`` with ``\\\\``)."""
    if page not in PAGES or _redirect(page):
        pytest.skip("no page here (index.html only forwards)")
    math = _phone_view(tab, page, site)[2]
    print(f"\n{page}: {len(math['clipped'])} of {math['total']} display equations do not fit {PHONE} px")
    assert not math["clipped"], (f"{page} at {PHONE} px, display equations that do not fit:\n  "
                                 + "\n  ".join(math["clipped"]))


# --------------------------------------------------------------------------- template text
# Leftovers of generated prose (no browser needed): what a sentence built from numbers must never
# read like. Each pattern is searched in the text of a page's article, code excluded (code blocks,
# inline code, cell sources, API signatures); formulas are searched as their TeX source.
TEMPLATE_TEXT = [
    (r"\b[A-Za-z]+\((?:s|es)\)", "a plural written '(s)': say one or several"),
    (r"∈\s*\{[^{},]*\}|\\in\s*\\\{[^{},]*\\\}|\bin \{[^{},]*\}",
     "a one-element set: say '= x' (or list the values)"),
    (r"∈\s*-?\d|\\in\s*-?\d", "a number after '∈' (a set written as one value)"),
    (r"\b0 (?:are|were|have|hold|do|did)\b|\b0 of (?:the|them|these|those)\b|(?:^|[.!?:;]\s+)0 [a-z]+s\b",
     "a count of zero in a sentence ('0 are ...'): say 'none' or leave the clause out"),
    (r"\b(?:nan|inf)\b", "'nan' or 'inf' in the text (a number that is missing or infinite)"),
    # (the API pages write None in types, "int | None", and in sentences about the API)
    (r"(?<!\| )(?<![`'\"\w.[])None(?! of\b)(?![\w`'\"|\]])", "'None' in the text (a missing value)"),
    (r"\{glue|\bglue:(?:text|math|figure|md)?`", "a glue role that was not replaced"),
]
CODE_TAGS = {"pre", "code", "script", "style", "kbd", "samp", "tt"}
CODE_CLASSES = {"highlight", "cell_input", "sig", "pre", "literal", "sig-name", "headerlink",
                "docutils literal"}


class _ProseText(__import__("html.parser").parser.HTMLParser):
    """The text of ``<article class="bd-article">`` outside code, in blocks (one per paragraph,
    list item, table cell, heading or caption)."""

    BLOCKS = {"p", "li", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "figcaption", "dt", "dd",
              "caption", "div", "section", "br"}
    VOID = {"br", "img", "hr", "input", "meta", "link", "wbr", "col", "area", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, in code)
        self.in_article = 0
        self.blocks: list[str] = [""]

    def _code(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag == "article" and "bd-article" in classes:
            self.in_article += 1
        if tag in self.BLOCKS:
            self.blocks.append("")
        if tag in self.VOID:
            return
        code = self._code() or tag in CODE_TAGS or bool(classes & CODE_CLASSES)
        self.stack.append((tag, code))

    def handle_endtag(self, tag):
        if tag in self.BLOCKS:
            self.blocks.append("")
        if tag == "article" and self.in_article:
            self.in_article -= 1
        for k in range(len(self.stack) - 1, -1, -1):  # tolerate unclosed tags
            if self.stack[k][0] == tag:
                del self.stack[k:]
                break

    def handle_data(self, data):
        if self.in_article and not self._code():
            self.blocks[-1] += data


def _template_problems(html: str, api: bool = False) -> list[str]:
    parser = _ProseText()
    parser.feed(html)
    problems = []
    for block in parser.blocks:
        text = " ".join(block.split())
        for pattern, why in TEMPLATE_TEXT:
            if api and "None" in why:
                continue
            for m in re.finditer(pattern, text):
                a, b = max(0, m.start() - 50), m.end() + 30
                problems.append(f"{why}: ...{text[a:b]}...")
    return problems


@whole_site
def test_template_text_is_caught():
    """The patterns of TEMPLATE_TEXT catch the leftovers of the reader's review, and pass their
    corrected forms."""
    bad = ["fails at 6 step(s), by up to", "unstable in the probe (β ∈ 1 at η = 0.01)",
           r"unstable (<span class='math'>\(\beta \in \{1\}\)</span>)", "1 inconclusive and 0 are checks",
           "Results. 0 runs diverged.", "the ratio is nan here", "the gap is None.",
           "the step is (None)", "and 0 were certified", "{glue:text}`x:.2f`"]
    good = ["fails at 6 steps, by up to", "fails at one step", r"<span class='math'>\(\beta = 1\)</span>",
            r"<span class='math'>\(\beta \in \{0, 1\}\)</span>", "at step 0 the loss", "β = 0 and β = 1",
            "0.5 of the runs", "none of the runs", "<code>None</code> means the default",
            "None of the runs stalls.", "the rank, 0 when d < n", "never returns NaN",
            "feature 0 of X is 1", "column 0 is replaced", "int | None", "Callable[[Step], None]",
            "10 % of 0 % runs", "β ∈ [0, 2]", r"<span class='math'>\(x \in \mathbb{R}^n\)</span>"]
    wrap = '<article class="bd-article"><p>{}</p></article>'.format
    for text in bad:
        assert _template_problems(wrap(text)), f"not caught: {text!r}"
    for text in good:
        assert not _template_problems(wrap(text)), f"caught, but fine: {text!r}: {_template_problems(wrap(text))}"


@pytest.mark.parametrize("page", PAGES or ["(no built site)"])
def test_no_template_text(page):
    """No page reads like a template filled in: no 'step(s)', no one-element set ('β ∈ 1',
    'in {1}'), no count of zero in a sentence ('0 are ...'), no 'nan' or 'None' in the prose, no
    unrendered glue role (TEMPLATE_TEXT). Code is not searched."""
    if page not in PAGES:
        _skip_or_fail(f"no built site at {SITE} (build it first)")
    problems = _template_problems((SITE / page).read_text(encoding="utf-8", errors="replace"),
                                  api=_is_api(page))
    assert not problems, f"{page}, template text:\n  " + "\n  ".join(dict.fromkeys(problems))


@whole_site
def test_every_module_is_on_one_api_page():
    """Every public module of convres is on exactly one page of the API reference (API_PAGES of
    web/convres_site.py), and every such page is in the table of contents."""
    import sys
    sys.path.insert(0, str(ROOT / "web"))
    try:
        import convres_site
    finally:
        sys.path.remove(str(ROOT / "web"))
    assert not convres_site.api_page_problems()
    toc = (ROOT / "_toc.yml").read_text()
    for page in convres_site.API_PAGES:
        assert (ROOT / "book" / f"{page}.md").is_file(), f"no book/{page}.md"
        assert f"- file: {page}\n" in toc, f"{page} is not in _toc.yml"
