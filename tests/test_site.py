"""The built site in a real browser: every page of ``_build/html`` opened in headless Chromium, offline.

Serves ``_build/html`` on 127.0.0.1 (a free port), drives one headless Chromium through the DevTools
protocol over a pipe (no extra Python package), and fails when a page

- leaves raw TeX (``$$``, ``\\[``, ``\\(``, ``\\begin``) in the rendered text, has a formula MathJax did
  not typeset, or a TeX error;
- has a broken internal link, anchor or image, or requests anything that is not on the site
  (every other host is unreachable for the browser: the site must work offline);
- has a saved widget that did not render, or a widget that rendered as an error;
- shows a Python traceback (outside cells tagged ``raises-exception``) or a JavaScript error;
- has a figure without alt text, a transparent figure (unreadable on the dark theme), a figure
  shown twice by one cell, or a figure printed as text (``<Figure size ...>``).

The build must have no execution-error reports (``_build/html/reports/``), and every chapter must
offer its executed notebook for download. Screenshots of every page (and one in the dark theme) go
to ``_build/screenshots/``.

Run it after building the book (``make browser``; ``make test`` runs it after the strict build).
Without a built site or a Chromium it is skipped with the reason, unless ``CONVRES_SITE_REQUIRED=1``
(set by the Makefile), which turns the skip into a failure. ``CHROMIUM=/path/to/chrome`` picks
the browser; ``CONVRES_SITE_DIR`` another built site (default ``_build/html``).
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
REQUIRED = os.environ.get("CONVRES_SITE_REQUIRED") == "1"
WIDTH, HEIGHT = 1280, 1400
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


PAGES = _pages()


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
        for domain in ("Page", "Runtime", "Network"):
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

    def screenshot(self, path: Path, height: int):
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": min(height, MAX_SHOT_HEIGHT), "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                    "captureBeyondViewport": True}, timeout=60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))


# What the page reports about itself once MathJax and the widget manager are done.
INSPECT = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
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
    const srcs = [...c.querySelectorAll('.cell_output img')].map(i => i.getAttribute('src'));
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
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    if not PAGES:
        _skip_or_fail(f"no built site at {SITE} (build it first: make book, or make strict-build)")
    shutil.rmtree(SHOTS, ignore_errors=True)  # the screenshots of this run only
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


@functools.lru_cache(maxsize=None)
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


# --------------------------------------------------------------------------- the tests
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
    redirect = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', (SITE / page).read_text())
    if redirect:  # index.html only forwards to the first page
        assert _check_link(site + redirect.group(1), site) is None, f"{page} forwards to a missing page"
        return
    events = tab.open(site + page)
    info = tab.evaluate(INSPECT, timeout=40)
    tab.screenshot(SHOTS / page.replace("/", "__").replace(".html", ".png"), info["height"])

    problems = []
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
    assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


def test_notebook_downloads_are_executed(site):
    """Every chapter offers its executed notebook (.ipynb with outputs) for download."""
    chapters = [p for p in PAGES if (ROOT / "book" / p.replace(".html", ".md")).is_file()
                and "kernelspec" in (ROOT / "book" / p.replace(".html", ".md")).read_text()[:500]]
    assert chapters, "no notebook chapters found in the built site"
    for page in chapters:
        nb_path = SITE / "_sources" / page.replace(".html", ".ipynb")
        assert nb_path.is_file(), f"{page}: no executed notebook {nb_path.relative_to(SITE)} to download"
        assert f'_sources/{page.replace(".html", ".ipynb")}' in (SITE / page).read_text(), \
            f"{page}: the page does not link its .ipynb download"
        nb = json.loads(nb_path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c.get("execution_count") for c in code), f"{page}: the .ipynb has unexecuted cells"
        assert any(c.get("outputs") for c in code), f"{page}: the .ipynb has no outputs"


def test_dark_theme_screenshot(site, tab):
    """One screenshot in the dark theme (figures keep their white face), for a human to look at:
    of the page with the most figures and widgets."""
    def richness(p):  # figures and widgets in cell outputs
        text = (SITE / p).read_text()
        return text.count('<img alt') + 3 * text.count("application/vnd.jupyter.widget-view+json")
    page = max(PAGES, key=richness)
    tab.open(site + page)
    tab.evaluate("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark'); 1")
    try:
        tab.open(site + page)
        info = tab.evaluate(INSPECT, timeout=40)
        assert tab.evaluate("document.documentElement.dataset.theme") == "dark"
        tab.screenshot(SHOTS / ("dark__" + page.replace("/", "__").replace(".html", ".png")),
                       info["height"])
    finally:
        tab.evaluate("localStorage.clear(); 1")


def test_site_javascript_is_pinned():
    """The JavaScript the site serves is pinned to exact versions, and the lock file agrees."""
    web = ROOT / "web"
    wanted = json.loads((web / "package.json").read_text())["dependencies"]
    locked = json.loads((web / "package-lock.json").read_text())["packages"]
    assert set(wanted) == {"mathjax", "requirejs", "@jupyter-widgets/html-manager"}
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: {version!r} is not an exact version"
        assert locked[f"node_modules/{name}"]["version"] == version, f"{name}: lock file differs"
        assert locked[f"node_modules/{name}"]["integrity"].startswith("sha512-")
