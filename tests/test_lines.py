"""Code and outputs fit the column: no line of a notebook cell on the built site is longer than 88
characters.

Reads every chapter page of the built site (``_build/html``, or ``CONVRES_SITE_DIR``) as a reader
gets it: the ``pre`` blocks of each cell's input and of its outputs, folded ones (``hide-input``,
``hide-output``) included, cells removed from the page (``remove-cell``, ``remove-input``) not.
A failure names the chapter, the cell, and for code the line of ``book/<chapter>.md`` it comes
from. Longer lines scroll sideways on a screen and are cut or wrapped on paper (conventions: "keep
code and outputs within 88 characters").

Without a built site the tests are skipped (``CONVRES_SITE_REQUIRED=1``, set by ``make browser``,
turns that into a failure). Run after building the book.
"""

from __future__ import annotations

import html.parser
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()
REQUIRED = os.environ.get("CONVRES_SITE_REQUIRED") == "1"
MAX_LINE = 88


class _Cells(html.parser.HTMLParser):
    """The text of the ``pre`` blocks of every notebook cell of a page, as
    ``[(cell number, "input" | "output", text), ...]`` (cells numbered from 1 in page order)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[int, str, str]] = []
        self._stack: list[str | None] = []   # per open element: "cell", "input", "output" or None
        self._cells = 0
        self._pre: list[str] | None = None
        self._pre_depth = 0

    def _where(self) -> str | None:
        for mark in reversed(self._stack):
            if mark in ("input", "output"):
                return mark
        return None

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "hr", "input", "meta", "link", "wbr", "source", "col"):
            return  # void elements have no end tag
        classes = (dict(attrs).get("class") or "").split()
        mark = None
        if tag == "div" and "cell" in classes:
            self._cells += 1
            mark = "cell"
        elif tag == "div" and "cell_input" in classes:
            mark = "input"
        elif tag == "div" and "cell_output" in classes:
            mark = "output"
        self._stack.append(mark)
        if tag == "pre" and self._where():
            if self._pre is None:
                self._pre, self._pre_depth = [], len(self._stack)

    def handle_endtag(self, tag):
        if tag in ("br", "img", "hr", "input", "meta", "link", "wbr", "source", "col"):
            return
        if self._pre is not None and tag == "pre" and len(self._stack) == self._pre_depth:
            self.blocks.append((self._cells, self._where(), "".join(self._pre)))
            self._pre = None
        if self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._pre is not None:
            self._pre.append(data)


def cell_blocks(page: Path) -> list[tuple[int, str, str]]:
    parser = _Cells()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.blocks


def long_lines(page: Path, limit: int = MAX_LINE) -> list[str]:
    """One message per line longer than ``limit`` in the cells of ``page``."""
    source = ROOT / "book" / page.with_suffix(".md").name
    md = source.read_text(encoding="utf-8").splitlines() if source.is_file() else []
    problems = []
    for cell, kind, text in cell_blocks(page):
        for line in text.splitlines():
            line = line.rstrip().expandtabs()
            if len(line) <= limit:
                continue
            where = f"cell {cell} {kind}"
            if kind == "input":
                numbers = [k for k, x in enumerate(md, 1) if x.rstrip() == line]
                if numbers:
                    where = f"book/{source.name}:{numbers[0]} (cell {cell})"
            problems.append(f"{where}: {len(line)} characters: {line[:60]}...")
    return problems


def _chapters() -> list[str]:
    if not (SITE / "index.html").exists():
        return []
    return sorted(p.name for p in SITE.glob("*.html")
                  if (ROOT / "book" / p.with_suffix(".md").name).is_file())


CHAPTERS = _chapters()


@pytest.mark.parametrize("page", CHAPTERS or ["(no built site)"])
def test_code_and_outputs_fit_the_column(page):
    if page not in CHAPTERS:
        reason = f"no built site at {SITE} (build it first: make book)"
        if REQUIRED:
            pytest.fail(reason + " (CONVRES_SITE_REQUIRED=1 makes this a failure)")
        pytest.skip(reason)
    problems = long_lines(SITE / page)
    assert not problems, (f"{page}: {len(problems)} lines of code or output longer than "
                          f"{MAX_LINE} characters:\n  " + "\n  ".join(problems))


def test_the_check_sees_long_lines(tmp_path):
    """The parser finds a long line in an input and an output, and ignores text outside cells."""
    long = "x" * (MAX_LINE + 1)
    page = tmp_path / "page.html"
    page.write_text(f"""<html><body><pre>{long}</pre>
<div class="cell docutils container"><div class="cell_input docutils container">
<div class="highlight"><pre><span></span><span class="n">{long}</span>
short</pre></div></div>
<div class="cell_output docutils container"><div class="output stream"><div class="highlight">
<pre><span></span>ok
{long}&amp;</pre></div></div></div></div></body></html>""")
    blocks = cell_blocks(page)
    assert [(c, k) for c, k, _ in blocks] == [(1, "input"), (1, "output")]
    problems = long_lines(page)
    assert len(problems) == 2 and problems[0].startswith("cell 1 input: 89 characters")
    assert problems[1].startswith(f"cell 1 output: {MAX_LINE + 2} characters")
