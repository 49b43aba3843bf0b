"""Sphinx extension of the convres book (loaded through ``sphinx.local_extensions`` in ``_config.yml``).

Jobs for the published site:

1. **No CDN.** MathJax, require.js, the ipywidgets embed manager, Vega and Vega-Lite are installed
   from the npm registry at exact versions (``web/package.json`` and its lock file, ``make
   assets``) into ``web/node_modules/`` (git-ignored). This extension copies the files the pages
   need straight into the output, ``_build/html/_static/vendor/``, where ``mathjax_path`` and
   ``nb_ipywidgets_js`` in ``_config.yml`` point (Sphinx resolves those relative to ``_static``).
   The site's own scripts (``web/explorer.js``, ``web/explorer.css``, ``web/mathjax2-shim.js``) go
   to ``_build/html/_static/convres/``. None of them is put in a *source* static folder
   (``book/_static``): Jupyter Book 1 would inject every ``.js``/``.css`` found there into every
   page.
2. **Explorers.** A page that holds an explorer (``convres.explorers``: an element of class
   ``convres-explorer``) loads ``explorer.js`` and ``explorer.css``, which draw it with Vega-Lite;
   other pages load neither. Pages with saved ipywidgets load ``mathjax2-shim.js`` first
   (``nb_ipywidgets_js``), which gives the embed manager the MathJax 2 call it makes.
3. **API reference.** ``book/api.md`` gets one ``automodule`` section per public module of
   ``convres`` (found with ``pkgutil``), so a new module is documented without editing the page;
   ``convres.name`` re-exports resolve to the module that defines them.
4. **Clean pages.** Figures are rendered inline even when ``MPLBACKEND`` is set in the
   environment, and inline scripts that Jupyter Book 1 registers twice (a JavaScript error on
   every page) are included once.
"""

from __future__ import annotations

import os
import pkgutil
import shutil
import sys
from pathlib import Path

from sphinx.errors import ExtensionError
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
    ("requirejs/require.js", "require.js"),
    ("mathjax/package.json", "mathjax/package.json"),  # version and license of each copy
    ("requirejs/package.json", "requirejs-package.json"),
    ("@jupyter-widgets/html-manager/dist", "html-manager"),
    ("@jupyter-widgets/html-manager/package.json", "html-manager/package.json"),
    ("vega/build/vega.min.js", "vega/vega.min.js"),
    ("vega/LICENSE", "vega/LICENSE"),
    ("vega/package.json", "vega/package.json"),
    ("vega-lite/build/vega-lite.min.js", "vega-lite/vega-lite.min.js"),
    ("vega-lite/LICENSE", "vega-lite/LICENSE"),
    ("vega-lite/package.json", "vega-lite/package.json"),
]
WEB = Path(__file__).resolve().parent
OWN = "_static/convres"  # folder of the output that holds the site's own scripts
OWN_FILES = ["explorer.js", "explorer.css", "mathjax2-shim.js"]
EXPLORER_MARK = 'class="convres-explorer'  # what convres.explorers.Explorer.html() writes
# Files of html-manager/dist the pages never load (source maps, the non-AMD bundles).
_SKIP = shutil.ignore_patterns("*.map", "embed.js", "embed.js.LICENSE.txt", "libembed-amd.js")

# Order of the API page; modules not listed follow in alphabetical order.
API_ORDER = ["model", "gd", "rank", "theory", "certify", "collapse", "data", "experiments",
             "cache", "paths", "runtime", "plotting", "explorers", "show", "cli"]


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
            shutil.copytree(source, target, ignore=_SKIP, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    own = Path(app.outdir) / OWN
    own.mkdir(parents=True, exist_ok=True)
    for name in OWN_FILES:
        shutil.copy2(WEB / name, own / name)


def api_modules() -> list[str]:
    """Names of the public submodules of ``convres``, in the order of the API page."""
    import convres

    names = [m.name for m in pkgutil.iter_modules(convres.__path__) if not m.name.startswith("_")]
    ordered = [n for n in API_ORDER if n in names]
    return ordered + sorted(set(names) - set(ordered))


def _api_source(app, docname: str, source: list) -> None:
    if docname != "api":
        return
    sections = []
    for name in api_modules():
        if f".. automodule:: convres.{name}\n" in source[0]:
            continue  # documented by hand in api.md
        # autodoc writes reStructuredText, so the directive goes through eval-rst
        sections.append(f"\n## `convres.{name}`\n\n```{{eval-rst}}\n.. automodule:: convres.{name}\n"
                        "   :members:\n```\n")
    source[0] += "".join(sections)


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
    # Explorers: their script (it loads Vega and Vega-Lite itself) and style, on their pages only.
    if EXPLORER_MARK in (context.get("body") or ""):
        app.add_css_file(f"{OWN.removeprefix('_static/')}/explorer.css")
        app.add_js_file(f"{OWN.removeprefix('_static/')}/explorer.js", defer="defer")
    # The widget manager loads its fonts from the folder require.js reports for it, which is the
    # page's folder unless require.js is told (a global `require` before require.js is its config).
    if any(str(getattr(js, "filename", "") or "").endswith("embed-amd.js") for js in unique):
        app.add_js_file(None, priority=499, body=(
            "var require = {paths: {'@jupyter-widgets/html-manager/dist': new URL("
            "(document.documentElement.dataset.content_root || './') + "
            f"'{VENDOR}/html-manager', document.baseURI).href}}}};"))


def _api_always_outdated(app, env, added, changed, removed) -> list[str]:
    # The API page depends on the package, not on api.md: re-read it on every build.
    return ["api"] if "api" in env.found_docs else []


def _inline_figures(app, config) -> None:
    # The kernels that execute the chapters inherit this environment. With MPLBACKEND=Agg (common
    # in CI scripts) matplotlib_inline is not active and every figure becomes the text
    # "<Figure size ...>" instead of an image; without it, ipykernel selects the inline backend.
    backend = os.environ.get("MPLBACKEND")
    if backend and "inline" not in backend:
        logger.info(f"convres_site: ignoring MPLBACKEND={backend} for the notebook kernels "
                    "(figures must be rendered inline)")
        del os.environ["MPLBACKEND"]


def setup(app):
    app.connect("config-inited", _inline_figures)
    app.connect("builder-inited", _check_assets)
    app.connect("source-read", _api_source)
    app.connect("env-get-outdated", _api_always_outdated)
    app.connect("missing-reference", _resolve_convres_name)
    app.connect("autodoc-process-docstring", _keep_attribute_docstring, priority=400)
    app.connect("autodoc-process-docstring", _restore_attribute_docstring, priority=600)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
