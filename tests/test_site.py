"""The built site (``_build/html``, ``CONVRES_SITE_DIR``) served on 127.0.0.1 and opened offline in
the system's Chromium (``CHROMIUM=/path``) with Playwright, after ``make book`` (``make browser``).
Screenshots go to ``_build/screenshots/`` (``CONVRES_SCREENSHOTS=all``: dark and print too). Without
a site or a Chromium the tests are skipped, a failure under ``CONVRES_SITE_REQUIRED=1``;
``CONVRES_PDF_REQUIRED=1`` makes a site without the PDF a failure."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import math
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()
SHOTS = SITE.parent / "screenshots"
ALL_SHOTS = os.environ.get("CONVRES_SCREENSHOTS", "") == "all"
WIDTH, HEIGHT, PHONE, PRINT_WIDTH = 1400, 900, 390, 718   # PRINT_WIDTH: A4 less the margins
MAX_SCREENS = 15           # a chapter or an API page at WIDTH px: at most this many screens of HEIGHT px
LIVE_STEPS, LIVE_MS = 500, 50   # the explorer's budget: 500 steps at the interactive size
PHONE_VIEW = dict(width=PHONE, height=844, mobile=True)


def _redirect(page: str) -> bool:
    return 'http-equiv="Refresh"' in (SITE / page).read_text(errors="replace")[:2000]


# --------------------------------------------------------------------------- server and browser
@pytest.fixture(scope="module")
def site(site_pages):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    handler.func.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(site, skip_or_fail):
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("Playwright is not installed (pip install playwright; it drives the system's Chromium)")
    exe = next((shutil.which(n) for n in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser",
                                          "google-chrome") if n and shutil.which(n)), None)
    if exe is None:
        skip_or_fail("no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=[
            "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"])   # offline
        yield b
        b.close()


class View(contextlib.AbstractContextManager):
    """One page in a fresh browser context, with everything it wrote to the console."""

    def __init__(self, browser, site: str, page: str, *, width=WIDTH, height=HEIGHT, mobile=False,
                 media=None, dark=False):
        self.context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=mobile,
                                           has_touch=mobile, color_scheme="dark" if dark else "light")
        self.page, self.name = self.context.new_page(), page
        self.problems: list[str] = []
        p = self.page
        p.on("pageerror", lambda e: self.problems.append(f"JavaScript error: {str(e)[:300]}"))
        p.on("console", lambda m: m.type in ("error", "assert") and self.problems.append(
            f"console.{m.type}: {m.text[:300]}"))
        p.on("request", lambda r: r.url.startswith(("http:", "https:")) and not r.url.startswith(site)
             and self.problems.append(f"request outside the site (works only online): {r.url}"))
        p.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        if media:
            p.emulate_media(media=media)
        p.goto(site + page, wait_until="load")
        self.height = p.evaluate(SETTLE)

    def __call__(self, script: str, arg=None):
        return self.page.evaluate(script, arg)

    def shot(self, prefix: str = ""):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.set_viewport_size({"width": self.page.viewport_size["width"], "height": min(self.height, 16000)})
        self.page.screenshot(path=str(SHOTS / (prefix + self.name.replace("/", "__").replace(".html", ".png"))))

    def __exit__(self, *exc):
        self.context.close()


# Waits until the page is drawn as a reader sees it (MathJax, explorers, images, site.js's second
# look after MathJax); returns the page's height.
SETTLE = r"""async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  if (window.convresExplorersReady) await window.convresExplorersReady;
  await Promise.all([...document.images].map(i => i.complete ? null : i.decode().catch(() => null)));
  await sleep(250);
  return document.documentElement.scrollHeight;
}"""

# What a page reports about itself once it is drawn (SETTLE).
INSPECT = r"""() => {
  const main = document.querySelector('main') || document.body;
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .sig';
  const tex = [], walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  const rawTex = /\$\$|\\\[|\\\(|\\begin\{|\$[^$\n]*[\\^_][^$\n]*\$/;
  for (let n; (n = walker.nextNode()); )
    if (!n.parentElement.closest(skip) && rawTex.test(n.textContent)) tex.push(n.textContent.trim().slice(0, 120));
  const figures = [...main.querySelectorAll('img')].filter(i => !i.closest('.sidebar-primary-items__start'));
  const transparent = figures.filter(i => {
    if (!/\.png($|\?)/i.test(i.getAttribute('src') || '') || !i.naturalWidth) return false;
    const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;
    const g = c.getContext('2d'); g.drawImage(i, 0, 0); const w = c.width - 1, h = c.height - 1;
    return [[0, 0], [w, 0], [0, h], [w, h], [w >> 1, h >> 1]].some(([x, y]) => g.getImageData(x, y, 1, 1).data[3] < 250);
  }).map(i => i.getAttribute('src'));
  const outputs = [...main.querySelectorAll('.cell_output, .output')].filter(e => !e.closest('.tag_raises-exception'));
  return {
    height: document.documentElement.scrollHeight, mathCount: main.querySelectorAll('.math').length,
    mathjax: !!window.MathJax, tex,
    untypeset: [...main.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
    texErrors: [...main.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent),
    brokenImages: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src')),
    noAlt: figures.filter(i => { const a = (i.getAttribute('alt') || '').trim(); return !a || /\.(png|jpe?g|svg|gif)$/i.test(a); })
                  .map(i => i.getAttribute('src')),
    transparent,
    tracebacks: outputs.filter(e => e.matches('.traceback, .error') || /Traceback \(most recent call last\)/.test(e.textContent))
                       .map(e => e.textContent.slice(0, 300)),
    textFigures: outputs.filter(e => /<Figure size \d+x\d+ with/.test(e.textContent)).map(e => e.textContent.trim().slice(0, 80)),
    doubled: [...main.querySelectorAll('.cell')].flatMap(c => {
      const s = [...c.querySelectorAll('.cell_output img')].filter(i => !i.closest('a')).map(i => i.getAttribute('src'));
      return s.filter((x, k) => s.indexOf(x) !== k); }),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  };
}"""

# What sticks out to the right: the page's width, the outermost elements beyond the screen that are
# not inside a scrolling box, tables of the text that scroll, cut code blocks, printed sidebars.
LAYOUT = r"""() => {
  const vw = document.documentElement.clientWidth, main = document.querySelector('main') || document.body;
  const shown = e => { const s = getComputedStyle(e); return s.display !== 'none' && s.visibility !== 'hidden' && s.position !== 'fixed'; };
  const inScroller = e => { for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
    const s = getComputedStyle(a); if (s.overflowX !== 'visible' || s.position === 'fixed') return true; } return false; };
  const wide = [...document.querySelectorAll('body *')].filter(e => { const r = e.getBoundingClientRect();
    return r.width && r.right > vw + 1 && shown(e) && !inScroller(e) && (e.parentElement === document.body
      || e.parentElement.getBoundingClientRect().right <= vw + 1); })
    .map(e => `${e.tagName.toLowerCase()}.${[...e.classList].slice(0, 2).join('.')} ends at ${Math.round(e.getBoundingClientRect().right)} px`);
  return {vw, scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 10),
    tables: [...main.querySelectorAll('table.table')].filter(t => t.parentElement.scrollWidth > t.parentElement.clientWidth + 1)
      .map(t => (t.querySelector('tr') || t).textContent.trim().replace(/\s+/g, ' ').slice(0, 60)),
    cut: [...main.querySelectorAll('pre')].filter(e => shown(e) && e.scrollWidth > e.clientWidth + 1)
      .map(e => e.textContent.trim().split('\n')[0].slice(0, 60)),
    sidebars: [...document.querySelectorAll('.bd-sidebar-primary, .bd-sidebar-secondary')]
      .filter(e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().width > 0).length,
    theme: document.documentElement.dataset.theme};
}"""

# Formulas cut off: every formula (folded content opened first) that goes beyond the screen or beyond
# an ancestor that clips it. A formula inside a box that scrolls sideways (a notebook's table; a wide
# inline formula that site.js made scroll inside itself) can be scrolled to: it is counted apart.
# `unmark`: remove site.js's marks first (the count before the fix).
CUT_MATH = r"""async (unmark) => {
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('details').forEach(e => { e.open = true; });
  if (window.convresFit) window.convresFit();
  if (unmark) document.querySelectorAll('.convres-wide-math').forEach(e => e.classList.remove('convres-wide-math'));
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const vw = document.documentElement.clientWidth, main = document.querySelector('main') || document.body;
  const out = {display: [], inline: [], scrolling: 0, total: 0};
  for (const c of main.querySelectorAll('mjx-container')) {
    const m = c.querySelector('mjx-math') || c, r = m.getBoundingClientRect();
    if (!r.width || !c.offsetParent) continue;
    out.total++;
    let right = vw, left = 0, scrolls = false;
    for (let a = c; a && a !== document.documentElement; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') { scrolls = true; break; }
      if (o === 'visible' || a === c) continue;
      const b = a.getBoundingClientRect();
      left = Math.max(left, b.left + a.clientLeft); right = Math.min(right, b.left + a.clientLeft + a.clientWidth);
    }
    if (scrolls) { out.scrolling++; continue; }
    if (r.right > right + 1 || r.left < left - 1)
      out[c.getAttribute('display') === 'true' ? 'display' : 'inline'].push(
        `${Math.round(r.right - right)} px cut (${(c.closest('[id]') || {}).id || ''}): ` +
        (c.getAttribute('aria-label') || c.textContent || '').replace(/\s+/g, ' ').slice(0, 60));
  }
  return out;
}"""


def _check_link(url: str, base: str) -> str | None:
    """None if ``url`` (on the local server) points at an existing file and anchor, else why not."""
    parts = urlsplit(url)
    target = SITE / unquote(parts.path[len(urlsplit(base).path):])
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{url}: no such file"
    if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
        return f"{url}: no element with id {parts.fragment!r} in {target.relative_to(SITE)}"
    return None


@functools.cache
def _ids(path: Path) -> frozenset:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r'\s(?:id|name)="([^"]+)"', text))


def _fail(page: str, problems: list[str]) -> None:
    assert not problems, f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


# --------------------------------------------------------------------------- every page
def test_page(page, site, browser):
    """At 1400 px: formulas typeset, figures drawn with alt text, links alive,
    nothing to the console; a chapter or a page of the API reference at most MAX_SCREENS screens."""
    if _redirect(page):
        target = re.search(r'url=([^"]+)"', (SITE / page).read_text()).group(1)
        assert _check_link(site + target, site) is None, f"{page} forwards to a missing page"
        return
    with View(browser, site, page) as view:
        info = view(INSPECT)
        view.shot()
        problems = list(view.problems)
    print(f"\n{page}: {info['height']} px at {WIDTH} px = {info['height'] / HEIGHT:.1f} screens")
    if (ROOT / "book" / page.replace(".html", ".md")).is_file() and info["height"] > MAX_SCREENS * HEIGHT:
        fix = ("split the page: API_PAGES in web/convres_site.py" if page.split("/")[0] in ("api", "api.html")
               else "shorten it, fold or move the details")
        problems.append(f"{info['height'] / HEIGHT:.1f} screens of {HEIGHT} px at {WIDTH} px: more than "
                        f"{MAX_SCREENS}; {fix}")
    if info["mathCount"] and not info["mathjax"]:
        problems.append("formulas but MathJax did not load")
    for key, what in [("tex", "raw TeX left in the text"), ("untypeset", "formula not typeset"),
                      ("texErrors", "TeX error"), ("brokenImages", "broken image"),
                      ("noAlt", "figure without alt text"), ("transparent", "transparent figure"),
                      ("tracebacks", "Python traceback"), ("textFigures", "figure printed as text"),
                      ("doubled", "figure shown twice in one cell")]:
        problems += [f"{what}: {x}" for x in info[key]]
    problems += [p for link in info["links"] if link.startswith(site) for p in [_check_link(link, site)] if p]
    _fail(page, problems)


VIEWS = {"phone": PHONE_VIEW, "dark": dict(dark=True), "print": dict(width=PRINT_WIDTH, media="print")}


@pytest.mark.parametrize("kind", list(VIEWS))
def test_phone_dark_and_print(page, kind, site, browser):
    """On a 390 px phone and printed (A4 width) the page is not wider than the screen or the paper
    and no table of the text scrolls sideways; on the phone no formula is cut off (display or
    inline; wide inline ones scroll inside themselves), printed no sidebar is shown and no code
    block is cut. In the dark theme the theme switches. None writes to the console. Screenshot
    ``phone__<page>.png`` (``dark__``, ``print__`` with CONVRES_SCREENSHOTS=all)."""
    if _redirect(page):
        pytest.skip("a page that forwards to another")
    with View(browser, site, page, **VIEWS[kind]) as view:
        layout = view(LAYOUT)
        if kind == "phone" or ALL_SHOTS:
            view.shot(f"{kind}__")
        math = view(CUT_MATH, False) if kind == "phone" else {}
        problems = list(view.problems)
    if kind == "dark" and layout["theme"] != "dark":
        problems.append(f"the theme is {layout['theme']!r} with a dark system setting")
    if kind != "dark" and layout["scrollWidth"] > layout["vw"]:
        problems.append(f"the page is {layout['scrollWidth']} px wide: " + "; ".join(layout["wide"]))
    if kind != "dark":
        problems += [f"table scrolls sideways: {t}" for t in layout["tables"]]
    if kind == "print":
        problems += ["sidebar printed"] * bool(layout["sidebars"]) + [f"code cut: {c}" for c in layout["cut"]]
    if kind == "phone":
        print(f"\n{page}: {len(math['inline'])} inline and {len(math['display'])} display formulas of "
              f"{math['total']} cut at {PHONE} px")
        problems += [f"formula cut off: {m}" for m in math["display"] + math["inline"]]
    _fail(f"{page} ({kind})", problems)


def test_cut_math_is_caught(site_pages, site, browser):
    """The formula check sees an inline formula wider than a phone's line, and site.js fixes it: the
    formula scrolls inside itself, shows it (a fade at the edge where more of it is hidden, left once
    it is scrolled) and keeps the punctuation after it on its line."""
    page = next(iter(_with(site_pages, 'class="math')), None)
    if page is None:
        pytest.skip("no page with formulas")
    with View(browser, site, page, **PHONE_VIEW) as view:
        view(r"""() => { const p = document.createElement('p'); p.id = 'wide-test';
          p.innerHTML = 'x <span class="math">\\(' + Array(40).fill('a_{1} + b^{2}').join(' + ') + '\\)</span>. y';
          document.querySelector('main .bd-article').prepend(p); return MathJax.typesetPromise([p]); }""")
        before, after = view(CUT_MATH, True), view(CUT_MATH, False)
        view("() => window.convresFit()")
        shows = view(WIDE_MATH_SHOWN)
    assert any("wide-test" in m for m in before["inline"]), before
    assert not any("wide-test" in m for m in after["inline"]), after
    assert shows["fade"] == ["right", "left"], f"no fade at the hidden edge of a wide formula: {shows}"
    assert shows["punct"] == "." and shows["sameLine"], f"the full stop after a wide formula leaves its line: {shows}"


# A wide formula of test_cut_math_is_caught: its fades (at the start, then scrolled to the end:
# which edge is faded, read from the computed mask) and the punctuation after it.
WIDE_MATH_SHOWN = r"""async () => {
  const c = document.querySelector('#wide-test mjx-container.convres-wide-math');
  if (!c) return {fade: [], punct: null, sameLine: false};
  const side = () => { const m = getComputedStyle(c).maskImage || getComputedStyle(c).webkitMaskImage || 'none';
    if (m === 'none') return 'none';
    return /to left|270deg/.test(m) ? 'left' : /transparent[^,]*,\s*rgb\(0, 0, 0\)/.test(m) ? 'both' : 'right'; };
  const fade = [side()];
  c.scrollLeft = c.scrollWidth;
  await new Promise(r => setTimeout(r, 100));
  fade.push(side());
  const p = document.querySelector('#wide-test .convres-wide-punct'), a = c.getBoundingClientRect();
  const b = p ? p.getBoundingClientRect() : null;
  return {fade, punct: p && p.textContent, sameLine: !!b && b.top >= a.top - 1 && b.bottom <= a.bottom + 1 && b.left >= a.right - 1};
}"""


# --------------------------------------------------------------------------- the PDF
def test_the_pdf_is_linked_and_served(site_pages, site, browser):
    """With ``_build/html/convres.pdf`` (``make pdf``, then an HTML build), every page's download
    menu links it and the link returns the PDF; without it no page links it (no dead link)."""
    pdf = SITE / "convres.pdf"
    if os.environ.get("CONVRES_PDF_REQUIRED") == "1":
        assert pdf.is_file(), f"no {pdf}: run make pdf before make book (CONVRES_PDF_REQUIRED=1)"
    pages = _with(site_pages, "download-buttons")   # those with the menu
    linking = [p for p in pages if re.search(r'href="(?:\.\./)*convres\.pdf"', (SITE / p).read_text())]
    # the theme's ".pdf" item prints the page (window.print()): it must say so, PDF or not
    printing = [p for p in pages if re.search(r'btn__text-container">\.pdf<', (SITE / p).read_text())]
    assert not printing, f"pages whose '.pdf' item only prints the page: {printing[:5]}"
    if not pdf.is_file():
        assert not linking, f"pages link convres.pdf, which the site does not serve: {linking[:5]}"
        pytest.skip("the site has no PDF (make pdf needs TeX)")
    assert linking == pages, f"pages without the PDF in their menu: {sorted(set(pages) - set(linking))[:5]}"
    with View(browser, site, "intro.html") as view:
        got = view.page.request.get(view("() => document.querySelector('a[href$=\"convres.pdf\"]')?.href"))
        head = got.status, got.body()[:5], len(got.body())
    assert head[0] == 200 and head[1] == b"%PDF-" and head[2] > 100_000, head


# --------------------------------------------------------------------------- folds, phone breaks, search
def _with(pages: list[str], text: str) -> list[str]:
    return [p for p in pages if text in (SITE / p).read_text(errors="replace")]


def test_folded_proofs_say_what_they_prove(proof_page, site, browser):
    """Every folded proof is labelled "Proof of Lemma 3" (the statement just before it; site.js),
    not the theme's "Click to show", and keeps its label when opened."""
    with View(browser, site, proof_page) as view:
        labels = view("""() => [...document.querySelectorAll('details.toggle-details')]
          .filter(d => d.querySelector('div.proof'))
          .map(d => d.querySelector('summary').innerText.trim())""")
        bad = [x for x in labels if not re.fullmatch(r"Proof of [A-Z][a-z]+ \d+", x)]
        problems = [f"a folded proof labelled {x!r}" for x in bad]
        if labels:
            view.page.locator("details.toggle-details:has(div.proof) > summary").first.click()
            after = view("() => document.querySelector('details.toggle-details[open] > summary').innerText.trim()")
            if after != labels[0]:
                problems.append(f"opened, the first proof is labelled {after!r}, not {labels[0]!r}")
        problems += view.problems
    print(f"\n{proof_page}: {len(labels)} folded proofs, e.g. {labels[:3]}")
    _fail(proof_page, problems)


# The rows of every display formula written with \phonebreak, in the order of the page (site.js
# marks the ones it typeset again: their TeX then holds the break it chose).
PHONE_ROWS = r"""() => MathJax.startup.document.getMathItemsWithin(document.body)
  .filter(m => m.display && m.typesetRoot && (/\\phonebreak/.test(m.math)
                || m.typesetRoot.parentNode.classList.contains('convres-phonebreak')))
  .map(m => m.typesetRoot.querySelectorAll('mjx-mtr').length)"""


def test_phone_breaks_only_on_a_phone(phonebreak_page, site, browser):
    """A display formula with \\phonebreak has more rows at 390 px than at 1400 px, and a window
    resized across 36rem gets the phone's layout (site.js typesets it again)."""
    page, problems = phonebreak_page, []
    with View(browser, site, page) as wide, View(browser, site, page, **PHONE_VIEW) as phone:
        rows_wide, rows_phone = wide(PHONE_ROWS), phone(PHONE_ROWS)
        if not rows_phone or len(rows_wide) != len(rows_phone) or not all(
                w < n for w, n in zip(rows_wide, rows_phone)):
            problems.append(f"rows at {WIDTH} px {rows_wide}, on the phone {rows_phone}")
        wide.page.set_viewport_size({"width": PHONE, "height": 844})
        wide("() => new Promise(r => setTimeout(r, 800))")
        wide(SETTLE)
        if wide(PHONE_ROWS) != rows_phone:
            problems.append(f"resized to {PHONE} px, rows {wide(PHONE_ROWS)}, not {rows_phone}")
        problems += wide.problems + phone.problems
    print(f"\n{page}: rows of the formulas with \\phonebreak at {WIDTH} px {rows_wide}, "
          f"at {PHONE} px {rows_phone}")
    _fail(page, problems)


# The reviews' queries and the page each should find first (None: an API object, the query is code).
SEARCHES = {"rank collapse": "rank_collapse.html", "certificate": "certificate.html",
            "separation": "separation.html", "persistence": "jena.html", "convres.certify": None}


@pytest.mark.parametrize("query", list(SEARCHES))
def test_search_finds_the_chapters_first(query, skip_or_fail, site, browser):
    """The search page ranks the chapters above the API reference for a query in words (the
    review's queries), the chapter the query names first, and API objects first for a query that
    is code (web/search_scorer.js)."""
    if not (SITE / "search.html").is_file():
        skip_or_fail("no search page in the built site")
    with View(browser, site, "search.html?q=" + query.replace(" ", "+")) as view:
        view.page.wait_for_function("() => /found|did not match/i.test("
                                    "document.getElementById('search-results')?.textContent)", timeout=30_000)
        view.page.wait_for_timeout(300)
        hrefs = view("() => [...document.querySelectorAll('#search-results ul.search > li > a')]"
                     ".map(a => a.getAttribute('href'))")
    print(f"\n{query!r}: {len(hrefs)} results, the first {hrefs[:4]}")
    assert hrefs, f"no results for {query!r}"
    api = [h.startswith(("api.html", "api/", "genindex", "py-modindex")) for h in hrefs]
    if "." in query:
        assert api[0], f"{query!r} is code: an API object should come first, not {hrefs[0]}"
    else:
        assert not api[0] and api == sorted(api), f"{query!r}: API results before chapters: {hrefs[:8]}"
        assert hrefs[0].split("#")[0] == SEARCHES[query], f"{query!r} finds {hrefs[:3]} first"
    assert not view.problems, view.problems


# --------------------------------------------------------------------------- the explorers
def _explorer_ids(page: str) -> list[str]:
    return re.findall(r'<div class="convres-explorer[^"]*" id="([^"]+)"', (SITE / page).read_text())


def _renderer_cpu() -> float:
    """Seconds of CPU used so far by the renderer processes of this test's Chromium (Linux
    ``/proc/<pid>/task/<tid>/schedstat``); 0 elsewhere."""
    def parent(pid: str) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            return "0"

    total, me = 0.0, str(os.getpid())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if b"--type=renderer" not in (proc / "cmdline").read_bytes():
                continue
            pid = proc.name
            while pid not in ("0", "1", me):
                pid = parent(pid)
            if pid == me:
                total += sum(int((t / "schedstat").read_text().split()[0]) for t in (proc / "task").iterdir())
        except OSError:
            continue
    return total / 1e9


def _agree(js, ref) -> bool:
    """Equal to 1e-9 relative; below 1e-12 of the start, to 1e-21 of the start (rounding)."""
    js, ref = np.asarray(js), np.asarray(ref)
    return js.shape == ref.shape and bool(np.all(np.abs(js - ref) <= 1e-9 * np.maximum(ref, 1e-12 * ref[0])))


#: The escape panel against convres: equal steps, except after a spike (the loss more than
#: SPIKE times its last value in one step before the escape), which amplifies float64 rounding:
#: there within ESCAPE_RTOL (measured: 1,264 against 1,269 and 2,141 against 2,170 at d_QK = 4096).
SPIKE, ESCAPE_RTOL = 2.0, 0.02


def test_explorer_numbers_are_convres(explorer_page, site, browser):
    """The page's gradient descent, 500 steps at two settings per explorer, equals
    convres.gradient_descent on the same instance; 500 steps at the interactive size (the book's
    figure: N = 4, n = 4, d = m = 32) take at most LIVE_MS ms of the renderer's CPU time (the best
    of 7; the wall time, printed too, also counts other jobs' turns). The escape panel, at every
    seed, attention scale and d_QK it offers (its start's step), shows the escape steps of
    convres.explorers.run: the numbers the chapters quote."""
    import convres
    from convres import explorers
    problems = []
    with View(browser, site, explorer_page) as view:
        for eid in _explorer_ids(explorer_page):
            ex = f"window.convresExplorers[{json.dumps(eid)}]"
            data = view(f"() => {ex}.data")
            start = data["start"]
            for v in (start, {**start, "beta": 0.0, "scale": "1/sqrt(d_qk)" if len(data["d_qks"]) > 1 else start["scale"]}):
                got = view(f"(v) => {ex}.compute(v, {LIVE_STEPS})", v)
                params, X, Y, cfg = explorers.instance(data["bank"]["family"], v["seed"], v["d_qk"], beta=v["beta"],
                                                       scale=v["scale"])
                _, h = convres.gradient_descent(params, X, Y, cfg, v["mu"], LIVE_STEPS, rtol=data["rtol"])
                assert got["status"] == h.status and _agree(got["loss"], h.loss), (eid, v)
            # wall time in the page, and the CPU time of the browser's renderer (/proc): on a machine
            # busy with other jobs the wall time counts their turns too, the CPU time does not
            times = []
            for _ in range(7):
                cpu = _renderer_cpu()
                wall = view(f"() => {ex}.compute({{}}, {LIVE_STEPS}).ms")
                times.append((wall, (_renderer_cpu() - cpu) * 1e3))
            wall, cpu = min(t[0] for t in times), min(t[1] for t in times)
            load = os.getloadavg()[0]
            print(f"\n{eid}: {LIVE_STEPS} steps in {cpu:.1f} ms of CPU, {wall:.1f} ms of wall time "
                  f"(best of 7; load average {load:.1f} on {os.cpu_count()} cores)")
            if data["bank"]["family"] == "collapse":     # the interactive size: the book's figure
                assert cpu <= LIVE_MS, f"{eid}: {LIVE_STEPS} steps take {cpu:.0f} ms of CPU"
            for seed in data["seeds"] if "escape" in data["charts"] else ():
                for scale in data["scales"]:
                    view(f"(v) => {ex}.set(v)", {"seed": seed, "scale": scale, "beta": 0.0})
                    view(f"() => {ex}.idle()")
                    live = view(f"() => {ex}.state().escapes")
                    for q in data["d_qks"]:
                        ref = explorers.run(data["bank"]["family"], seed, q, 0.0, data["start"]["mu"], scale=scale,
                                            steps=data["horizon"], stop_at_escape=True)
                        got, want, loss = live.get(str(q)), ref["escape"], np.asarray(ref["loss"])
                        spike = want is not None and np.max(loss[1:want + 1] / loss[:want]) > SPIKE
                        if got != want and not (spike and got is not None and abs(got - want) <= ESCAPE_RTOL * want):
                            problems.append(f"{eid}, seed {seed}, {scale}, d_QK = {q}: escape {got} in the page, "
                                            f"{want} in convres" + (" (after a spike)" if spike else ""))
        _fail(explorer_page, problems + view.problems)


# The controls and the captions of an explorer: where each control is, which caption is shown.
CONTROLS = r"""(id) => [...document.getElementById(id).querySelectorAll('input, button.cx-preset')]
  .map(e => [e.id || e.dataset.preset || e.value, Math.round(e.getBoundingClientRect().top + scrollY)])"""

# Each chart of an explorer: how many points of its drawn series (paths and markers, the faint
# previous setting left out) lie inside its plot area.
DRAWN = r"""(id) => Object.fromEntries([...document.getElementById(id).querySelectorAll('.cx-chart')].map(box => {
  const c = window.convresExplorers[id].chart(box.dataset.chart), [x0, x1] = c.px.x, [y0, y1] = c.px.y;
  const inside = (x, y) => x >= x0 - 1 && x <= x1 + 1 && y >= y0 - 1 && y <= y1 + 1;
  let n = 0;
  for (const e of box.querySelectorAll('svg [data-series]')) {
    const key = e.getAttribute('data-series');
    if (!key || key === 'ghost') continue;
    if (e.tagName === 'circle') { n += inside(+e.getAttribute('cx'), +e.getAttribute('cy')); continue; }
    const v = (e.getAttribute('d') || '').match(/-?[\d.]+/g) || [];
    for (let i = 0; i + 1 < v.length; i += 2) n += inside(+v[i], +v[i + 1]);
  }
  return [box.dataset.chart, n];
}))"""


@pytest.mark.parametrize("width", [WIDTH, PHONE])
def test_explorer_plays(explorer_page, width, site, browser):
    """Every explorer as a reader plays it: its start runs past the escape at every d_QK of its
    escape panel, its drawn curve is its run, a preset button and the prose's link set it, the
    keyboard moves a slider, the scale switch works, and no control moves when a caption changes
    (at 1400 px and on a 390 px phone, where the explorer also fits the screen). After each preset
    the loss axis follows that setting's runs and the readout gives the loss relative to its start;
    the pointer over the loss chart, or a tap on a phone, reads the values there; the zoom on the
    floor narrows the loss axis to a few decades."""
    with View(browser, site, explorer_page, **(PHONE_VIEW if width == PHONE else {})) as view:
        p = view.page
        ids, problems = _explorer_ids(explorer_page), []   # (the problems of every explorer of the page)
        for eid in ids:
            ex = f"window.convresExplorers[{json.dumps(eid)}]"
            view(f"() => {ex}.idle()")
            data, state = view(f"() => {ex}.data"), view(f"() => {ex}.state()")
            problems += [f"{eid} is {w} px wide on a {PHONE} px screen" for w in
                         [view(f"() => document.getElementById({json.dumps(eid)}).scrollWidth")]
                         if width == PHONE and w > PHONE - 10]
            # the horizon: past the escape of every d_QK of the panel, and the loss axis spans it
            if "escape" in data["charts"]:
                esc = state["escapes"]
                if sorted(map(int, esc)) != sorted(data["d_qks"]) or None in esc.values():
                    problems.append(f"{eid}: escapes {esc} within {data['horizon']} steps: the horizon is too short")
                if state["domains"]["loss"]["x"][1] < max(v for v in esc.values() if v is not None):
                    problems.append(f"{eid}: the loss axis ends before the last escape")
            # the drawn curve of the chosen run is its losses (SVG path mapped back through the axes)
            curve = view(f"""() => {{ const c = {ex}.chart('loss'), d = c.path('chosen');
                return {{pts: d, dom: c.dom, px: c.px}}; }}""")
            losses = state["chosen"]["loss"]
            for x, y in curve["pts"][:: max(1, len(curve["pts"]) // 25)]:
                t = _invert(x, curve["dom"]["x"], curve["px"]["x"], "log1p" if data["horizon"] > 1000 else "lin")
                want = losses[round(t)]
                got = 10 ** _invert(y, [math.log10(v) for v in curve["dom"]["y"]], curve["px"]["y"][::-1], "lin")
                if abs(math.log10(got / want)) > 0.01:
                    problems.append(f"{eid}: drawn at t = {t:.0f}: {got:.4g}, the run says {want:.4g}")
                    break
            # presets: each sets its values and its caption and draws every chart; no control of
            # the page moves (this explorer's, nor those of the other explorers below it)
            where, others = view(CONTROLS, eid), {o: view(CONTROLS, o) for o in ids if o != eid}
            for pre in data["presets"]:
                p.click(f"#{eid} button.cx-preset[data-preset='{pre['id']}']")
                view(f"() => {ex}.idle()")
                empty = [k for k, n in view(DRAWN, eid).items() if n == 0]
                moved = [o for o in others if view(CONTROLS, o) != others[o]]
                shown = view(f"() => [...document.querySelectorAll('#{eid} .cx-look.cx-shown')]"
                             ".map(e => e.dataset.preset)")
                wrong = {f"draws nothing in the charts {empty}": empty,
                         f"moved the controls of {moved}": moved,
                         f"did not set {pre['values']}": view(f"() => {ex}.values()") != pre["values"],
                         f"shows the captions {shown}": shown != [pre["id"]],
                         "moved the controls of its own explorer": view(CONTROLS, eid) != where}
                problems += [f"{eid}: preset {pre['id']} {why}" for why, bad in wrong.items() if bad]
                problems += [f"{eid}, preset {pre['id']}: {x}" for x in view(LOSS_AXIS_AND_READOUT, eid)]
            # the keyboard on the beta slider: off every preset, no caption, nothing moves
            p.focus(f"#{eid}-beta")
            before = view(f"() => {ex}.values().beta")
            p.keyboard.press("ArrowRight" if before < data["beta"][1] else "ArrowLeft")
            view(f"() => {ex}.idle()")
            if view(f"() => {ex}.values().beta") == before:
                problems.append(f"{eid}: the arrow keys did not move beta from {before}")
            if view(CONTROLS, eid) != where:
                problems.append(f"{eid}: controls moved off the presets")
            # a tap (phone) or the pointer (desktop) on the loss chart reads the values there
            svg = p.locator(f"#{eid} .cx-chart[data-chart='loss'] svg")
            svg.scroll_into_view_if_needed()
            box = svg.bounding_box()
            x, y = box["x"] + 0.6 * box["width"], box["y"] + 0.5 * box["height"]
            if width == PHONE:
                p.touchscreen.tap(x, y)
            else:
                p.mouse.move(x, y)
            hover = view(f"() => document.querySelector('#{eid} .cx-chart[data-chart=\"loss\"] ~ .cx-hover').textContent")
            if not hover.startswith("t = "):
                problems.append(f"{eid}: {'a tap on' if width == PHONE else 'the pointer over'} the loss chart "
                                f"reads {hover!r}")
            # the zoom on the rank-one floor: a few decades around it, the runs still drawn there
            if p.locator(f"#{eid} input[data-control='zoom']").count():
                p.check(f"#{eid} input[data-control='zoom']")
                lo, hi = view(f"() => {ex}.state().domains.loss.y")
                drawn = view(DRAWN, eid)["loss"]
                if not (view(f"() => {ex}.state().zoom") and 0 < math.log10(hi / lo) < 4 and drawn):
                    problems.append(f"{eid}: the zoom shows [{lo:.3g}, {hi:.3g}] with {drawn} points drawn")
                p.uncheck(f"#{eid} input[data-control='zoom']")
            if len(data["d_qks"]) > 1:     # the attention scale switch
                p.check(f"#{eid} input[value='1/sqrt(d_qk)']")
                view(f"() => {ex}.idle()")
                if view(f"() => {ex}.values().scale") != "1/sqrt(d_qk)":
                    problems.append(f"{eid}: the scale switch did nothing")
        # a link of the prose sets its preset and scrolls to the explorer
        link = p.locator("a.cx-preset-link").last
        if link.count():
            eid, pid = link.get_attribute("href")[1:], link.get_attribute("data-cx-preset")
            ex = f"window.convresExplorers[{json.dumps(eid)}]"
            link.click()
            view(f"() => {ex}.idle()")
            values = view(f"() => {ex}.values()")
            want = next(q["values"] for q in view(f"() => {ex}.data.presets") if q["id"] == pid)
            # on a phone the controls fill the screen: the link shows the readout and the loss chart
            top, bottom, screen = view(f"""() => {{ const e = document.getElementById({json.dumps(eid)}),
                r = (e.querySelector('.cx-readout') || e).getBoundingClientRect(),
                c = (e.querySelector('.cx-chart') || e).getBoundingClientRect();
                return [{"r" if width == PHONE else "e.getBoundingClientRect()"}.top, c.bottom, innerHeight]; }}""")
            if values != want or not -5 < top < 200 or (width == PHONE and bottom > screen):
                problems.append(f"the link to {eid}/{pid} set {values} and scrolled to {top:.0f} px "
                                f"(its first chart ends at {bottom:.0f} px)")
        _fail(f"{explorer_page} at {width} px", problems + view.problems)


# The loss chart's axis follows the runs of the setting, not the faint previous one (it spans no
# more than the drawn runs, padded, and their envelope down to 1/100 of their lowest loss); a run
# that is neither converged nor diverged reads its last loss also relative to its start, as the
# prose does ("... of Φ₀").
LOSS_AXIS_AND_READOUT = r"""(id) => {
  const ex = window.convresExplorers[id], s = ex.state(), lo = ex.chart('loss').dom.y[0], out = [];
  const runs = [s.b0, s.chosen].filter(r => r.loss.length);
  const least = Math.min(...runs.flatMap(r => r.loss.filter(v => v > 0)));
  if (lo < least / 100 / 2) out.push(`the loss axis reaches ${lo.toExponential(2)}, the runs only ${least.toExponential(2)}`);
  const text = document.querySelector('#' + id + ' .cx-readout').textContent;
  if (runs.some(r => r.status === 'max_steps') && !/of Φ₀\) at step/.test(text))
    out.push(`the readout gives no loss relative to its start: ${text.slice(0, 120)}`);
  return out;
}"""


def _invert(px: float, dom, rng, kind: str) -> float:
    """A pixel position mapped back to a value of an axis (domain, pixel range, scale)."""
    f = {"lin": lambda v: v, "log1p": lambda v: math.log10(1 + v)}[kind]
    v = f(dom[0]) + (px - rng[0]) / (rng[1] - rng[0]) * (f(dom[1]) - f(dom[0]))
    return v if kind == "lin" else 10 ** v - 1
