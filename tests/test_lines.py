"""Checks of the built site (``_build/html``, ``CONVRES_SITE_DIR``) and the chapters that need no
browser (tests/test_site.py opens the site in one): code and outputs fit the column (88 characters,
the conventions), every chapter offers its executed notebook, the site's JavaScript is pinned,
no page reads like a template filled in, every module of convres is on one API page and the
API's formulas show their symbols. Skipped without a built site, a failure under
``CONVRES_SITE_REQUIRED=1`` (``make browser``).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()
MAX_LINE = 88


def cell_blocks(page: Path) -> list[tuple[int, str, str]]:
    """The text of the ``pre`` blocks of every notebook cell of a page, as
    ``[(cell number, "input" | "output", text), ...]`` (cells numbered from 1 in page order)."""
    cells = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").select("div.cell")
    return [(k, kind, pre.get_text()) for k, cell in enumerate(cells, 1) for kind in ("input", "output")
            for pre in cell.select(f"div.cell_{kind} pre")]


def long_lines(page: Path, limit: int = MAX_LINE) -> list[str]:
    """One message per line longer than ``limit`` in the cells of ``page`` (the lines of the sources:
    test_code_cells_fit_the_column)."""
    problems = []
    for cell, kind, text in cell_blocks(page):
        lines = [x.rstrip().expandtabs() for x in text.splitlines()]
        problems += [f"cell {cell} {kind}: {len(x)} characters: {x[:60]}..." for x in lines if len(x) > limit]
    return problems


def test_code_and_outputs_fit_the_column(chapter):
    problems = long_lines(SITE / chapter)
    assert not problems, (f"{chapter}: {len(problems)} lines of code or output longer than "
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


# --------------------------------------------------------------------------- the chapters' sources
CELL = re.compile(r"^(`{3,}|~{3,})\{code-cell\}.*\n((?:.*\n)*?)\1[ \t]*$", re.M)


def code_cells(text: str) -> list[tuple[list[str], list[tuple[int, str]]]]:
    """The code cells of a MyST chapter: ``(tags, [(line, text), ...])`` with every line between the
    fences, the cell's metadata (``:tags:`` or a ``---`` YAML block) included."""
    cells = []
    for m in CELL.finditer(text):
        head = re.match(r"---\n(?:.*\n)*?---\n|(?::[\w-]+:.*\n)*", m[2])[0]
        tags = re.search(r"^:?tags:(.*)", head, re.M)
        cells.append((yaml.safe_load(tags[1]) if tags else [],
                      list(enumerate(m[2].splitlines(), text.count("\n", 0, m.start(2)) + 1))))
    return cells


def source_long_lines(path: Path, limit: int = MAX_LINE) -> list[str]:
    """One message per line longer than ``limit`` in a code cell of ``path`` that is not tagged
    ``remove-cell``: its code, and its metadata (a figure's caption and alt text)."""
    return [f"book/{path.name}:{n}: {len(x)} characters: {x.strip()[:60]}..."
            for tags, body in code_cells(path.read_text(encoding="utf-8"))
            if "remove-cell" not in tags for n, x in body if len(x.rstrip()) > limit]


@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "book").glob("*.md")))
def test_code_cells_fit_the_column(source):
    """Every code cell of a chapter's source that reaches a reader (all but ``remove-cell``) fits in
    88 columns, its metadata included: the page does not show a ``remove-input`` cell's code nor a
    figure's caption as written, but the downloadable notebook and source do. The bookkeeping cells
    tagged ``remove-cell`` (glue and assertions) are not held to it."""
    problems = source_long_lines(ROOT / "book" / source)
    assert not problems, (f"{source}: {len(problems)} lines of code cells longer than {MAX_LINE} "
                          "characters:\n  " + "\n  ".join(problems))


def test_the_source_check_sees_long_lines(tmp_path):
    """The source check reads both metadata forms and skips only ``remove-cell``."""
    long = "x" * (MAX_LINE + 1)
    page = tmp_path / "chapter.md"
    page.write_text("\n".join([
        "# A chapter", "", "```{code-cell} ipython3", "---", "tags: [remove-input]", "mystnb:",
        "  figure:", "    caption: |", "      " + long, "---", "x = 1", "```", "",
        "```{code-cell} ipython3", ":tags: [remove-cell]", long, "```", "",
        "````{code-cell} ipython3", ":tags: [hide-input]", long, "````", ""]))
    cells = code_cells(page.read_text())
    assert [tags for tags, _ in cells] == [["remove-input"], ["remove-cell"], ["hide-input"]]
    problems = source_long_lines(page)
    assert len(problems) == 2 and problems[0].startswith("book/chapter.md:9: 95 characters")
    assert problems[1].startswith("book/chapter.md:21: 89 characters")


# --------------------------------------------------------------------------- the whole site
def _is_api(page: str) -> bool:
    return page == "api.html" or page.startswith("api/")


def test_notebook_downloads_are_executed(chapter):
    """Every chapter (a notebook) offers its executed notebook (.ipynb with outputs) for download."""
    if "kernelspec" not in (ROOT / "book" / chapter.replace(".html", ".md")).read_text()[:500]:
        pytest.skip("a page of prose: no notebook")
    notebook = SITE / "_sources" / chapter.replace(".html", ".ipynb")
    assert notebook.is_file() and f"_sources/{notebook.name}" in (SITE / chapter).read_text()
    code = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"
            and "skip-execution" not in c.get("metadata", {}).get("tags", [])]
    assert all(c.get("execution_count") for c in code) and any(c.get("outputs") for c in code)


def test_site_javascript_is_pinned():
    """The site's one JavaScript package, MathJax, is pinned to an exact version, and the lock file agrees."""
    wanted = json.loads((ROOT / "web" / "package.json").read_text())["dependencies"]
    locked = json.loads((ROOT / "web" / "package-lock.json").read_text())["packages"]["node_modules/mathjax"]
    assert list(wanted) == ["mathjax"] and re.fullmatch(r"\d+\.\d+\.\d+", wanted["mathjax"]), wanted
    assert locked["version"] == wanted["mathjax"] and locked["integrity"].startswith("sha512-"), locked


# --------------------------------------------------------------------------- template text
# Leftovers of generated prose (no browser needed), searched in the text of a page's article, code
# excluded; formulas are searched as their TeX source.
TEMPLATE_TEXT = [
    (r"\b[A-Za-z]+\((?:s|es)\)", "a plural written '(s)': say one or several"),
    (r"∈\s*\{[^{},]*\}|\\in\s*\\\{[^{},]*\\\}|\bin \{[^{},]*\}", "a one-element set: say '= x'"),
    (r"∈\s*-?\d|\\in\s*-?\d", "a number after '∈' (a set written as one value)"),
    (r"\b0 (?:are|were|have|hold|do|did)\b|\b0 of (?:the|them|these|those)\b|(?:^|[.!?:;]\s+)0 [a-z]+s\b",
     "a count of zero in a sentence ('0 are ...'): say 'none' or leave the clause out"),
    (r"\b(?:nan|inf)\b", "'nan' or 'inf' in the text (a number that is missing or infinite)"),
    (r"(?<!\| )(?<![`'\"\w.[])None(?! of\b)(?![\w`'\"|\]])", "'None' in the text (a missing value)"),
    (r"\{glue|\bglue:(?:text|math|figure|md)?`", "a glue role that was not replaced"),
]
CODE_TAGS = {"pre", "code", "script", "style", "kbd", "samp", "tt"}
CODE_CLASSES = {"highlight", "cell_input", "sig", "pre", "literal", "sig-name", "headerlink"}


BLOCKS = ["p", "li", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "figcaption", "dt", "dd", "caption",
          "div", "section", "br"]


def prose_blocks(page: str) -> list[str]:
    """The text of ``<article class="bd-article">`` outside code, one block per paragraph, item,
    cell, heading or caption."""
    article = BeautifulSoup(page, "html.parser").select_one("article.bd-article")
    if article is None:
        return []
    code = lambda t: t.name in CODE_TAGS or bool(CODE_CLASSES & set(t.get("class") or []))  # noqa: E731
    for tag in article.find_all(code):
        if not tag.decomposed:
            tag.decompose()
    for tag in article.find_all(BLOCKS):
        tag.insert_before("\0")
        tag.insert_after("\0")
    return article.get_text().split("\0")


def _template_problems(page: str, api: bool = False) -> list[str]:
    problems = []
    for text in (" ".join(b.split()) for b in prose_blocks(page)):
        for pattern, why in TEMPLATE_TEXT:
            if not (api and "None" in why):
                problems += [f"{why}: ...{text[max(0, m.start() - 50):m.end() + 30]}..."
                             for m in re.finditer(pattern, text)]
    return problems


def test_template_text_is_caught():
    """The patterns catch the leftovers of the reader's reviews and pass their corrected forms."""
    bad = ["fails at 6 step(s), by up to", "unstable in the probe (β ∈ 1 at η = 0.01)",
           r"unstable (<span class='math'>\(\beta \in \{1\}\)</span>)", "1 inconclusive and 0 are checks",
           "Results. 0 runs diverged.", "the ratio is nan here", "the gap is None.", "the step is (None)",
           "and 0 were certified", "{glue:text}`x:.2f`"]
    good = ["fails at 6 steps, by up to", r"<span class='math'>\(\beta = 1\)</span>",
            r"<span class='math'>\(\beta \in \{0, 1\}\)</span>", "at step 0 the loss", "0.5 of the runs",
            "<code>None</code> means the default", "None of the runs stalls.", "never returns NaN",
            "feature 0 of X is 1", "int | None", "Callable[[Step], None]", "β ∈ [0, 2]",
            r"<span class='math'>\(x \in \mathbb{R}^n\)</span>"]
    wrap = '<article class="bd-article"><p>{}</p></article>'.format
    assert all(_template_problems(wrap(t)) for t in bad), [t for t in bad if not _template_problems(wrap(t))]
    assert not any(_template_problems(wrap(t)) for t in good), [t for t in good if _template_problems(wrap(t))]


def test_no_template_text(page):
    """No page reads like a template filled in (TEMPLATE_TEXT); code is not searched."""
    problems = _template_problems((SITE / page).read_text(encoding="utf-8", errors="replace"), api=_is_api(page))
    assert not problems, f"{page}, template text:\n  " + "\n  ".join(dict.fromkeys(problems))


def _convres_site():
    sys.path.insert(0, str(ROOT / "web"))
    try:
        import convres_site
    finally:
        sys.path.remove(str(ROOT / "web"))
    return convres_site


def test_every_module_is_on_one_api_page():
    """Every public module of convres is on exactly one API page, and every such page is in the TOC."""
    convres_site = _convres_site()
    assert not convres_site.api_page_problems()
    toc = (ROOT / "_toc.yml").read_text()
    for page in convres_site.API_PAGES:
        assert (ROOT / "book" / f"{page}.md").is_file() and f"- file: {page}\n" in toc, page


def test_readable_math():
    """ASCII formulas of docstrings get their symbols; names and code are left as they are."""
    readable = _convres_site().readable_math
    assert readable("rho = 4 sqrt(2 Phi_0) / sigma_0") == "ρ = 4 √(2 Φ₀) / σ₀"
    assert readable("mu <= 1/L_B") == "μ ≤ 1/L_B"
    assert readable("||theta_t - theta_0|| <= rho") == "‖θ_t - θ₀‖ ≤ ρ"
    assert readable("r_sigma_lower(eps) = sup{r : delta_H(r) <= eps sigma_0}") == \
        "r_sigma_lower(ε) = sup{r : δ_H(r) ≤ ε σ₀}"
    assert readable("((1 - eps) sigma_0)^2") == "((1 - ε) σ₀)²"
    for code in ["mu", "sigma_0", "gradient_descent(params, X, Y, cfg, mu=0.1)", "x == y <= z",
                 "beta=1 <= 2", "Certificate.mu"]:
        assert readable(code) == code, code


def test_the_search_index_loads_on_the_search_page_only(site_pages):
    """Only search.html loads searchindex.js (web/templates/layout.html), and it ranks with the
    book's scorer (web/search_scorer.js, inside language_data.js)."""
    loading = [p for p in site_pages if re.search(r'<script[^>]*searchindex\.js', (SITE / p).read_text())]
    assert loading == ["search.html"], loading[:5]
    assert "var Scorer" in (SITE / "_static" / "language_data.js").read_text()


def test_api_formulas_show_their_symbols(site_pages):
    """No inline literal of an API page is an ASCII formula left as typed (``sqrt``, ``<=``)."""
    api = [p for p in site_pages if _is_api(p)]
    readable = _convres_site().readable_math
    left, shown = [], 0
    for page in api:
        for lit in re.findall(r'<code class="docutils literal notranslate">(.*?)</code>', (SITE / page).read_text(), re.S):
            text = html.unescape(" ".join(re.sub(r"<[^>]+>", " ", lit).split()))
            shown += any(c in text for c in "≤≥√‖")
            if readable(text) != text:
                left.append(f"{page}: {text}")
    assert not left, "ASCII formulas on the API pages:\n  " + "\n  ".join(left[:10])
    assert shown > 20, f"only {shown} formulas with symbols on the API pages: is the docstring hook on?"


def test_pasted_numbers_become_formulas():
    """A glued number in e-notation is typeset as a power of ten (web/convres_site.py, job 12),
    the rest of the pasted text kept; a number in a word or a plain number is left alone."""
    from docutils import nodes

    doc = nodes.paragraph()
    for text in ("3.67e+03", "from 1e-06 to 2.5e-10 steps", "x1e-3y", "0.002"):
        doc += nodes.inline(text, text, classes=["pasted-text"])
    _convres_site()._pasted_numbers(None, doc, "page")
    shown = [[(type(c).__name__, c.astext()) for c in n.children] for n in doc.children]
    assert shown[0] == [("math", r"3.67 \times 10^{3}")]
    assert shown[1] == [("Text", "from "), ("math", "10^{-6}"), ("Text", " to "),
                        ("math", r"2.5 \times 10^{-10}"), ("Text", " steps")]
    assert shown[2] == [("Text", "x1e-3y")] and shown[3] == [("Text", "0.002")]


def test_no_pasted_number_in_e_notation(site_pages):
    """No number glued into a page's prose reads ``3.67e+03`` (job 12 of web/convres_site.py)."""
    raw = [f"{p}: {m}" for p in site_pages
           for m in re.findall(r'<span class="pasted-text">([^<]*\d+(?:\.\d+)?e[+-]\d+[^<]*)</span>',
                               (SITE / p).read_text())]
    assert not raw, "numbers in e-notation in the prose:\n  " + "\n  ".join(raw[:10])
