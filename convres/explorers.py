"""Interactive explorers that work on the book's static site: grids computed by convres, drawn in the browser.

Book chapters: *Rank collapse under gradient descent* (``book/rank_collapse_gd.md``, section
"Explore it") and *Explore convergence* (``book/explore_convergence.md``).

The published book has no Python kernel, so an explorer is computed at build time on a grid of
slider positions. Every position holds exactly what convres computes for it (singular values,
collapse measures, gradient-descent runs), and the browser only picks the position and draws it
with Vega-Lite (pinned and served by the site itself, ``web/package.json``; drawn by
``web/explorer.js``). An :class:`Explorer` shows as

* ``text/html`` on the HTML site: the data and the charts' specifications, which ``explorer.js``
  turns into sliders, a readout and SVG charts;
* ``image/png`` in the PDF (and anywhere without the site's JavaScript): the static first frame, a
  matplotlib figure of the starting position at twice its display resolution.

With a live kernel (Binder, JupyterLab), :func:`rank_collapse_live` and :func:`convergence_live`
compute off the grid, for any slider value.

Grids are plain dictionaries (:data:`RANK_COLLAPSE_GRID`, :data:`CONVERGENCE_GRID`); every random
draw comes from their explicit seeds. :func:`rank_collapse_data` and :func:`convergence_data` cache
their results on disk (:func:`convres.cache.cached_json`). All gradient descent runs through one
function, :func:`run_gd`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import html
import json
import math
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from .cache import cached_json
from .collapse import attention_output, collapse_measures, gaussian_instance, rank_one_floor
from .data import synthetic_regression
from .gd import gradient_descent
from .model import ModelConfig, init_params

__all__ = ["RANK_COLLAPSE_GRID", "CONVERGENCE_GRID", "MAX_DATA_BYTES", "Explorer", "run_gd",
           "collapse_point", "gd_data", "collapse_gd", "rank_collapse_position", "rank_collapse_data",
           "rank_collapse_explorer", "rank_collapse_figure", "rank_collapse_live",
           "convergence_run", "convergence_position", "convergence_data", "convergence_explorer",
           "convergence_figure", "convergence_live", "format_number", "readout_text"]

#: The rank-collapse explorer: singular values of ``X``, ``Attn(X)`` and ``Z = Attn(X) + beta X`` on
#: :func:`convres.collapse.gaussian_instance` (``n`` tokens, ``d`` features, scale ``1/d_qk``), and
#: a short gradient descent (``gd``: ``steps`` steps of size ``mu`` from :func:`gd_data`, ``N``
#: sequences of ``n`` tokens, ``d`` features, FFN width ``m``, scale ``1/d_qk``) for ``beta = 0`` and
#: the chosen ``beta`` (both residuals). ``start`` is the first frame.
RANK_COLLAPSE_GRID: dict = {
    "betas": [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 2.0],
    "d_qks": [4, 16, 64, 256, 1024, 4096],
    "ns": [2, 4, 8, 16],
    "d": 16, "seed": 0,
    "gd": {"N": 4, "d": 32, "m": 32, "mu": 0.002, "steps": 60, "record_every": 3, "seed": 0},
    "start": {"beta": 1.0, "d_qk": 1024, "n": 8},
}

#: The convergence explorer, on the instance of the chapter *Simulations* (``N`` sequences of ``n``
#: tokens, ``d`` features, FFN width ``m``, data seed ``seed``, weights ``init_params(seed=init_seed)``)
#: with the attention scale ``1/d_qk`` (so that a large ``d_qk`` makes the attention nearly uniform):
#: ``steps`` steps of gradient descent of step size ``mu``, stopped when the loss reaches ``tol``
#: (float64 rounding level) or diverges.
CONVERGENCE_GRID: dict = {
    "betas": [0.0, 0.1, 0.25, 0.5, 1.0],
    "mus": [0.001, 0.002, 0.005, 0.01, 0.02, 0.05],
    "d_qks": [4, 32, 256, 1024],
    "N": 4, "n": 4, "d": 32, "m": 32, "activation": "gelu", "seed": 0, "init_seed": 1000,
    "steps": 300, "record_every": 5, "tol": 1e-20,
    "start": {"beta": 1.0, "mu": 0.002, "d_qk": 32},
}

#: The lowest value the singular-value charts of the convergence explorer draw (a dead ReLU layer
#: of a diverged run can make ``sigma_min(H)`` exactly 0); the readout gives the exact values.
SIGMA_FLOOR = 1e-6

#: A run counts as diverged when its loss exceeds this many times its initial value (or is not finite).
BLOWUP = 1e6

#: The largest amount of embedded data of one explorer (bytes of JSON).
MAX_DATA_BYTES = 2_000_000

#: Significant digits of every number embedded in a page.
DIGITS = 5

#: Width of the static first frame (inches) and the largest width it is shown at (CSS pixels); the
#: PNG has two image pixels per CSS pixel.
FIGURE_WIDTH_IN = 6.0
DISPLAY_WIDTH_PX = 640

#: Colours (Okabe-Ito, distinguishable with colour-vision deficiencies), markers and dashes of the
#: series, so that no curve is told apart by colour alone.
_BLUE, _ORANGE, _GREEN, _GREY, _BLACK = "#0072B2", "#D55E00", "#009E73", "#7f7f7f", "#222222"


# --------------------------------------------------------------------------- running gradient descent
@contextlib.contextmanager
def _threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run_gd(jobs: Sequence[tuple], steps: int, *, record_every: int, tol: float = 0.0) -> list:
    """Histories of gradient descent for ``jobs``, a list of ``(params, X, Y, cfg, mu)``, each run
    for at most ``steps`` steps (:func:`convres.gradient_descent`; the jobs that share ``X`` and
    ``Y`` run as one sweep; one PyTorch thread: the models are small; divergence at
    :data:`BLOWUP`). The one place the explorers run gradient descent."""
    groups: dict = {}
    for i, (_, X, Y, _, _) in enumerate(jobs):
        groups.setdefault((id(X), id(Y)), []).append(i)
    out: list = [None] * len(jobs)
    with _threads(1):
        for idx in groups.values():
            X, Y = jobs[idx[0]][1], jobs[idx[0]][2]
            runs = gradient_descent([jobs[i][0] for i in idx], X, Y, [jobs[i][3] for i in idx],
                                    [jobs[i][4] for i in idx], steps, record_every=record_every,
                                    tol=tol, blowup=BLOWUP)
            for i, (_, history) in zip(idx, runs):
                out[i] = history
    return out


# --------------------------------------------------------------------------- numbers for a page
def _r(x) -> float:
    """``x`` rounded to :data:`DIGITS` significant digits (what a page embeds)."""
    x = float(x)
    return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else x


def _rounded(obj):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _r(obj)
    if isinstance(obj, np.ndarray):
        return _rounded(obj.tolist())
    if isinstance(obj, Mapping):
        return {k: _rounded(v) for k, v in obj.items()}
    return [_rounded(v) for v in obj]


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
    from decimal import ROUND_HALF_UP, Decimal
    exact = Decimal(float(x))
    r = float(exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), rounding=ROUND_HALF_UP))
    e = math.floor(math.log10(abs(r)))
    if -2 <= e <= 2:
        return f"{r:.{max(0, 2 - e)}f}"
    return f"{r / 10 ** e:.2f} × 10{str(e).translate(_SUPERSCRIPT)}"


def _decade(x: float) -> str:
    """``10⁻⁶`` for a power of ten, else :func:`format_number`."""
    e = round(math.log10(x))
    return f"10{str(e).translate(_SUPERSCRIPT)}" if math.isclose(x, 10.0 ** e) else format_number(x)


def readout_text(lines: Sequence[Sequence]) -> list[str]:
    """The readout lines as plain text: the pieces of a position's ``readout`` (text, numbers and
    ``[number, "int"]``), numbers formatted by :func:`format_number`, HTML tags removed."""
    import re
    out = []
    for line in lines:
        parts = []
        for piece in line:
            if isinstance(piece, str):
                parts.append(html.unescape(re.sub(r"<[^>]+>", "", piece)))
            elif isinstance(piece, list):
                parts.append(format_number(piece[0], piece[1]))
            else:
                parts.append(format_number(piece))
        out.append("".join(parts))
    return out


def _label(v: float) -> str:
    return f"{v:g}"


def _key(*indices: int) -> str:
    return ",".join(str(i) for i in indices)


def _log_domain(values, pad: float = 1.5) -> list[float]:
    v = np.asarray([x for x in values if x > 0 and math.isfinite(x)])
    lo, hi = v.min() / pad, v.max() * pad
    return [10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))]


# --------------------------------------------------------------------------- Vega-Lite charts
_LABELS = "labels[datum.label] || datum.label"


def _decade_ticks(domain, most: int = 9) -> list[float]:
    """Powers of ten in ``domain`` for a log axis: every decade, or every k-th one (exponents that
    are multiples of k) so that there are at most ``most`` ticks."""
    e0, e1 = math.ceil(math.log10(domain[0]) - 1e-9), math.floor(math.log10(domain[1]) + 1e-9)
    step = 1
    while (e1 - e0) // step + 1 > most:
        step += 1
    return [10.0 ** e for e in range(e0, e1 + 1) if e % step == 0]


def _log_labels() -> str:
    """A Vega expression that labels the decades of a log axis as ``10⁻⁴`` (other ticks: none)."""
    exponent = "round(log(datum.value) / LN10)"
    text = f"format({exponent}, 'd')"
    for plain, sup in zip("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"):
        text = f"replace({text}, regexp('{plain}', 'g'), '{sup}')"
    return f"abs(log(datum.value) / LN10 - {exponent}) < 1e-6 ? '10' + {text} : ''"


def _chart(*, description: str, x_title: str, y_title: str, x_domain, y_domain, series: Sequence[dict],
           height: int, integer_x: bool = False) -> dict:
    """A Vega-Lite specification: lines (and markers on some points) of the rows ``{x, y, s, m}`` of
    the dataset ``table``, one line per series ``s``, log-scaled ``y``; one legend below the plot
    whose labels come from the signal ``labels`` (set per position by ``explorer.js``)."""
    keys = [s["key"] for s in series]
    legend = {"orient": "bottom", "title": None, "columns": 1, "labelExpr": _LABELS, "labelLimit": 0,
              "symbolStrokeWidth": 2, "symbolSize": 90}

    def channel(name, values):
        return {"field": "s", "type": "nominal", "scale": {"domain": keys, "range": values},
                "legend": legend, "title": None}

    x_axis = {"tickMinStep": 1, "format": "d"} if integer_x else {"format": "d"}
    enc = {
        "x": {"field": "x", "type": "quantitative", "title": x_title, "axis": x_axis,
              "scale": {"domain": list(x_domain), "nice": False, "zero": False}},
        "y": {"field": "y", "type": "quantitative", "title": y_title,
              "axis": {"values": _decade_ticks(y_domain), "labelExpr": _log_labels(),
                       "labelOverlap": "greedy", "labelFontSize": 12},
              "scale": {"type": "log", "domain": list(y_domain), "nice": False}},
        "color": channel("color", [s["color"] for s in series]),
    }
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
            {"mark": {"type": "line", "clip": True, "strokeWidth": 2},
             "encoding": {**enc, "strokeDash": channel("strokeDash", [s["dash"] for s in series]),
                          "detail": {"field": "s"}}},
            {"transform": [{"filter": "datum.m"}],
             "mark": {"type": "point", "clip": True, "filled": True, "size": 50, "opacity": 1},
             "encoding": {**enc, "shape": channel("shape", [s["shape"] for s in series])}},
        ],
        "config": {"font": "sans-serif", "view": {"stroke": "#bbbbbb"},
                   "axis": {"labelFontSize": 11, "titleFontSize": 12, "titleFontWeight": "normal",
                            "gridColor": "#e6e6e6"},
                   "legend": {"labelFontSize": 12}},
    }


def _series(key, y, x, color, dash, shape, every=1, const_x=None) -> dict:
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
    if "const_x" in series:
        v = record.get(series["y"])
        if v is None:
            return []
        xs, ys = series["const_x"], [v] * len(series["const_x"])
    else:
        ys = record.get(series["y"])
        if ys is None:
            return []
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


def _labelled(charts: list, record: Mapping) -> dict:
    """``record`` with the series' fixed legend labels added to its ``labels``."""
    fixed = {s["key"]: s["label"] for c in charts for s in c["series"] if s.get("label")}
    return {**record, "labels": {**fixed, **record.get("labels", {})}}


def _with_static_labels(charts: list, positions: dict) -> None:
    for key, rec in positions.items():
        positions[key] = _labelled(charts, rec)


# --------------------------------------------------------------------------- the Explorer object
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
                 figure: Callable, note: str, alt: str, grid: Mapping | None = None):
        self.name, self.title, self.controls, self.charts = name, title, controls, charts
        self.grid = {k: v for k, v in (grid or {}).items() if k != "start"}
        self.positions, self.figure, self.note, self.alt = positions, figure, note, alt
        for c in controls:
            if not 0 <= c["start"] < len(c["values"]):
                raise ValueError(f"control {c['name']!r}: start index {c['start']} outside its "
                                 f"{len(c['values'])} values.")
        missing = [k for k in self._all_keys() if k not in positions]
        if missing:
            raise ValueError(f"explorer {name!r}: no record for the positions {missing[:5]}.")
        if self.data_bytes() > MAX_DATA_BYTES:
            raise ValueError(f"explorer {name!r}: {self.data_bytes()} bytes of data, more than "
                             f"MAX_DATA_BYTES = {MAX_DATA_BYTES}; use a coarser grid.")

    def _all_keys(self):
        import itertools
        return [_key(*idx) for idx in itertools.product(*(range(len(c["values"])) for c in self.controls))]

    @property
    def start_key(self) -> str:
        return _key(*(c["start"] for c in self.controls))

    def record(self, **values) -> dict:
        """The record of the position whose slider values are ``values`` (all controls)."""
        idx = []
        for c in self.controls:
            if c["name"] not in values:
                raise ValueError(f"record() needs a value for every control: missing {c['name']!r}.")
            v = values[c["name"]]
            if v not in c["values"]:
                raise ValueError(f"{c['name']}={v!r} is not a grid value; choose one of {c['values']}.")
            idx.append(c["values"].index(v))
        return self.positions[_key(*idx)]

    def payload(self) -> dict:
        """What the page embeds (JSON)."""
        return {"name": self.name, "title": self.title, "grid": self.grid, "controls": self.controls,
                "charts": self.charts, "start": self.start_key, "positions": self.positions}

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
        return _png(self.figure(self.positions[self.start_key], self.start_values))

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = (f"{self.title} ({len(self.positions)} precomputed positions; interactive on the "
                f"book's web site). {self.alt}")
        return {"text/html": self.html(), "image/png": base64.b64encode(self.png()).decode("ascii"),
                "text/plain": text}


def _control(name, label, help_, values, start, text=None) -> dict:
    if start not in values:
        raise ValueError(f"the start value {name}={start!r} is not one of the grid values {values}.")
    return {"name": name, "label": label, "help": help_, "values": list(values),
            "text": text or [_label(v) for v in values], "start": list(values).index(start)}


def _check_grid(grid: Mapping, defaults: Mapping, lists: Sequence[str]) -> dict:
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


# --------------------------------------------------------------------------- rank collapse
def collapse_point(beta: float, d_qk: int, n: int, *, d: int = 16, seed: int = 0) -> dict:
    """The spectra of one rank-collapse position: on :func:`convres.collapse.gaussian_instance`
    ``(n, d, d_qk, seed)`` with scale ``1/d_qk``, the singular values of ``X``, ``Attn(X)`` and
    ``Z = Attn(X) + beta X`` (decreasing) and the collapse measures of ``Attn(X)`` and ``Z``
    (:func:`convres.collapse.collapse_measures`)."""
    inst = gaussian_instance(n, d, d_qk, seed)
    _, A, Z = attention_output(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], 1.0 / d_qk, beta)
    return {"sv_X": torch.linalg.svdvals(inst["X"]).numpy(), "sv_attn": torch.linalg.svdvals(A).numpy(),
            "sv_Z": torch.linalg.svdvals(Z).numpy(), "attn": collapse_measures(A), "Z": collapse_measures(Z)}


def gd_data(*, N: int, n: int, d: int, m: int, d_qk: int, seed: int):
    """``(params, X, Y, cfg)`` of the rank-collapse gradient descent: the instance of the chapter's
    section "The consequence for gradient descent" (:func:`convres.collapse.gd_instance`), built from
    the public API: ``X, Y = synthetic_regression(N, n, d, 1, seed)``, Gaussian weights from
    ``init_params(cfg, seed + 1)``, scale ``1/d_qk``, ``cfg.beta = 1``."""
    cfg = ModelConfig(d=d, d_qk=d_qk, m=m, c=1, beta=1.0, scale="1/d_qk")
    X, Y = synthetic_regression(N, n, d, 1, seed=seed)
    return init_params(cfg, seed=seed + 1), X, Y, cfg


def collapse_gd(betas: Sequence[float], d_qk: int, n: int, *, N: int = 4, d: int = 32, m: int = 32,
                mu: float = 0.002, steps: int = 60, record_every: int = 3, seed: int = 0) -> dict:
    """Gradient descent of the rank-collapse explorer: from :func:`gd_data` (``N`` sequences of
    ``n`` tokens, ``d`` features, scale ``1/d_qk``, seed ``seed``) with both residuals ``beta``
    for every entry of ``betas`` (same data and weights), ``steps`` steps of size ``mu``. Returns
    ``{"floor": rank-one floor of Y, "runs": {beta: History}}``."""
    params, X, Y, cfg = gd_data(N=N, n=n, d=d, m=m, d_qk=d_qk, seed=seed)
    jobs = [(params, X, Y, cfg.replace(beta=float(b)), mu) for b in betas]
    hists = run_gd(jobs, steps, record_every=record_every)
    return {"floor": rank_one_floor(Y), "runs": dict(zip([float(b) for b in betas], hists))}


def rank_collapse_position(beta: float, d_qk: int, n: int, grid: Mapping | None = None) -> dict:
    """The record of one position of the rank-collapse explorer, for any values (the live version
    calls it off the grid): :func:`collapse_point` and :func:`collapse_gd` for ``beta = 0`` and
    ``beta``, with the settings of ``grid`` (default :data:`RANK_COLLAPSE_GRID`)."""
    g = _check_grid(grid or {}, RANK_COLLAPSE_GRID, ["betas", "d_qks", "ns"])
    pt = collapse_point(beta, d_qk, n, d=g["d"], seed=g["seed"])
    gd = collapse_gd([0.0] if beta == 0 else [0.0, float(beta)], d_qk, n, **g["gd"])
    return _rc_record(beta, pt, gd)


def _rc_record(beta, pt, gd) -> dict:
    h0, h = gd["runs"][0.0], gd["runs"][float(beta)]
    b = _label(beta)
    smin = ["σ<sub>min</sub>(Z<sub>t</sub>) stays between ", float(np.min(h.sigma_min_Z)), " and ",
            float(np.max(h.sigma_min_Z))]
    if h.status == "diverged":
        gd_line = [f"With β = {b} gradient descent diverges at this step size: it stops after ",
                   [len(h.loss) - 1, "int"], " steps. With β = 0 the loss is ", h0.loss[-1], " after ",
                   [len(h0.loss) - 1, "int"], " steps (rank-one floor ", gd["floor"], ")."]
    elif beta == 0:
        gd_line = ["After ", [len(h0.loss) - 1, "int"], " steps the loss is ", h0.loss[-1],
                   " (rank-one floor ", gd["floor"], "); ", *smin, "."]
    else:
        gd_line = ["After ", [len(h.loss) - 1, "int"], " steps the loss is ", h0.loss[-1],
                   " with β = 0 and ", h.loss[-1], f" with β = {b} (rank-one floor ", gd["floor"],
                   f"); with β = {b}, ", *smin, "."]
    return {
        "sv_X": pt["sv_X"], "sv_attn": pt["sv_attn"], "sv_Z": pt["sv_Z"],
        "loss0": h0.loss, "loss": h.loss, "floor": gd["floor"], "status0": h0.status, "status": h.status,
        "labels": {"Z": f"Z = Attn(X) + βX, β = {b}" + (" (equal to Attn(X))" if beta == 0 else ""),
                   "chosen": f"β = {b}" + (" (the same run)" if beta == 0 else "")},
        "readout": [
            ["σ<sub>min</sub>(Attn(X)) = ", pt["attn"]["sigma_min"], ", effective rank ",
             pt["attn"]["effective_rank"], "; σ<sub>min</sub>(Z) = ", pt["Z"]["sigma_min"],
             ", effective rank ", pt["Z"]["effective_rank"], "."],
            gd_line,
        ],
    }


def _rank_collapse_compute(g: dict) -> dict:
    positions = {}
    for k, n in enumerate(g["ns"]):
        for j, d_qk in enumerate(g["d_qks"]):
            gd = collapse_gd([0.0] + [b for b in g["betas"] if b != 0], d_qk, n, **g["gd"])
            for i, beta in enumerate(g["betas"]):
                pt = collapse_point(beta, d_qk, n, d=g["d"], seed=g["seed"])
                positions[_key(i, j, k)] = _rounded(_rc_record(beta, pt, gd))
    return positions


def rank_collapse_data(grid: Mapping | None = None, *, refresh: bool = False) -> dict:
    """``{"grid": the full grid, "positions": {"i,j,k": record}}`` of the rank-collapse explorer,
    ``i, j, k`` the indices of ``beta, d_qk, n`` in the grid; cached on disk. ``grid`` overrides
    entries of :data:`RANK_COLLAPSE_GRID`. Numbers are rounded to :data:`DIGITS` digits."""
    g = _check_grid(grid or {}, RANK_COLLAPSE_GRID, ["betas", "d_qks", "ns"])
    if 0.0 not in g["betas"]:
        raise ValueError(f"grid['betas'] must contain 0 (the comparison run), got {g['betas']}.")
    positions = cached_json("explorer-rank-collapse", {k: v for k, v in g.items() if k != "start"},
                            lambda: _rank_collapse_compute(g), refresh=refresh)
    return {"grid": g, "positions": positions}


def _rc_charts(g: dict, positions: Mapping) -> list:
    recs = list(positions.values())
    spectra = [
        _series("X", "sv_X", "index1", _GREY, [2, 2], "square"),
        _series("Attn", "sv_attn", "index1", _ORANGE, [1, 0], "circle"),
        _series("Z", "sv_Z", "index1", _BLUE, [6, 3], "triangle-up"),
    ]
    steps = g["gd"]["steps"]
    for ser, label in zip(spectra, ["X (the input)", "Attn(X) (no residual)", None]):
        ser["label"] = label
    gd = [
        _series("base", "loss0", "index0", _ORANGE, [1, 0], "circle", every=10),
        _series("chosen", "loss", "index0", _BLUE, [6, 3], "triangle-up", every=10),
        _series("floor", "floor", None, _BLACK, [2, 3], "cross", every=1, const_x=[0, steps]),
    ]
    for ser, label in zip(gd, ["β = 0 (no residual)", None, "rank-one floor"]):
        ser["label"] = label
    sv = [v for r in recs for f in ("sv_X", "sv_attn", "sv_Z") for v in r[f]]
    losses = [v for r in recs for f in ("loss0", "loss") for v in r[f]] + [r["floor"] for r in recs]
    return [
        {"name": "spectra", "series": spectra, "spec": _chart(
            description="Singular values of X, Attn(X) and Z at the chosen position, log scale.",
            x_title="index i", y_title="singular value σᵢ (log scale)", x_domain=[1, max(g["ns"])],
            y_domain=_log_domain(sv), series=spectra, height=230, integer_x=True)},
        {"name": "gd", "series": gd, "spec": _chart(
            description="Loss of gradient descent with beta = 0 and with the chosen beta, log scale.",
            x_title="gradient-descent step t", y_title="loss Φ(θₜ) (log scale)", x_domain=[0, steps],
            y_domain=_log_domain(losses), series=gd, height=200)},
    ]


def rank_collapse_explorer(grid: Mapping | None = None, *, start: Mapping | None = None) -> Explorer:
    """The rank-collapse explorer of the book (chapter *Rank collapse*, section "Explore it"):
    sliders for ``beta``, ``d_qk`` and ``n`` over the grid (default :data:`RANK_COLLAPSE_GRID`),
    the spectra of ``X``, ``Attn(X)`` and ``Z``, their collapse measures and the short gradient
    descent for ``beta = 0`` and the chosen ``beta``. ``start``: the first frame's values."""
    data = rank_collapse_data(grid)
    g = data["grid"]
    s = {**g["start"], **(start or {})}
    controls = [
        _control("beta", "β", "residual coefficient", g["betas"], s["beta"]),
        _control("d_qk", "d<sub>QK</sub>", "query/key width (scale 1/d<sub>QK</sub>)", g["d_qks"], s["d_qk"]),
        _control("n", "n", "tokens", g["ns"], s["n"]),
    ]
    size = len(g["betas"]) * len(g["d_qks"]) * len(g["ns"])
    gd = g["gd"]
    note = (f"Precomputed with convres when the book was built: {len(g['betas'])} values of β × "
            f"{len(g['d_qks'])} of d<sub>QK</sub> × {len(g['ns'])} of n = {size} positions, each with its "
            f"spectra and {gd['steps']} gradient-descent steps for β = 0 and for the chosen β.")
    alt = ("Two stacked panels: the singular values of X, Attn(X) and Z on a log scale against their "
           "index, and the loss of gradient descent with beta = 0 and with the chosen beta.")
    charts = _rc_charts(g, data["positions"])
    _with_static_labels(charts, data["positions"])
    return Explorer("rank-collapse", "Rank-collapse explorer", controls, charts,
                    data["positions"], lambda rec, values: rank_collapse_figure(rec, g, values), note, alt, g)


def _draw(ax, chart: Mapping, record: Mapping) -> None:
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
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(*spec_x["scale"]["domain"])
    ax.set_ylim(*spec_y["scale"]["domain"])
    ax.set_xlabel(spec_x["title"])
    ax.set_ylabel(spec_y["title"].replace(" (log scale)", ""))
    ax.legend(frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(0.0, -0.3), ncol=1)


def rank_collapse_figure(record: Mapping, grid: Mapping | None = None, values: Mapping | None = None):
    """The static frame of one rank-collapse position: the spectra above, the loss below."""
    from .plotting import figure
    g = _check_grid(grid or {}, RANK_COLLAPSE_GRID, ["betas", "d_qks", "ns"])
    charts = _rc_charts(g, {"this": record})
    charts[0]["spec"]["layer"][0]["encoding"]["y"]["scale"]["domain"] = _log_domain(
        [v for f in ("sv_X", "sv_attn", "sv_Z") for v in record[f]])
    charts[1]["spec"]["layer"][0]["encoding"]["y"]["scale"]["domain"] = _log_domain(
        list(record["loss0"]) + list(record["loss"]) + [record["floor"]])
    rec = _labelled(charts, record)
    fig, (ax1, ax2) = figure(1, 2, width=FIGURE_WIDTH_IN, height=3.1)
    _draw(ax1, charts[0], rec)
    _draw(ax2, charts[1], rec)
    if values:
        fig.suptitle(f"β = {_label(values['beta'])}, d_QK = {values['d_qk']} (scale 1/d_QK), "
                     f"n = {values['n']}", fontsize=11)
    return fig


def rank_collapse_live(beta: float = 1.0, d_qk: int = 1024, n: int = 8, grid: Mapping | None = None):
    """The rank-collapse explorer for a live kernel: sliders for any ``beta`` in [0, 2], ``d_qk`` a
    power of two up to 16384 and ``n`` from 2 to the grid's ``d``; every change recomputes the
    position with convres (:func:`rank_collapse_position`, about a second with the gradient
    descent) and redraws the static frame."""
    import ipywidgets as w
    g = _check_grid(grid or {}, RANK_COLLAPSE_GRID, ["betas", "d_qks", "ns"])
    d_qks = [2 ** k for k in range(15)]
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 2:
        raise ValueError(f"beta must be a number in [0, 2], got {beta!r}.")
    if d_qk not in d_qks:
        raise ValueError(f"d_qk must be a power of two from 1 to 16384, got {d_qk!r}.")
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= g["d"]:
        raise ValueError(f"n must be an integer in [2, d={g['d']}], got {n!r}.")
    style = {"description_width": "initial"}
    s_beta = w.FloatSlider(value=beta, min=0, max=2, step=0.01, description="β", style=style,
                           continuous_update=False)
    s_dqk = w.SelectionSlider(options=d_qks, value=d_qk, description="d_QK", style=style,
                              continuous_update=False)
    s_n = w.IntSlider(value=n, min=2, max=g["d"], description="tokens n", style=style,
                      continuous_update=False)
    return _live_explorer({"beta": s_beta, "d_qk": s_dqk, "n": s_n}, g,
                          rank_collapse_position, rank_collapse_figure)


def _live_explorer(sliders: Mapping, g: Mapping, position, figure):
    """A kernel explorer: ``sliders`` (name -> ipywidget, in the order of ``position``'s arguments)
    above a readout and the static frame ``figure(position(*values, g), g, values)``, redrawn on every
    change."""
    import ipywidgets as w
    image = w.Image(format="png", layout=w.Layout(width="100%", max_width=f"{DISPLAY_WIDTH_PX}px"))
    readout = w.HTML()

    def refresh(_change=None):
        values = {k: ctrl.value for k, ctrl in sliders.items()}
        rec = _rounded(position(*values.values(), g))
        image.value = _png(figure(rec, g, values))
        readout.value = "<br>".join(html.escape(t) for t in readout_text(rec["readout"]))

    for ctrl in sliders.values():
        ctrl.observe(refresh, names="value")
    refresh()
    return w.VBox([*sliders.values(), readout, image])


def _png(fig) -> bytes:
    from .plotting import figure_png
    return figure_png(fig, dpi=2 * DISPLAY_WIDTH_PX / FIGURE_WIDTH_IN)


# --------------------------------------------------------------------------- convergence
def _convergence_instance(d_qk: int, beta: float, g: Mapping, data=None):
    """``(X, Y, params, cfg)`` of one convergence position; ``data``: ``(X, Y)`` when already drawn
    (they do not depend on ``d_qk`` or ``beta``; sharing them lets :func:`run_gd` batch the runs)."""
    cfg = ModelConfig(d=g["d"], d_qk=d_qk, m=g["m"], c=1, beta=float(beta), activation=g["activation"],
                      scale="1/d_qk")
    X, Y = data if data is not None else synthetic_regression(g["N"], g["n"], g["d"], 1, seed=g["seed"])
    return X, Y, init_params(cfg, seed=g["init_seed"]), cfg


def convergence_run(beta: float, mu: float, d_qk: int, grid: Mapping | None = None) -> dict:
    """One position of the convergence explorer: gradient descent on the instance of
    :data:`CONVERGENCE_GRID` (or ``grid``) with residual ``beta``, step ``mu`` and ``d_qk``
    (scale ``1/d_qk``). Returns the History, the theorem's rate ``alpha``
    (:func:`convres.theory.rate_alpha`, ``(sigma_Nn(H_0)/2)^2``) and its envelope
    ``Phi_0 (1 - mu alpha)^t`` at the recorded steps (``None`` when ``mu alpha >= 1``)."""
    return _convergence_runs([(beta, mu, d_qk)], _check_grid(grid or {}, CONVERGENCE_GRID,
                                                            ["betas", "mus", "d_qks"]))[0]


def _convergence_runs(points, g) -> list[dict]:
    from .theory import rate_alpha
    jobs, alphas = [], []
    data = synthetic_regression(g["N"], g["n"], g["d"], 1, seed=g["seed"])
    for beta, mu, d_qk in points:
        X, Y, p, cfg = _convergence_instance(d_qk, beta, g, data)
        jobs.append((p, X, Y, cfg, mu))
        alphas.append(rate_alpha(p, X, cfg))
    hists = run_gd(jobs, g["steps"], record_every=g["record_every"], tol=g["tol"])
    out = []
    for (beta, mu, d_qk), h, alpha in zip(points, hists, alphas):
        t = np.arange(0, g["steps"] + 1, g["record_every"])
        env = h.loss[0] * (1 - mu * alpha) ** t if mu * alpha < 1 else None
        out.append({"history": h, "alpha": alpha, "env_steps": t, "envelope": env})
    return out


def _cv_record(beta, mu, run, g) -> dict:
    h, alpha = run["history"], run["alpha"]
    steps = len(h.loss) - 1
    if h.status == "converged":
        status = ["Converged: the loss reached ", g["tol"], " (float64 rounding) at step ",
                  [steps, "int"], "."]
    elif h.status == "diverged":
        status = ["Diverged: after step ", [steps, "int"], " the loss grew past ", BLOWUP,
                  " times its start or overflowed; μ is too large here."]
    else:
        status = ["In ", [steps, "int"], " steps the loss went from ", h.loss[0], " to ", h.loss[-1], "."]
    env_end = None if run["envelope"] is None else (1 - mu * alpha) ** g["steps"]
    rec = {
        "loss": h.loss, "rec": h.record_steps, "smin_Z": h.sigma_min_Z, "smin_H": h.sigma_min_H,
        "env_steps": run["env_steps"], "envelope": run["envelope"], "tol": g["tol"], "status": h.status,
        "alpha": alpha, "mu_alpha": mu * alpha,
        "labels": {"loss": f"loss, β = {_label(beta)}, μ = {_label(mu)}"},
        "readout": [
            ["α = (σ<sub>min</sub>(H<sub>0</sub>)/2)² = ", alpha, ", μα = ", mu * alpha,
             *([": the envelope falls by a factor ", env_end, " in ", [g["steps"], "int"], " steps."]
               if env_end is not None else [": μα ≥ 1, no envelope."])],
            status,
            ["σ<sub>min</sub>(Z<sub>t</sub>) between ", float(np.min(h.sigma_min_Z)), " and ",
             float(np.max(h.sigma_min_Z)), "; σ<sub>min</sub>(H<sub>t</sub>) between ",
             float(np.min(h.sigma_min_H)), " and ", float(np.max(h.sigma_min_H)), "."],
        ],
    }
    return rec


def convergence_position(beta: float, mu: float, d_qk: int, grid: Mapping | None = None) -> dict:
    """The record of one position of the convergence explorer (any values; the live version calls
    it off the grid)."""
    g = _check_grid(grid or {}, CONVERGENCE_GRID, ["betas", "mus", "d_qks"])
    return _cv_record(beta, mu, _convergence_runs([(beta, mu, d_qk)], g)[0], g)


def _convergence_compute(g: dict) -> dict:
    import itertools
    idx = list(itertools.product(range(len(g["betas"])), range(len(g["mus"])), range(len(g["d_qks"]))))
    runs = _convergence_runs([(g["betas"][i], g["mus"][j], g["d_qks"][k]) for i, j, k in idx], g)
    return {_key(i, j, k): _rounded(_cv_record(g["betas"][i], g["mus"][j], run, g))
            for (i, j, k), run in zip(idx, runs)}


def convergence_data(grid: Mapping | None = None, *, refresh: bool = False) -> dict:
    """``{"grid": the full grid, "positions": {"i,j,k": record}}`` of the convergence explorer,
    ``i, j, k`` the indices of ``beta, mu, d_qk`` in the grid; cached on disk. ``grid`` overrides
    entries of :data:`CONVERGENCE_GRID`. Numbers are rounded to :data:`DIGITS` digits."""
    g = _check_grid(grid or {}, CONVERGENCE_GRID, ["betas", "mus", "d_qks"])
    positions = cached_json("explorer-convergence", {k: v for k, v in g.items() if k != "start"},
                            lambda: _convergence_compute(g), refresh=refresh)
    return {"grid": g, "positions": positions}


def _cv_charts(g: dict, positions: Mapping) -> list:
    recs = list(positions.values())
    loss = [
        _series("loss", "loss", "index0", _BLUE, [1, 0], "circle", every=25),
        _series("envelope", "envelope", "env_steps", _ORANGE, [6, 3], "triangle-up", every=10),
        _series("tol", "tol", None, _BLACK, [2, 3], "cross", const_x=[0, g["steps"]]),
    ]
    sv = [
        _series("Z", "smin_Z", "rec", _BLUE, [1, 0], "circle", every=5),
        _series("H", "smin_H", "rec", _GREEN, [6, 3], "square", every=5),
    ]
    losses = [v for r in recs for v in r["loss"]] + [v for r in recs if r["envelope"] for v in r["envelope"]]
    losses += [g["tol"]]
    svs = [v for r in recs for f in ("smin_Z", "smin_H") for v in r[f]]
    sv_domain = _log_domain(svs)
    sv_floor = SIGMA_FLOOR if min(svs) < SIGMA_FLOOR else None   # zeros of a dead ReLU layer
    if sv_floor is not None:
        sv_domain[0] = max(sv_domain[0], sv_floor)
    sv_title = "smallest singular value (log scale" + (f", ≥ {_decade(sv_floor)})" if sv_floor else ")")
    labels_note = {"envelope": "theorem's envelope Φ₀(1 − μα)ᵗ", "tol": "float64 floor (the run stops)",
                   "Z": "smallest singular value of Zₜ (attention output)",
                   "H": "smallest singular value of Hₜ (last hidden matrix)"}
    for s in loss + sv:
        s["label"] = labels_note.get(s["key"])
    return [
        {"name": "loss", "series": loss, "spec": _chart(
            description="Loss of gradient descent and the theorem's envelope, log scale.",
            x_title="gradient-descent step t", y_title="loss Φ(θₜ) (log scale)", x_domain=[0, g["steps"]],
            y_domain=_log_domain(losses), series=loss, height=230)},
        {"name": "sigma", "series": sv, "floor": sv_floor, "spec": _chart(
            description="Smallest singular values of Z_t and H_t along the run, log scale.",
            x_title="gradient-descent step t", y_title=sv_title,
            x_domain=[0, g["steps"]], y_domain=sv_domain, series=sv, height=180)},
    ]




def convergence_explorer(grid: Mapping | None = None, *, start: Mapping | None = None) -> Explorer:
    """The convergence explorer of the book (chapter *Explore convergence*): sliders for ``beta``,
    the step ``mu`` and ``d_qk`` (scale ``1/d_qk``) over the grid (default
    :data:`CONVERGENCE_GRID`), the loss with the theorem's envelope ``Phi_0 (1 - mu alpha)^t``
    and the smallest singular values of ``Z_t`` and ``H_t`` along the run."""
    data = convergence_data(grid)
    g = data["grid"]
    s = {**g["start"], **(start or {})}
    controls = [
        _control("beta", "β", "residual coefficient", g["betas"], s["beta"]),
        _control("mu", "μ", "step size", g["mus"], s["mu"]),
        _control("d_qk", "d<sub>QK</sub>", "query/key width (scale 1/d<sub>QK</sub>)", g["d_qks"], s["d_qk"]),
    ]
    charts = _cv_charts(g, data["positions"])
    _with_static_labels(charts, data["positions"])
    size = len(g["betas"]) * len(g["mus"]) * len(g["d_qks"])
    note = (f"Precomputed with convres when the book was built: {len(g['betas'])} values of β × "
            f"{len(g['mus'])} of μ × {len(g['d_qks'])} of d<sub>QK</sub> = {size} runs of up to "
            f"{g['steps']} gradient-descent steps each.")
    alt = ("Two stacked panels against the gradient-descent step: the loss on a log scale with the "
           "theorem's envelope, and the smallest singular values of Z_t and H_t.")
    return Explorer("convergence", "Convergence explorer", controls, charts, data["positions"],
                    lambda rec, values: convergence_figure(rec, g, values), note, alt, g)


def convergence_figure(record: Mapping, grid: Mapping | None = None, values: Mapping | None = None):
    """The static frame of one convergence position: the loss and the envelope above, the
    smallest singular values below."""
    from .plotting import figure
    g = _check_grid(grid or {}, CONVERGENCE_GRID, ["betas", "mus", "d_qks"])
    charts = _cv_charts(g, {"this": record})
    rec = _labelled(charts, record)
    fig, (ax1, ax2) = figure(1, 2, width=FIGURE_WIDTH_IN, height=3.1)
    _draw(ax1, charts[0], rec)
    _draw(ax2, charts[1], rec)
    if values:
        fig.suptitle(f"β = {_label(values['beta'])}, μ = {_label(values['mu'])}, "
                     f"d_QK = {values['d_qk']} (scale 1/d_QK)", fontsize=11)
    return fig


def convergence_live(beta: float = 1.0, mu: float = 0.002, d_qk: int = 32, grid: Mapping | None = None):
    """The convergence explorer for a live kernel: sliders for any ``beta`` in [0, 2], ``mu`` from
    1e-4 to 0.1 (log scale) and ``d_qk`` a power of two up to 4096; every change reruns gradient
    descent with convres (:func:`convergence_position`) and redraws the static frame."""
    import ipywidgets as w
    g = _check_grid(grid or {}, CONVERGENCE_GRID, ["betas", "mus", "d_qks"])
    d_qks = [2 ** k for k in range(13)]
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 2:
        raise ValueError(f"beta must be a number in [0, 2], got {beta!r}.")
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not 1e-4 <= mu <= 0.1:
        raise ValueError(f"mu must be a number in [1e-4, 0.1], got {mu!r}.")
    if d_qk not in d_qks:
        raise ValueError(f"d_qk must be a power of two from 1 to 4096, got {d_qk!r}.")
    style = {"description_width": "initial"}
    s_beta = w.FloatSlider(value=beta, min=0, max=2, step=0.05, description="β", style=style,
                           continuous_update=False)
    s_mu = w.FloatLogSlider(value=mu, base=10, min=-4, max=-1, step=0.1, description="μ", style=style,
                            continuous_update=False, readout_format=".2g")
    s_dqk = w.SelectionSlider(options=d_qks, value=d_qk, description="d_QK", style=style,
                              continuous_update=False)
    return _live_explorer({"beta": s_beta, "mu": s_mu, "d_qk": s_dqk}, g,
                          convergence_position, convergence_figure)
