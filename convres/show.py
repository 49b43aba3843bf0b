"""What the chapters show of the package: its real source (:func:`source`, without docstrings) and
its tables (:func:`table`, TeX in headers and cells), typeset alike on every page."""

from __future__ import annotations

import ast
import functools
import html
import inspect
import math
import numbers
import re
import textwrap
import time
from collections.abc import Mapping

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

#: When a chapter's first cell imported this module (:func:`glue_seconds`).
_STARTED = time.perf_counter()


class Source(str):
    """Source code that a notebook displays as a highlighted Python block."""

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}\n```"


def source(*objs) -> Source:
    """The source of each function or class in ``objs`` (docstrings removed), one after another."""
    parts = []
    for obj in objs:
        code = textwrap.dedent(inspect.getsource(obj))
        node, lines = ast.parse(code).body[0], code.splitlines()
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and ast.get_docstring(node) is not None:
            del lines[node.body[0].lineno - 1:node.body[0].end_lineno]
        parts.append("\n".join(lines))
    return Source("\n\n".join(parts))


def tex(text) -> str:
    """``text`` as escaped HTML, each ``$...$`` as Sphinx's inline math markup (MathJax typesets
    only marked elements)."""
    parts = str(text).split("$")
    if len(parts) % 2 == 0:
        raise ValueError(f"unbalanced $ in {text!r}: every $ opening TeX needs a closing one.")
    return "".join(html.escape(p) if i % 2 == 0 else
                   f'<span class="math notranslate nohighlight">\\({html.escape(p)}\\)</span>'
                   for i, p in enumerate(parts))


def power_of_ten(number: str) -> str:
    """E-notation as TeX (``"6.4e-10"``: ``6.4 \\times 10^{-10}``); any other string as it is."""
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)e(?:\+|(-))0*(\d+)", number)
    if not m or m[3] == "0":
        return m[1] if m else number
    power = f"10^{{{m[2] or ''}{m[3]}}}"
    return power if m[1] == "1" else rf"{m[1]} \times {power}"


def sci(x: float, digits: int = 1) -> str:
    """``x`` in scientific notation as inline TeX: ``sci(0.00123)`` gives ``$1.2 \\times 10^{-3}$``."""
    return f"${power_of_ten(f'{x:.{digits}e}')}$"


def _cell(value, spec, na: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return na
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if callable(spec):
        value = spec(value)
    elif spec is not None:
        value = spec.format(value)
    elif isinstance(value, numbers.Integral):
        value = f"{value:,}"
    elif isinstance(value, numbers.Real):
        value = f"{value:.3g}"
    if isinstance(value, str) and power_of_ten(value) != value:
        value = f"${power_of_ten(value)}$"
    return tex(value)


def number(x: float, spec: str = ".2g") -> str:
    """``x`` by ``spec`` for the prose: a minus sign U+2212, never a negative zero."""
    out = format(x + 0.0, spec)
    return "\N{MINUS SIGN}" + out[1:] if out.startswith("-") else out


def fixed(x: float, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals for the prose (:func:`number`): ``-0.004`` reads ``0.00``."""
    return number(round(x, digits), f".{digits}f")


#: The TeX commands :func:`plain` spells out for a terminal.
_SPELLED = {"le": "<=", "ge": ">=", "times": "x", "dots": "...", "|": "||", ",": " ", " ": " ", "big": ""}


def plain(text: str) -> str:
    """``text`` without MathJax (the PDF, a terminal): delimiters dropped, commands spelled out."""
    text = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", re.sub(r"\\[()]|\$", "", text))
    return re.sub(r"\\([A-Za-z]+|[|, ])", lambda m: _SPELLED.get(m[1], m[1]), text)


class HTMLBlock:
    """HTML for the site, and its text where HTML is not shown: a row per line, cells by ``|``."""

    def __init__(self, markup: str):
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        markup = re.sub(r"(?i)</t[dh]>", " | ", self.markup.replace("<sub>", "_"))
        markup = re.sub(r"(?i)</tr>|<br\s*/?>|</li>|</p>|</summary>", "\n", markup)
        text = html.unescape(re.sub(r"<[^>]+>", "", markup))        # tags dropped, entities decoded
        return plain("\n".join(line.strip(" |") for line in text.splitlines() if line.strip(" |")))


class Table(Styler):
    """A :func:`table`: a ``Styler`` for the site, plain text where HTML is not shown."""

    def __repr__(self) -> str:
        frame = self.data.rename(columns=lambda c: plain(str(c)))
        frame = frame.map(lambda v: ("yes" if v else "no") if isinstance(v, bool) else
                          plain(v) if isinstance(v, str) else v)
        return frame.to_string(index=not all(self.hide_index_), na_rep="")


def table(data, formats: Mapping | None = None, *, index: bool = False, na: str = ""):
    """A pandas ``Styler`` of ``data`` (a frame, rows or columns), TeX by :func:`tex`; ``formats`` maps
    a column to a format or function, else integers get separators, numbers three digits."""
    frame = data if isinstance(data, pd.DataFrame) else \
        pd.DataFrame(dict(data) if isinstance(data, Mapping) else list(data))
    formats = dict(formats or {})
    unknown = set(formats) - set(frame.columns)
    if unknown:
        raise ValueError(f"formats names columns {sorted(map(str, unknown))} that the table does not "
                         f"have; its columns are {list(map(str, frame.columns))}.")
    styler = Table(frame).format({c: functools.partial(_cell, spec=formats.get(c), na=na)
                                           for c in frame.columns})
    styler = styler.format_index(tex, axis=1)
    styler = styler.format_index(tex, axis=0) if index else styler.hide(axis="index")
    left = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])
            or pd.api.types.is_bool_dtype(frame[c])]
    return styler.set_table_styles({c: [{"selector": "td, th", "props": "text-align: left"}]
                                    for c in left}, overwrite=False)


def glues(fmt=str, **values) -> None:
    """Glue each ``name=value`` (myst-nb): a string as it is, else ``fmt(value)`` or
    ``format(value, fmt)``."""
    from myst_nb import glue

    for name, value in values.items():
        text = value if isinstance(value, str) else fmt(value) if callable(fmt) else format(value, fmt)
        glue(name, text, display=False)


def within(values, low: float, high: float) -> bool:
    """Whether every entry of ``values`` lies strictly between ``low`` and ``high`` (arrays or numbers)."""
    v = np.asarray(values, dtype=float)
    return bool(np.all((low < v) & (v < high)))


def span(values, spec: str = ".1f", sep: str = " to ") -> str:
    """The range of ``values`` for the prose: ``"1.2 to 3.4"``, one value where both ends agree."""
    lo, hi = f"{min(values):{spec}}", f"{max(values):{spec}}"
    return lo if lo == hi else f"{lo}{sep}{hi}"


def glue_seconds(name: str) -> None:
    """Glue as ``name`` the whole seconds since this module was imported (a chapter's run)."""
    glues(**{name: f"{time.perf_counter() - _STARTED:.0f}"})


def superscript_sci(x: float) -> str:
    """``x`` as the explorers write it: ``3.2e-18`` reads ``3.2 × 10⁻¹⁸``."""
    m, e = f"{x:.1e}".split("e")
    return f"{m} × 10" + str(int(e)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
