"""The explorers' rendering: numbers for a page, Vega-Lite specifications, the Explorer object.

Book chapters with explorers: *Rank collapse under gradient descent* and *Explore convergence*.
The published book has no Python kernel, so an explorer is computed at build time on a grid of
slider positions (:mod:`convres.experiments.explorers`) and the browser only picks a position and
draws it with Vega-Lite (pinned and served by the site itself, ``web/package.json``; drawn by
``web/explorer.js``, which formats numbers and builds the rows of a chart exactly as
:func:`format_number` and :func:`series_rows` do). An :class:`Explorer` shows as ``text/html`` on
the site (the data and the charts' specifications) and as ``image/png`` elsewhere (the static
first frame, drawn by :func:`draw_chart` with matplotlib). Every line chart has a faint layer for
the previous position (the ghost trace) and a layer for the values under the pointer; the overview
panel (:func:`overview_chart`, rows by :func:`overview_rows`) is a heatmap over two controls; presets
(:func:`make_preset`) are buttons, and :class:`PresetLink` their links from the prose.
"""

from __future__ import annotations

import base64
import copy
import html
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from .plotting import figure_png
from .show import strip_tags

__all__ = ["DIGITS", "MAX_DATA_BYTES", "FIGURE_WIDTH_IN", "DISPLAY_WIDTH_PX", "COLORS", "round_sig",
           "rounded", "format_number", "decade_text", "readout_text", "value_text", "position_key",
           "log_domain", "decade_ticks", "log_axis_labels", "vega_chart", "series_spec", "series_rows",
           "with_labels", "add_static_labels", "cell_text", "overview_chart", "overview_rows",
           "GHOST_OPACITY", "Explorer", "PresetLink", "make_control", "make_preset", "merge_grid",
           "draw_chart", "explorer_png"]

#: The largest amount of embedded data of one explorer (bytes of JSON).
MAX_DATA_BYTES = 2_000_000

#: Significant digits of every number embedded in a page.
DIGITS = 5

#: Width of the static first frame (inches) and the largest width it is shown at (CSS pixels); the
#: PNG has two image pixels per CSS pixel.
FIGURE_WIDTH_IN = 6.0
DISPLAY_WIDTH_PX = 640

#: Opacity of the ghost trace (the previous position, drawn behind the current one).
GHOST_OPACITY = 0.3

#: Colours (Okabe-Ito, distinguishable with colour-vision deficiencies) of the series; markers and
#: dashes go with them, so that no curve is told apart by colour alone.
COLORS = {"blue": "#0072B2", "orange": "#D55E00", "green": "#009E73", "grey": "#7f7f7f", "black": "#222222"}


def round_sig(x) -> float:
    """``x`` rounded to :data:`DIGITS` significant digits (what a page embeds)."""
    x = float(x)
    return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else x


def rounded(obj):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return round_sig(obj)
    if isinstance(obj, np.ndarray):
        return rounded(obj.tolist())
    if isinstance(obj, Mapping):
        return {k: rounded(v) for k, v in obj.items()}
    return [rounded(v) for v in obj]


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_number(x: float, kind: str = "num") -> str:
    """A number as the explorers' readouts show it (``web/explorer.js`` formats the same way, to the
    character): integers as they are; otherwise three significant digits (ties rounded up, as
    JavaScript's ``toPrecision`` does), in plain notation from 0.01 to 999 and as ``5.25 × 10⁻⁴``
    outside."""
    if kind == "int":
        return str(int(x))
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    exact = Decimal(float(x))
    r = float(exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), rounding=ROUND_HALF_UP))
    e = math.floor(math.log10(abs(r)))
    if -2 <= e <= 2:
        return f"{r:.{max(0, 2 - e)}f}"
    return f"{r / 10 ** e:.2f} × 10{str(e).translate(_SUPERSCRIPT)}"


def decade_text(x: float) -> str:
    """``10⁻⁶`` for a power of ten, else :func:`format_number`."""
    e = round(math.log10(x))
    return f"10{str(e).translate(_SUPERSCRIPT)}" if math.isclose(x, 10.0 ** e) else format_number(x)


def readout_text(lines: Sequence[Sequence]) -> list[str]:
    """The readout lines as plain text: the pieces of a position's ``readout`` (text, numbers and
    ``[number, "int"]``), numbers formatted by :func:`format_number`, HTML tags removed."""
    out = []
    for line in lines:
        parts = []
        for piece in line:
            if isinstance(piece, str):
                parts.append(strip_tags(piece))
            elif isinstance(piece, list):
                parts.append(format_number(piece[0], piece[1]))
            else:
                parts.append(format_number(piece))
        out.append("".join(parts))
    return out


def value_text(v: float) -> str:
    return f"{v:g}"


def position_key(*indices: int) -> str:
    return ",".join(str(i) for i in indices)


def log_domain(values, pad: float = 1.5) -> list[float]:
    v = np.asarray([x for x in values if x > 0 and math.isfinite(x)])
    lo, hi = v.min() / pad, v.max() * pad
    return [10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))]


_LABELS = "labels[datum.label] || datum.label"


def decade_ticks(domain, most: int = 9) -> list[float]:
    """Powers of ten in ``domain`` for a log axis: every decade, or every k-th one (exponents that
    are multiples of k) so that there are at most ``most`` ticks."""
    e0, e1 = math.ceil(math.log10(domain[0]) - 1e-9), math.floor(math.log10(domain[1]) + 1e-9)
    step = 1
    while (e1 - e0) // step + 1 > most:
        step += 1
    return [10.0 ** e for e in range(e0, e1 + 1) if e % step == 0]


def log_axis_labels() -> str:
    """A Vega expression that labels the decades of a log axis as ``10⁻⁴`` (other ticks: none)."""
    exponent = "round(log(datum.value) / LN10)"
    text = f"format({exponent}, 'd')"
    for plain, sup in zip("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"):
        text = f"replace({text}, regexp('{plain}', 'g'), '{sup}')"
    return f"abs(log(datum.value) / LN10 - {exponent}) < 1e-6 ? '10' + {text} : ''"


def vega_chart(*, description: str, x_title: str, y_title: str, x_domain, y_domain, series: Sequence[dict],
           height: int, integer_x: bool = False) -> dict:
    """A Vega-Lite specification: lines (and markers on some points) of the rows ``{x, y, s, m}`` of
    the dataset ``table``, one line per series ``s``, log-scaled ``y``; one legend below the plot
    whose labels come from the signal ``labels`` (set per position by ``explorer.js``). Rows with
    ``g: true`` are the previous position, drawn faintly behind (the ghost trace); the dataset
    ``hover`` holds the step under the pointer (a rule) and the values there (circles)."""
    keys = [s["key"] for s in series]
    legend = {"orient": "bottom", "title": None, "columns": 1, "labelExpr": _LABELS, "labelLimit": 0,
              "symbolStrokeWidth": 2, "symbolSize": 90, "symbolOpacity": 1}

    def channel(name, values):
        return {"field": "s", "type": "nominal", "scale": {"domain": keys, "range": values},
                "legend": legend, "title": None}

    x_axis = {"tickMinStep": 1, "format": "d"} if integer_x else {"format": "d"}
    enc = {
        "x": {"field": "x", "type": "quantitative", "title": x_title, "axis": x_axis,
              "scale": {"domain": list(x_domain), "nice": False, "zero": False}},
        "y": {"field": "y", "type": "quantitative", "title": y_title,
              "axis": {"values": decade_ticks(y_domain), "labelExpr": log_axis_labels(),
                       "labelOverlap": "greedy", "labelFontSize": 12},
              "scale": {"type": "log", "domain": list(y_domain), "nice": False}},
        "color": channel("color", [s["color"] for s in series]),
    }
    # the ghost and hover layers: the same scales, no legend of their own
    plain = {**enc, "color": {**enc["color"], "legend": None}}
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "description": description,
        "width": "container", "height": height,
        "autosize": {"type": "fit-x", "contains": "padding"},
        "background": "white",
        "padding": {"left": 4, "right": 12, "top": 8, "bottom": 4},
        "params": [{"name": "labels", "value": {}}],
        "data": {"name": "table"},
        "layer": [
            # the previous position, faint, behind (rows with g: true; explorer.js adds them)
            {"name": "ghost", "transform": [{"filter": "datum.g"}],
             "mark": {"type": "line", "clip": True, "strokeWidth": 1.5, "opacity": GHOST_OPACITY},
             "encoding": {**enc, "detail": {"field": "s"}}},
            {"transform": [{"filter": "!datum.g"}],
             "mark": {"type": "line", "clip": True, "strokeWidth": 2},
             "encoding": {**enc, "strokeDash": channel("strokeDash", [s["dash"] for s in series]),
                          "detail": {"field": "s"}}},
            {"transform": [{"filter": "datum.m && !datum.g"}],
             "mark": {"type": "point", "clip": True, "filled": True, "size": 50, "opacity": 1},
             "encoding": {**enc, "shape": channel("shape", [s["shape"] for s in series])}},
            # the hovered step: a rule and the values of every series there (dataset "hover")
            {"name": "hover_rule", "data": {"name": "hover"}, "transform": [{"filter": "datum.rule"}],
             "mark": {"type": "rule", "color": "#555555", "strokeDash": [3, 3]},
             "encoding": {"x": enc["x"]}},
            {"name": "hover_points", "data": {"name": "hover"}, "transform": [{"filter": "!datum.rule"}],
             "mark": {"type": "point", "clip": True, "filled": False, "size": 110, "strokeWidth": 2},
             "encoding": {**plain}},
        ],
        "config": {"font": "sans-serif", "view": {"stroke": "#bbbbbb"},
                   "axis": {"labelFontSize": 11, "titleFontSize": 12, "titleFontWeight": "normal",
                            "gridColor": "#e6e6e6"},
                   "legend": {"labelFontSize": 12}},
    }


def series_spec(key, y, x, color, dash, shape, every=1, const_x=None) -> dict:
    """How ``explorer.js`` builds one series of a chart from a position's record: ``y`` names an
    array (or, with ``const_x``, a number drawn as a horizontal line over ``const_x``); ``x`` is
    ``"index1"`` (1, 2, ...), ``"index0"`` (0, 1, ...) or names an array; a marker every ``every``
    points and at the last."""
    out = {"key": key, "y": y, "x": x, "every": every, "color": color, "dash": dash, "shape": shape}
    if const_x is not None:
        out["const_x"] = list(const_x)
    return out


def series_rows(series: Mapping, record: Mapping, floor: float | None = None) -> list[dict]:
    """The rows ``{x, y, s, m}`` that ``explorer.js`` draws for one series of one position (the
    same rule, in Python, for tests and for the static figure); ``[]`` when the record lacks it.
    With a chart's ``floor``, values below it (zeros included) are drawn at the floor."""
    xs: list
    ys: list
    if "const_x" in series:
        v = record.get(series["y"])
        if v is None:
            return []
        xs, ys = series["const_x"], [v] * len(series["const_x"])
    else:
        if record.get(series["y"]) is None:
            return []
        ys = list(record[series["y"]])
        if series["x"] == "index1":
            xs = list(range(1, len(ys) + 1))
        elif series["x"] == "index0":
            xs = list(range(len(ys)))
        else:
            xs = record[series["x"]]
    every = series.get("every", 1)
    return [{"x": x, "y": y if floor is None else max(y, floor), "s": series["key"],
             "m": i % every == 0 or i == len(ys) - 1}
            for i, (x, y) in enumerate(zip(xs, ys))]


def cell_text(x: float | None) -> str:
    """The text of an overview cell (``web/explorer.js`` shows it as written): ``div`` for
    ``None`` (a run that diverged), two significant digits from 0.01 up (``0.98``), else a
    one-digit mantissa and the decade (``3·10⁻⁵``); the hover line gives three digits."""
    if x is None:
        return "div"
    if x == 0:
        return "0"
    if x >= 0.01:
        r = float(f"{x:.2g}")
        return f"{r:.{max(0, 1 - math.floor(math.log10(r)))}f}"
    e = math.floor(math.log10(x))
    m = round(x / 10.0 ** e)
    if m == 10:
        m, e = 1, e + 1
    return f"{m}·10{str(e).translate(_SUPERSCRIPT)}"


def _exponent_labels() -> str:
    """A Vega expression that writes an exponent ``datum.value`` as ``10⁻⁴``."""
    text = "format(round(datum.value), 'd')"
    for plain, sup in zip("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"):
        text = f"replace({text}, regexp('{plain}', 'g'), '{sup}')"
    return f"'10' + {text}"


def overview_chart(*, description: str, x: Mapping, y: Mapping, x_title: str, y_title: str,
                   color_title: str, domain: Sequence[float]) -> dict:
    """The overview panel: a heatmap of the rows ``{x, y, v, t, cur, key}`` of the dataset
    ``table`` (one cell per value of the controls ``x`` and ``y``, the others at the current
    position): colour ``v`` (a base-10 logarithm) over ``domain``, cell text ``t``, no colour where
    ``v`` is null (a diverged run), the current cell ``cur`` outlined. ``explorer.js`` builds the
    rows (as :func:`overview_rows` does); a click on a cell moves the sliders there."""
    xs, ys = list(x["text"]), list(y["text"])[::-1]     # y grows upward
    lo, hi = float(domain[0]), float(domain[1])
    enc = {"x": {"field": "x", "type": "ordinal", "sort": xs, "scale": {"domain": xs},
                 "title": x_title, "axis": {"labelAngle": 0, "labelFontSize": 11}},
           "y": {"field": "y", "type": "ordinal", "sort": ys, "scale": {"domain": ys},
                 "title": y_title, "axis": {"labelFontSize": 11}}}
    ticks = list(range(math.ceil(lo), math.floor(hi) + 1))
    step = max(1, math.ceil(len(ticks) / 6))
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "description": description,
        "width": "container", "height": 26 * len(ys),
        "autosize": {"type": "fit-x", "contains": "padding"},
        "background": "white",
        "padding": {"left": 4, "right": 12, "top": 8, "bottom": 4},
        "data": {"name": "table"},
        "layer": [
            {"name": "cells_bg", "mark": {"type": "rect", "fill": "#d9d9d9", "stroke": "white"},
             "encoding": enc},
            {"name": "cells", "transform": [{"filter": "isValid(datum.v)"}],
             "mark": {"type": "rect", "stroke": "white", "cursor": "pointer"},
             "encoding": {**enc, "color": {
                 "field": "v", "type": "quantitative", "title": color_title,
                 "scale": {"scheme": "viridis", "domain": [lo, hi], "clamp": True},
                 "legend": {"orient": "bottom", "direction": "horizontal", "gradientLength": 220,
                            "values": ticks[::step], "labelExpr": _exponent_labels(),
                            "titleLimit": 0, "labelFontSize": 11, "titleFontSize": 12,
                            "titleFontWeight": "normal"}}}},
            {"name": "cells_text", "mark": {"type": "text", "fontSize": 10, "cursor": "pointer"},
             "encoding": {**enc, "text": {"field": "t"}, "color": {
                 "condition": {"test": f"isValid(datum.v) && datum.v < {(lo + hi) / 2}",
                               "value": "white"}, "value": "#1f1f1f"}}},
            {"name": "current", "transform": [{"filter": "datum.cur"}],
             "mark": {"type": "rect", "fill": None, "stroke": "#d62728", "strokeWidth": 3},
             "encoding": enc},
        ],
        "config": {"font": "sans-serif", "view": {"stroke": None},
                   "axis": {"titleFontSize": 12, "titleFontWeight": "normal", "domain": False,
                            "ticks": False}},
    }


def overview_rows(overview: Mapping, controls: Sequence[Mapping], positions: Mapping,
                  index: Sequence[int]) -> list[dict]:
    """The rows ``explorer.js`` draws in the overview panel at the position ``index`` (the rule,
    in Python, for the tests): one per value of the controls ``overview["x"]`` and
    ``overview["y"]`` (indices into ``controls``), the other controls where they are; ``v`` and
    ``t`` are the record's ``cell_v`` and ``cell_text``."""
    kx, ky = overview["x"], overview["y"]
    rows = []
    for i in range(len(controls[kx]["values"])):
        for j in range(len(controls[ky]["values"])):
            at = list(index)
            at[kx], at[ky] = i, j
            key = position_key(*at)
            rec = positions[key]
            rows.append({"x": controls[kx]["text"][i], "y": controls[ky]["text"][j], "v": rec["cell_v"],
                         "t": rec["cell_text"], "cur": i == index[kx] and j == index[ky], "key": key})
    return rows


def with_labels(charts: list, record: Mapping) -> dict:
    """``record`` with the series' fixed legend labels added to its ``labels``."""
    fixed = {s["key"]: s["label"] for c in charts for s in c["series"] if s.get("label")}
    return {**record, "labels": {**fixed, **record.get("labels", {})}}


def add_static_labels(charts: list, positions: dict) -> None:
    for key, rec in positions.items():
        positions[key] = with_labels(charts, rec)


class Explorer:
    """An explorer ready to show: its controls, charts and the records of every position.

    ``controls``: ``[{"name", "label", "help", "values", "text", "start"}]`` (slider positions);
    ``charts``: ``[{"name", "spec", "series"}]`` (Vega-Lite specification and how to build its rows);
    ``grid``: the settings the positions were computed with (embedded with them);
    ``positions``: ``{"i,j,k": record}`` (a record holds the arrays the series name, ``labels`` for
    the legend and ``readout``, lines of text pieces and numbers); ``figure(record, values)``: the
    static frame of a position (a matplotlib figure); ``note``: the line that says what is
    precomputed.
    """

    def __init__(self, name: str, title: str, controls: list, charts: list, positions: dict,
                 figure: Callable, note: str, alt: str, grid: Mapping | None = None, *,
                 presets: Sequence[Mapping] = (), overview: Mapping | None = None):
        self.name, self.title, self.controls, self.charts = name, title, controls, charts
        self.grid = {k: v for k, v in (grid or {}).items() if k != "start"}
        self.positions, self.figure, self.note, self.alt = positions, figure, note, alt
        self.overview = overview
        for c in controls:
            if not 0 <= c["start"] < len(c["values"]):
                raise ValueError(f"control {c['name']!r}: start index {c['start']} outside its "
                                 f"{len(c['values'])} values.")
        self.presets = [dict(p, key=self._key_of(p["values"])) for p in presets]
        ids = [p["id"] for p in self.presets]
        if len(set(ids)) != len(ids):
            raise ValueError(f"explorer {name!r}: preset ids {ids} are not distinct.")
        missing = [k for k in self._all_keys() if k not in positions]
        if missing:
            raise ValueError(f"explorer {name!r}: no record for the positions {missing[:5]}.")
        if self.data_bytes() > MAX_DATA_BYTES:
            raise ValueError(f"explorer {name!r}: {self.data_bytes()} bytes of data, more than "
                             f"MAX_DATA_BYTES = {MAX_DATA_BYTES}; use a coarser grid.")

    def _all_keys(self):
        ranges = (range(len(c["values"])) for c in self.controls)
        return [position_key(*idx) for idx in itertools.product(*ranges)]

    def _key_of(self, values: Mapping) -> str:
        """The position key of slider ``values`` (every control a grid value)."""
        idx = []
        for c in self.controls:
            if c["name"] not in values:
                raise ValueError(f"a position needs a value for every control: missing {c['name']!r}.")
            v = values[c["name"]]
            if v not in c["values"]:
                raise ValueError(f"{c['name']}={v!r} is not a grid value; choose one of {c['values']}.")
            idx.append(c["values"].index(v))
        return position_key(*idx)

    @property
    def start_key(self) -> str:
        return position_key(*(c["start"] for c in self.controls))

    def preset(self, preset_id: str) -> dict:
        """The preset ``preset_id`` (``{"id", "label", "values", "key"}``)."""
        for p in self.presets:
            if p["id"] == preset_id:
                return p
        raise ValueError(f"explorer {self.name!r} has no preset {preset_id!r}; it has "
                         f"{[p['id'] for p in self.presets]}.")

    def link(self, preset_id: str, text: str | None = None) -> PresetLink:
        """A link for the prose (glue it, show it with ``{glue:}``): on the site a click sets the
        sliders to the preset ``preset_id`` and scrolls to the explorer; elsewhere plain text.
        ``text`` (HTML) defaults to the preset's label."""
        p = self.preset(preset_id)
        return PresetLink(f"cx-{self.name}", p["id"], text if text is not None else p["label"])

    def record(self, **values) -> dict:
        """The record of the position whose slider values are ``values`` (all controls)."""
        return self.positions[self._key_of(values)]

    def payload(self) -> dict:
        """What the page embeds (JSON)."""
        return {"name": self.name, "title": self.title, "grid": self.grid, "controls": self.controls,
                "charts": self.charts, "start": self.start_key, "presets": self.presets,
                "overview": self.overview, "positions": self.positions}

    def data_json(self) -> str:
        text = json.dumps(self.payload(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.replace("</", "<\\/")  # never ends the <script> element early

    def data_bytes(self) -> int:
        return len(self.data_json().encode("utf-8"))

    def html(self) -> str:
        """The page's element: the note, a fallback line that says what the figure shows, the
        data. ``web/explorer.js`` builds the sliders, the readout and the charts from the data (no
        control exists without it) and removes the fallback line."""
        data = self.data_json()
        note = self.note + f" {len(data.encode('utf-8')) / 1000:.0f} kB of data."  # HTML of this module
        return (f'<div class="convres-explorer mathjax_ignore" id="cx-{self.name}" role="figure" '
                f'aria-label="{html.escape(self.title)}">\n'
                f'<p class="cx-note">{note}</p>\n'
                f'<p class="cx-fallback">{html.escape(self.alt)} This interactive figure needs the '
                "JavaScript of the book's web site; with a live kernel, run the live version below "
                'instead.</p>\n'
                f'<script type="application/json" class="cx-data">{data}</script>\n'
                '</div>')

    @property
    def start_values(self) -> dict:
        return {c["name"]: c["values"][c["start"]] for c in self.controls}

    def png(self) -> bytes:
        """The static first frame (the starting position) as a PNG at twice its display size."""
        return explorer_png(self.figure(self.positions[self.start_key], self.start_values))

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = (f"{self.title} ({len(self.positions)} precomputed positions; interactive on the "
                f"book's web site). {self.alt}")
        return {"text/html": self.html(), "image/png": base64.b64encode(self.png()).decode("ascii"),
                "text/plain": text}


class PresetLink:
    """A link in the prose to a preset of an explorer (:meth:`Explorer.link`): ``text/html`` is an
    ``<a class="cx-preset-link">`` to the explorer's element that ``web/explorer.js`` turns into
    "set the sliders, scroll there"; ``text/plain`` (the PDF) is the text alone."""

    def __init__(self, element_id: str, preset_id: str, text: str):
        self.element_id, self.preset_id, self.text = element_id, preset_id, text

    def html(self) -> str:
        return (f'<a class="cx-preset-link" href="#{self.element_id}" data-cx-preset="{self.preset_id}" '
                f'title="set the explorer to this setting">{self.text}</a>')

    def plain(self) -> str:
        return strip_tags(self.text.replace("<sub>", "_"))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "text/plain": self.plain()}


def make_preset(preset_id: str, label: str, look: str, **values) -> dict:
    """A preset of an explorer: a button labelled ``label`` (HTML) that sets the sliders to
    ``values``; ``look`` (HTML, no numbers: those are the prose's, computed) says what to look at
    and shows under the buttons while the explorer is there."""
    if not re.fullmatch(r"[a-z0-9-]+", preset_id):
        raise ValueError(f"a preset id is lower-case letters, digits and '-', got {preset_id!r}.")
    return {"id": preset_id, "label": label, "look": look, "values": dict(values)}


def make_control(name, label, help_, values, start, text=None) -> dict:
    if start not in values:
        raise ValueError(f"the start value {name}={start!r} is not one of the grid values {values}.")
    return {"name": name, "label": label, "help": help_, "values": list(values),
            "text": text or [value_text(v) for v in values], "start": list(values).index(start)}


def merge_grid(grid: Mapping, defaults: Mapping, lists: Sequence[str]) -> dict:
    g = copy.deepcopy(dict(defaults))
    unknown = set(grid) - set(g)
    if unknown:
        raise ValueError(f"unknown grid settings {sorted(unknown)}; known: {sorted(g)}.")
    for k, v in grid.items():
        g[k] = {**g[k], **v} if isinstance(g[k], dict) and k != "start" else copy.deepcopy(v)
    for k in lists:
        v = g[k]
        if not isinstance(v, (list, tuple)) or not v or len(set(v)) != len(v):
            raise ValueError(f"grid[{k!r}] must be a non-empty list of distinct values, got {v!r}.")
        g[k] = list(v)
    return g


def draw_chart(ax, chart: Mapping, record: Mapping) -> None:
    """One explorer chart in matplotlib (the static frame): the same rows as the page draws."""
    spec_x = chart["spec"]["layer"][0]["encoding"]["x"]
    spec_y = chart["spec"]["layer"][0]["encoding"]["y"]
    labels = record.get("labels", {})
    mpl_shape = {"square": "s", "circle": "o", "triangle-up": "^", "cross": "+", "diamond": "D",
                 "triangle-down": "v"}
    for s in chart["series"]:
        rows = series_rows(s, record, chart.get("floor"))
        if not rows:
            continue
        x = [r["x"] for r in rows]
        y = [r["y"] for r in rows]
        dash = s["dash"]
        ls = "-" if dash == [1, 0] else (0, tuple(dash))
        ax.plot(x, y, color=s["color"], ls=ls, lw=1.8, label=labels.get(s["key"], s["key"]),
                marker=mpl_shape[s["shape"]], ms=5, markevery=[i for i, r in enumerate(rows) if r["m"]])
    ax.set_yscale("log")
    if spec_x["axis"].get("tickMinStep") == 1:
        from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 (matplotlib is loaded by then)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(*spec_x["scale"]["domain"])
    ax.set_ylim(*spec_y["scale"]["domain"])
    ax.set_xlabel(spec_x["title"])
    ax.set_ylabel(spec_y["title"].replace(" (log scale)", ""))
    ax.legend(frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(0.0, -0.3), ncol=1)


def explorer_png(fig) -> bytes:
    return figure_png(fig, dpi=2 * DISPLAY_WIDTH_PX / FIGURE_WIDTH_IN)
