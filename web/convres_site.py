r"""Sphinx extension of the convres book (loaded through ``sphinx.local_extensions`` in ``_config.yml``).

Jobs for the published site:

1. **No CDN.** MathJax is installed from the npm registry at an exact version
   (``web/package.json`` and its lock file, ``make assets``) into ``web/node_modules/``
   (git-ignored). This extension copies the files the pages need straight into the output,
   ``_build/html/_static/vendor/``, where ``mathjax_path`` in ``_config.yml`` points (Sphinx
   resolves it relative to ``_static``). The site's own scripts (``web/model.js``,
   ``web/explorer.js``, ``web/explorer.css``, ``web/site.js``, ``web/site.css``) go
   to ``_build/html/_static/convres/``. None of them is put in a *source* static folder
   (``book/_static``): Jupyter Book 1 would inject every ``.js``/``.css`` found there into every
   page.
2. **Explorers.** A page that holds an explorer (``convres.explorers``: an element of class
   ``convres-explorer``) loads ``model.js`` (the model and gradient descent, run in the page),
   ``explorer.js`` and ``explorer.css`` (the controls and the charts); other pages load none of
   them.
3. **API reference.** One page per group of modules, ``book/api/<page>.md`` (``API_PAGES``
   below), each filled at build time with one ``automodule`` section per module of its group, so
   that no page is too long to read; ``book/api.md`` gets the list of pages with what each module
   holds. A public module of ``convres`` (found with ``pkgutil``) that is on no page is a build
   warning. ``convres.name`` re-exports resolve to the module that defines them.
4. **Clean pages.** Figures are rendered inline even when ``MPLBACKEND`` is set in the
   environment, and inline scripts that Jupyter Book 1 registers twice (a JavaScript error on
   every page) are included once. One search box (the sidebar's; the theme's empty top bar with a
   second one is switched off). ``web/site.css`` and ``web/site.js`` (every page): print rules
   (code and outputs wrap, no sidebars), API signatures that fit a phone, and tables of the text
   that do not fit a phone shown as one card per row.
5. **One repository URL.** ``repository.url`` of ``_config.yml`` is the only place the URL is
   written: every ``{{ repository_url }}`` in a page's source becomes it (code blocks included),
   like the theme's buttons and Binder links, which JB1 derives from the same setting.
6. **API page.** Constants whose value is long or an object repr are shown without it (their
   docstrings say what they hold), so no signature line runs across the page.
7. **Citations in one style.** The reference lists label each work the way the text cites it,
   "Qin et al., 2025" (``bibtex_default_style: convres``: pybtex's ``plain`` sorting and entry
   format with author-year labels).
8. **The whole-book PDF.** For the LaTeX builder (``make pdf``) the book is given a book's shape:
   the introduction is one chapter, each part of ``_toc.yml`` a ``\part`` (a caption starting
   with "Appendix" starts the appendix), the chapters' empty "References" sections and the
   Bibliography page are dropped, and the references are listed once, at the end, each work once,
   sorted by author. When ``_build/latex/convres.pdf`` exists, the next HTML build serves it as
   ``convres.pdf`` and lists it in every page's download menu; without it, no page links it. When
   that changes, every page is written again from the kept doctrees (no chapter is executed again),
   so ``make pdf`` after an HTML build, then an incremental HTML build, gives a site with the PDF.
9. **Math in docstrings.** The package's docstrings write formulas in ASCII inside inline
   literals (``mu <= 1/L_B``, ``rho = 4 sqrt(2 Phi_0) / sigma_0``). On the API pages a literal
   that reads as a formula (it has ``<=``, ``>=``, ``||``, ``sqrt`` or ``^``, and no Python
   syntax such as ``==`` or ``name=value``) is shown with the symbols: ``μ ≤ 1/L_B``,
   ``ρ = 4 √(2 Φ₀) / σ₀`` (:func:`readable_math`). Names of functions and arguments are left as
   they are (``r_sigma_lower`` keeps its ``sigma``), and the docstrings themselves do not change.
10. **Search.** The search page ranks the chapters above the API reference for a query in words
   (``web/search_scorer.js``, Sphinx's ``html_search_scorer``), and only the search page loads
   the search index (``web/templates/layout.html``: the theme loads it on every page, for a
   search-as-you-type box the book does not use).
11. **Formulas broken for a phone only.** ``\phonebreak`` in an aligned display formula is a line
   break (the next line a quad right of the ``&`` column) on a screen up to 36rem wide, and
   nothing on a wider one: an inline script defines the MathJax macro before MathJax starts
   (``PHONEBREAK_JS``), ``web/site.js`` typesets those formulas again when the window crosses
   that width, and the PDF defines it as nothing (``_config.yml``, ``latex_elements.preamble``).
12. **Numbers pasted into prose.** A number glued into the text (``{glue:text}``) in e-notation,
   ``3.67e+03`` or ``1e-06``, is shown as a formula, :math:`3.67 \times 10^{3}` or
   :math:`10^{-6}` (:func:`convres.show.power_of_ten`, as the book's tables do); the chapters keep
   formatting their numbers as they like.
13. **Executed downloads.** Every chapter's ``.ipynb`` in ``_sources`` (the download menu) holds its
   outputs, also when the chapter came from the execution cache: myst-nb then writes the notebook
   without them, so at the end of the build the cached outputs are merged into it
   (``jupyter_cache``'s ``merge_match_into_notebook``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.errors import ExtensionError
from sphinx.ext.autodoc import AttributeDocumenter, DataDocumenter
from sphinx.util import logging

logger = logging.getLogger(__name__)

NODE_MODULES = Path(__file__).resolve().parent / "node_modules"
VENDOR = "_static/vendor"  # folder of the output that holds the copied assets

# (path under node_modules, path under _build/html/_static/vendor)
ASSETS = [
    ("mathjax/es5/tex-mml-chtml.js", "mathjax/tex-mml-chtml.js"),
    ("mathjax/es5/input", "mathjax/input"),     # TeX extensions loaded on demand
    ("mathjax/es5/output", "mathjax/output"),   # CHTML fonts
    ("mathjax/es5/ui", "mathjax/ui"),           # right-click menu
    ("mathjax/es5/a11y", "mathjax/a11y"),       # accessibility (explorer, speech)
    ("mathjax/es5/sre", "mathjax/sre"),
    ("mathjax/LICENSE", "mathjax/LICENSE"),
    ("mathjax/package.json", "mathjax/package.json"),  # version and license of each copy
]
WEB = Path(__file__).resolve().parent
OWN = "_static/convres"  # folder of the output that holds the site's own scripts
OWN_FILES = ["model.js", "explorer.js", "explorer.css", "site.css", "site.js"]
EXPLORER_MARK = 'class="convres-explorer'  # what convres.explorers.Explorer.html() writes

# The API reference: one page per group of modules (book/api/<page>.md, listed under book/api.md
# in _toc.yml), each short enough to read: at most 15 screens at 1400 px, like a chapter
# (tests/test_site.py; the longest module, convres.model, has a page of its own). Every
# public module of convres is on exactly one page; a module missing here (or a name here that is
# no module) is a build warning, which fails the strict build. "data" stands for the subpackage
# and its modules.
API_PAGES: dict[str, list[str]] = {
    "api/model": ["model"],
    "api/gd": ["gd", "instances"],
    "api/backprop": ["backprop"],
    "api/rank": ["rank", "collapse"],
    "api/theory": ["theory", "lemmas", "checks", "scope"],
    "api/certify": ["certify"],
    "api/separation": ["separation"],
    "api/width": ["width"],
    "api/experiments": ["experiments", "committed"],
    "api/protocol": ["protocol", "stats"],
    "api/experiment_runs": ["experiments.base", "experiments.simulations", "experiments.sim_reruns",
                            "experiments.rank_collapse", "experiments.theorem"],
    "api/experiment_data": ["experiments.jena", "experiments.sst2", "experiments.sst2_arms",
                            "experiments.sst2_claims", "experiments.sst2_baselines"],
    "api/data": ["data", "data.sources", "data.embeddings"],
    "api/data_tasks": ["data.jena", "data.sst2"],
    "api/figures": ["plotting", "figures"],
    "api/explorers": ["explorers", "show"],
    "api/tables": ["report", "tables"],
    "api/tools": ["cache", "runtime", "values", "cli"],
}


# Defines the MathJax macro \phonebreak before MathJax starts (job 11): after the page's MathJax
# configuration (which myst-parser writes as `window.MathJax = {...}`, priority 500) and before
# MathJax itself runs (it is loaded with `defer`). Pages without formulas have no configuration and
# load no MathJax: nothing to do there. The media query is site.css's phone width.
PHONEBREAK_JS = (
    "(function () { var m = window.MathJax; if (!m || m.version) return;"
    " m.tex = m.tex || {}; m.tex.macros = m.tex.macros || {};"
    " m.tex.macros.phonebreak = window.matchMedia('(max-width: 36rem)').matches"
    " ? '\\\\\\\\ &\\\\quad ' : ''; })();")


def _site_settings(app, config) -> None:
    # The search page's ranking and the page layout that loads the search index only there (job 10).
    if not config.html_search_scorer:
        config.html_search_scorer = str(WEB / "search_scorer.js")
    config.templates_path.append(str(WEB / "templates"))


def _check_assets(app) -> None:
    if app.builder.format != "html":
        return
    missing = [src for src, _ in ASSETS if not (NODE_MODULES / src).exists()]
    if missing:
        raise ExtensionError(
            f"convres_site: the site's JavaScript is not installed (missing under {NODE_MODULES}: "
            f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}). "
            "Run `make assets` (npm ci in web/, pinned versions) before building the book.")
    out = Path(app.outdir) / VENDOR
    for src, dst in ASSETS:
        source, target = NODE_MODULES / src, out / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    own = Path(app.outdir) / OWN
    own.mkdir(parents=True, exist_ok=True)
    for name in OWN_FILES:
        shutil.copy2(WEB / name, own / name)


def api_modules() -> list[str]:
    """Names of the public modules of ``convres`` (``model``, ..., a subpackage and then its own
    modules: ``data``, ``data.jena``, ...), in alphabetical order."""
    import convres

    result = []
    for m in sorted(pkgutil.iter_modules(convres.__path__), key=lambda m: m.name):
        if m.name.startswith("_"):
            continue
        result.append(m.name)
        if m.ispkg:
            sub = importlib.import_module(f"convres.{m.name}")
            result += sorted(f"{m.name}.{s.name}" for s in pkgutil.iter_modules(sub.__path__)
                             if not s.name.startswith("_"))
    return result


def api_page_problems() -> list[str]:
    """What is wrong with ``API_PAGES``: a public module on no page or on two, a name that is no
    module, a page with no source file."""
    modules, listed = set(api_modules()), [m for names in API_PAGES.values() for m in names]
    problems = [f"convres.{m} is on no page of the API reference: add it to API_PAGES in "
                "web/convres_site.py" for m in sorted(modules - set(listed))]
    problems += [f"API_PAGES lists convres.{m}, which is not a public module" for m in
                 sorted(set(listed) - modules)]
    problems += [f"API_PAGES lists convres.{m} twice" for m in sorted(set(listed))
                 if listed.count(m) > 1]
    problems += [f"API_PAGES has the page {page}, but book/{page}.md does not exist: write it (a title "
                 "and what the page holds) and list it in _toc.yml" for page in API_PAGES
                 if not (WEB.parent / "book" / f"{page}.md").is_file()]
    return problems


def _module_summary(name: str) -> str:
    """The first sentence of a module's docstring (for the API reference's list of pages)."""
    doc = (importlib.import_module(f"convres.{name}").__doc__ or "").strip()
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", first).replace("``", "`")  # reST -> MyST
    return first.split(". ")[0].rstrip(".") + "." if first else ""


def _api_source(app, docname: str, source: list) -> None:
    if docname == "api":
        for problem in api_page_problems():
            logger.warning(f"convres_site: {problem}")
        # the list of pages, each with its modules and what they hold
        rows = [""]
        for page, names in API_PAGES.items():
            rows.append(f"- {{doc}}`{page}`")
            rows += [f"  - {{py:mod}}`convres.{n}`: {_module_summary(n)}" for n in names]
        source[0] += "\n".join(rows) + "\n"
        return
    if docname not in API_PAGES:
        return
    sections = []
    for name in API_PAGES[docname]:
        if f".. automodule:: convres.{name}\n" in source[0]:
            continue  # documented by hand in the page
        # autodoc writes reStructuredText, so the directive goes through eval-rst
        sections.append(f"\n## `convres.{name}`\n\n```{{eval-rst}}\n.. automodule:: convres.{name}\n"
                        "   :members:\n```\n")
    source[0] += "".join(sections)


GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "eps": "ε", "epsilon": "ε",
         "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "rho": "ρ", "sigma": "σ", "tau": "τ",
         "theta": "θ", "psi": "ψ", "omega": "ω", "Phi": "Φ", "Theta": "Θ", "Delta": "Δ"}
_GREEK_WORD = re.compile(r"(?<![\w.])(" + "|".join(sorted(GREEK, key=len, reverse=True))
                         + r")(?![A-Za-z])")
_POWERS = {"2": "²", "3": "³", "T": "ᵀ", "-1": "⁻¹", "-2": "⁻²", "-1/2": "⁻¹ᐟ²", "1/2": "¹ᐟ²"}
_FORMULA = re.compile(r"<=|>=|\|\||\bsqrt\b|\^|!=")       # what makes a literal a formula
_PYTHON = re.compile(r"==|\bdef\b|\bimport\b|\w\(\w+=|\w=\w")   # ... and what makes it code


def readable_math(text: str) -> str:
    """An ASCII formula of a docstring with its symbols (job 9): Greek names as letters (a whole
    word, or one followed by ``_``: ``sigma_0`` -> ``σ₀``, not ``r_sigma``), a digit subscript
    after a letter, ``sqrt`` as ``√``, small powers as superscripts, ``<=``, ``>=``, ``!=``,
    ``->`` and ``||`` as ``≤``, ``≥``, ``≠``, ``→`` and ``‖``. Text that does not read as a formula
    is returned unchanged."""
    if not _FORMULA.search(text) or _PYTHON.search(text):
        return text
    text = _GREEK_WORD.sub(lambda m: GREEK[m[1]], text)
    text = re.sub(r"(?<=[^\W\d_])_(\d)(?!\w)", lambda m: chr(0x2080 + int(m[1])), text)
    text = re.sub(r"\bsqrt\s*(?=[\d(])", "√", text)
    text = re.sub(r"\^\{?(-1/2|1/2|-1|-2|2|3|T)\}?(?![\w/])", lambda m: _POWERS[m[1]], text)
    for a, b in (("<=", "≤"), (">=", "≥"), ("!=", "≠"), ("->", "→"), ("||", "‖")):
        text = text.replace(a, b)
    return text


def _readable_docstring(app, what, name, obj, options, lines) -> None:
    # Runs after the other docstring handlers: every inline literal that reads as a formula.
    text = "\n".join(lines)
    new = re.sub(r"``(.+?)``", lambda m: f"``{readable_math(m[1])}``", text, flags=re.S)
    if new != text:
        lines[:] = new.split("\n")


# A number in e-notation inside a pasted text (job 12), not part of a word or a longer number.
_E_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?e[+-]\d+(?![\w.])")


def _pasted_numbers(app, doctree, docname: str) -> None:
    from convres.show import power_of_ten

    for node in list(doctree.findall(nodes.inline)):
        if "pasted-text" not in node["classes"] or not _E_NUMBER.search(node.astext()):
            continue
        text, parts, at = node.astext(), [], 0
        for m in _E_NUMBER.finditer(text):
            parts += [nodes.Text(text[at:m.start()])] if m.start() > at else []
            parts.append(nodes.math(m[0], power_of_ten(m[0])))
            at = m.end()
        parts += [nodes.Text(text[at:])] if at < len(text) else []
        node.children = []
        node.extend(parts)


def _resolve_convres_name(app, env, node, contnode):
    """Resolve ``convres.name`` (a re-export) or a bare ``name`` used inside a convres module to the
    one place autodoc documents it, e.g. ``convres.init_params`` -> ``convres.model.init_params``."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    py = env.get_domain("py")
    if target.startswith("convres.") and target.count(".") == 1:
        import convres

        obj = getattr(convres, target.split(".", 1)[1], None)
        module = getattr(obj, "__module__", None)
        candidates = [f"{module}.{target.split('.', 1)[1]}"] if module else []
    elif "." not in target and (node.get("py:module") or "").startswith("convres"):
        candidates = [name for name in py.objects if name.startswith("convres.")
                      and name.rsplit(".", 1)[-1] == target]
    else:
        return None
    if len(candidates) != 1 or candidates[0] not in py.objects:
        module = sys.modules.get(node.get("py:module") or "")
        if "." not in target and module is not None and hasattr(module, target):
            return contnode  # a real but undocumented name of that module: shown as code, no link
        return None
    return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], candidates[0],
                           node, contnode)


_ATTRIBUTE_DOCS: dict[str, list[str]] = {}


def _keep_attribute_docstring(app, what, name, obj, options, lines) -> None:
    # napoleon reads a first line "text: more text" of a constant's docstring as "type: description"
    # (convres gives types as annotations), so constants bypass napoleon: saved before it runs ...
    if what in ("data", "attribute"):
        _ATTRIBUTE_DOCS[name] = list(lines)


def _restore_attribute_docstring(app, what, name, obj, options, lines) -> None:
    # ... and restored after it.
    if what in ("data", "attribute") and name in _ATTRIBUTE_DOCS:
        lines[:] = _ATTRIBUTE_DOCS.pop(name)


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe and sphinx-togglebutton register their inline configuration twice under
    # Jupyter Book 1; the second `const THEBE_JS_URL = ...` is a JavaScript error on every page.
    seen, unique = set(), []
    for js in context.get("script_files", []):
        key = (getattr(js, "filename", js) or "", tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    if "script_files" in context:
        context["script_files"][:] = unique
    # Explorers: the model (gradient descent in the page), their script and style, on their pages only.
    if EXPLORER_MARK in (context.get("body") or ""):
        app.add_css_file(f"{OWN.removeprefix('_static/')}/explorer.css")
        app.add_js_file(f"{OWN.removeprefix('_static/')}/model.js", defer="defer")
        app.add_js_file(f"{OWN.removeprefix('_static/')}/explorer.js", defer="defer")


def _api_always_outdated(app, env, added, changed, removed) -> list[str]:
    # The API pages depend on the package, not on their sources: re-read them on every build.
    return [d for d in ["api", *API_PAGES] if d in env.found_docs]


def _inline_figures(app, config) -> None:
    # The kernels that execute the chapters inherit this environment. With MPLBACKEND=Agg (common
    # in CI scripts) matplotlib_inline is not active and every figure becomes the text
    # "<Figure size ...>" instead of an image; without it, ipykernel selects the inline backend.
    backend = os.environ.get("MPLBACKEND")
    if backend and "inline" not in backend:
        logger.info(f"convres_site: ignoring MPLBACKEND={backend} for the notebook kernels "
                    "(figures must be rendered inline)")
        del os.environ["MPLBACKEND"]


# --------------------------------------------------------------------------- one repository URL
REPOSITORY_MARK = "{{ repository_url }}"


def repository_url(config) -> str:
    """``repository.url`` of ``_config.yml`` (JB1 passes it to the theme as ``repository_url``)."""
    url = (config.html_theme_options or {}).get("repository_url", "")
    return url.rstrip("/")


def _one_search_box(app, config) -> None:
    # pydata-sphinx-theme 0.17 fills an empty `navbar_persistent` with a search button: a top bar
    # that holds only a second search box next to the sidebar's. Asked for explicitly, it stays
    # empty and the top bar is not drawn (narrow screens keep the article header's search icon).
    config.html_theme_options.setdefault("navbar_persistent", [])


def _insert_repository_url(app, docname: str, source: list) -> None:
    if REPOSITORY_MARK not in source[0]:
        return
    url = repository_url(app.config)
    if not url:
        raise ExtensionError(f"convres_site: {docname} uses {REPOSITORY_MARK} but _config.yml "
                             "sets no repository.url")
    source[0] = source[0].replace(REPOSITORY_MARK, url)


# --------------------------------------------------------------------------- API page
def _noisy(value) -> bool:
    text = repr(value)
    return len(text) > 100 or "<" in text


class _QuietDataDocumenter(DataDocumenter):
    """Module constants: the value is shown only when it is short and readable."""

    priority = DataDocumenter.priority + 1

    def should_suppress_value_header(self) -> bool:
        return super().should_suppress_value_header() or _noisy(self.object)


class _QuietAttributeDocumenter(AttributeDocumenter):
    """Class attributes: likewise."""

    priority = AttributeDocumenter.priority + 1

    def should_suppress_value_header(self) -> bool:
        return super().should_suppress_value_header() or _noisy(self.object)


# --------------------------------------------------------------------------- citations
def _register_citation_style() -> None:
    """pybtex style ``convres``: ``plain`` (entries sorted by author, year, title) with labels
    as the text cites them: "He", "Nguyen and Mondelli", "Qin et al." and the year, plus a, b, ...
    when two works get the same label."""
    import pybtex.plugin
    from pybtex.richtext import Text
    from pybtex.style.formatting.plain import Style as Plain
    from pybtex.style.labels import BaseLabelStyle

    def surname(person) -> str:
        return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            labels = []
            for entry in sorted_entries:
                people = entry.persons.get("author") or entry.persons.get("editor") or []
                names = [surname(p) for p in people] or [entry.fields.get("title", "Anon.")[:20]]
                who = names[0] if len(names) == 1 else (
                    f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al.")
                labels.append(f"{who}, {entry.fields.get('year', 'n.d.')}")
            for label in set(labels):
                same = [k for k, x in enumerate(labels) if x == label]
                if len(same) > 1:
                    for suffix, k in zip("abcdefghijklmnopqrstuvwxyz", same):
                        labels[k] = label + suffix
            yield from labels

    class Style(Plain):
        default_label_style = AuthorYearLabels

    pybtex.plugin.register_plugin("pybtex.style.formatting", "convres", Style, force=True)


# --------------------------------------------------------------------------- the whole-book PDF
PDF_NAME = "convres.pdf"


def _built_pdf(app) -> Path | None:
    """The PDF of ``make pdf`` (``_build/latex/convres.pdf``), if there is one."""
    pdf = Path(app.outdir).parent / "latex" / PDF_NAME
    return pdf if pdf.is_file() else None


def _link_pdf(app, pagename, templatename, context, doctree) -> None:
    # Runs after the theme's header buttons (priority 501). The theme's ".pdf" item prints the page
    # (window.print()): it is labelled so on every page. The whole book next to this page's
    # downloads only when the PDF exists (so a site built without `make pdf` links no PDF).
    if app.builder.format != "html":
        return
    for button in context.get("header_buttons", []):
        if button.get("label") != "download-buttons":
            continue
        for item in button["buttons"]:
            if item.get("label") == "download-pdf-button":   # the theme's window.print()
                item.update(text="print this page", icon="fas fa-print",
                            tooltip="Print this page (or save it as a PDF)")
        if not app.env.convres_pdf:
            continue
        button["buttons"].append({
            "type": "link", "url": context["pathto"](PDF_NAME, 1), "text": "book .pdf",
            "tooltip": "The whole book as one PDF", "icon": "fas fa-book",
            "label": "download-book-pdf-button"})


def _find_pdf(app) -> None:
    if app.builder.name == "latex":
        # Sphinx names the PDF's table of contents after the first part ("The paper's theory").
        app.builder.get_contentsname = lambda indexfile: "Contents"
    pdf = _built_pdf(app) if app.builder.format == "html" else None
    app.env.convres_pdf = str(pdf) if pdf else ""
    if pdf:
        logger.info(f"convres_site: serving {pdf} as {PDF_NAME} and linking it from every page")
    if app.builder.format == "html" and (Path(app.outdir) / PDF_NAME).is_file() != bool(pdf):
        # The download menu of every page changes (the last build served the PDF and this one does
        # not, or the reverse): remove the pages, which the builder then writes again from the
        # doctrees it keeps, without reading or executing any chapter.
        for page in Path(app.outdir).rglob("*.html"):
            if not {"_static", "_sources", "_images"} & set(page.relative_to(app.outdir).parts):
                page.unlink()


def _copy_pdf(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / PDF_NAME
    if app.env.convres_pdf:
        shutil.copy2(app.env.convres_pdf, target)
    else:
        target.unlink(missing_ok=True)  # the copy of an earlier build, which no page links now


def _executed_downloads(app, exception) -> None:
    """Job 13: the cached outputs merged into each downloadable notebook that lacks them."""
    if exception is not None or app.builder.format != "html":
        return
    import nbformat
    from jupyter_cache import get_cache

    folder = Path(app.env.mystnb_config.execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    if not folder.is_dir():
        return
    cache = get_cache(folder)
    for path in sorted((Path(app.outdir) / "_sources").glob("**/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            continue
        try:
            _, merged = cache.merge_match_into_notebook(nb)
        except KeyError:  # not in the cache (executed afresh, or never executed)
            continue
        nbformat.write(merged, path)


def _pdf_shape(app, doctree, docname: str) -> None:
    """The LaTeX builder's one big doctree (every chapter inlined into the root document) turned
    into a book; see job 8 of the module docstring."""
    if app.builder.name != "latex" or docname != app.config.root_doc:
        return
    from sphinx.builders.latex.nodes import thebibliography

    top = next(iter(doctree.findall(nodes.section)), None)
    if top is None:
        return
    # Parts: the caption of each toctree of the root document, before its first chapter.
    parts = {}
    for toc in app.env.get_doctree(docname).findall(addnodes.toctree):
        if toc.get("caption") and toc["entries"]:
            parts[toc["entries"][0][1]] = toc["caption"]
    chapters = {n["docname"]: n for n in doctree.findall(addnodes.start_of_file)}
    for first, caption in parts.items():
        if first in chapters:
            tex = r"\part{%s}" % _latex_escape(caption)
            if caption.lower().startswith("appendix"):
                rest = caption.split(":", 1)[1].strip() if ":" in caption else caption
                rest = rest[:1].upper() + rest[1:]
                tex = r"\appendix" + "\n" + r"\part{%s}" % _latex_escape(rest)
            node = chapters[first]
            node.parent.insert(node.parent.index(node), nodes.raw("", tex, format="latex"))
    # The introduction as one chapter: its text and sections (not the chapters that follow) go
    # into a chapter with the root document's title; that title itself is the book's title page.
    title = top.next_node(nodes.title)
    intro = nodes.section(ids=list(top["ids"]), names=list(top["names"]))
    top["ids"], top["names"] = [], []
    intro += nodes.title(title.astext(), title.astext())
    for child in list(top.children):
        if child is title or (isinstance(child, nodes.compound)
                              and "toctree-wrapper" in child["classes"]):
            continue
        top.remove(child)
        intro += child
    top.insert(top.index(title) + 1, intro)
    # No empty "References" sections (their citations went to the one bibliography at the end)
    # and no Bibliography chapter (the end is the bibliography).
    for section in list(doctree.findall(nodes.section)):
        heading = section.next_node(nodes.title)
        if heading is not None and heading.parent is section and heading.astext() == "References" \
                and not any(c.astext().strip() for c in section.children if c is not heading):
            section.parent.remove(section)
    if "bibliography" in chapters:
        chapters["bibliography"].parent.remove(chapters["bibliography"])
    # Proofs (sphinx-proof writes each as an admonition without a title, which LaTeX draws as an
    # empty box heading): plain text opening with an italic "Proof." and closing with a square.
    for box in list(doctree.findall(nodes.admonition)):
        if "proof" not in box["classes"] or not box.children \
                or isinstance(box.children[0], nodes.title):
            continue
        body = list(box.children)
        first = body[0].next_node(nodes.Text) if isinstance(body[0], nodes.paragraph) else None
        if first is not None and first.astext().startswith("Proof. "):
            first.parent.replace(first, nodes.Text(first.astext()[len("Proof. "):]))
            body[0].insert(0, nodes.emphasis("Proof.", "Proof."))
            body[0].insert(1, nodes.Text(" "))
        qed = nodes.raw("", r"\hfill\ensuremath{\square}", format="latex")
        if isinstance(body[-1], nodes.paragraph):
            body[-1] += qed
        else:
            body.append(nodes.paragraph("", "", qed))
        box.replace_self(body)
    # One bibliography: each work once (every chapter listed its own), sorted by its label; the
    # links to the copies that are dropped land on the one kept, and links to the Bibliography
    # page on the first entry.
    for bib in doctree.findall(thebibliography):
        kept: dict[str, nodes.citation] = {}
        for citation in list(bib.children):
            key = citation.astext()
            if key in kept:
                bib.remove(citation)
                kept[key] += nodes.raw("", r"\hypertarget{cite.%s:%s}{}" % (
                    citation["docname"], citation["ids"][0]), format="latex")
            else:
                kept[key] = citation
        ordered = sorted(kept.values(), key=lambda c: c[0].astext().lower())
        bib.children = []
        bib.extend(ordered)
        if ordered:
            ordered[0] += nodes.raw("", r"\label{\detokenize{bibliography::doc}}", format="latex")
        break


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"),
                 ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}")):
        text = text.replace(a, b)
    return text


def setup(app):
    _register_citation_style()
    app.add_css_file(f"{OWN.removeprefix('_static/')}/site.css")
    app.add_js_file(f"{OWN.removeprefix('_static/')}/site.js", defer="defer")
    app.add_js_file(None, body=PHONEBREAK_JS, priority=501)
    app.add_autodocumenter(_QuietDataDocumenter, override=True)
    app.add_autodocumenter(_QuietAttributeDocumenter, override=True)
    app.connect("config-inited", _inline_figures)
    app.connect("config-inited", _one_search_box, priority=100)
    app.connect("config-inited", _site_settings)
    app.connect("builder-inited", _check_assets)
    app.connect("builder-inited", _find_pdf)
    app.connect("source-read", _api_source)
    app.connect("source-read", _insert_repository_url)
    app.connect("env-get-outdated", _api_always_outdated)
    app.connect("html-page-context", _link_pdf, priority=950)
    app.connect("doctree-resolved", _pdf_shape)
    app.connect("doctree-resolved", _pasted_numbers)
    app.connect("build-finished", _copy_pdf)
    app.connect("build-finished", _executed_downloads)
    app.connect("missing-reference", _resolve_convres_name)
    app.connect("autodoc-process-docstring", _keep_attribute_docstring, priority=400)
    app.connect("autodoc-process-docstring", _restore_attribute_docstring, priority=600)
    app.connect("autodoc-process-docstring", _readable_docstring, priority=700)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
