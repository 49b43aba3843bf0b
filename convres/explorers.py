"""Interactive explorers that work on the book's static site: grids computed by convres, drawn in the browser.

Book chapters: *Rank collapse under gradient descent* (``book/rank_collapse_gd.md``, next to the
paragraph on the residual) and *Explore convergence* (``book/explore_convergence.md``).

Each explorer has preset buttons (:data:`PRESETS`; the prose links them with
:meth:`convres.vega.Explorer.link`), draws the previous setting faintly behind the current one,
shows the values under the pointer, and has an overview panel over two of its controls (the last
loss of every position, relative to the rank-one floor or to the first loss) with the current
position outlined.

The published book has no Python kernel, so an explorer is computed at build time on a grid of
slider positions (the experiments ``explorer_rank_collapse`` and ``explorer_convergence`` of
:mod:`convres.experiments.explorers`): every position holds exactly what convres computes for it,
and the browser only picks the position and draws it (:mod:`convres.vega`). With a live kernel
(Binder, JupyterLab), :func:`rank_collapse_live` and :func:`convergence_live` compute off the grid,
for any slider value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping

from .experiments import run_experiment
from .experiments.explorers import (
    CONVERGENCE_GRID,
    GRID_LISTS,
    RANK_COLLAPSE_GRID,
    convergence_position,
    rank_collapse_position,
)
from .plotting import figure
from .vega import (
    COLORS,
    DISPLAY_WIDTH_PX,
    FIGURE_WIDTH_IN,
    Explorer,
    add_static_labels,
    decade_text,
    draw_chart,
    explorer_png,
    log_domain,
    make_control,
    make_preset,
    merge_grid,
    overview_chart,
    readout_text,
    rounded,
    series_spec,
    value_text,
    vega_chart,
    with_labels,
)

__all__ = ["RANK_COLLAPSE_GRID", "CONVERGENCE_GRID", "START", "PRESETS", "SIGMA_FLOOR", "rank_collapse_data",
           "rank_collapse_explorer", "rank_collapse_figure", "rank_collapse_live", "convergence_data",
           "convergence_explorer", "convergence_figure", "convergence_live"]

#: The first frame of each explorer (slider values): the rank-collapse explorer starts where the
#: chapter's figure runs (n = 4 tokens, d_QK = 1024, beta = 0 against beta = 1).
START = {"rank-collapse": {"beta": 1.0, "d_qk": 1024, "n": 4},
         "convergence": {"beta": 1.0, "mu": 0.002, "d_qk": 32}}

_DQK = "d<sub>QK</sub>"

#: The named settings of each explorer: a button above its sliders and a link from the prose
#: (:meth:`convres.vega.Explorer.link`). ``look`` says what to look at; the numbers are the
#: chapter's, computed and checked there.
PRESETS = {
    "rank-collapse": [
        make_preset("figure", f"the figure: β = 1, {_DQK} = 1024", "The first steps of two runs of the "
                    "figure: without residual (orange) the loss stays on the rank-one floor, with β = 1 "
                    "(blue) it leaves it. Above, the spectrum of Attn(X) falls far below those of X and Z.",
                    beta=1.0, d_qk=1024, n=4),
        make_preset("stall", f"the stall: β = 0, {_DQK} = 1024", "No residual: Z = Attn(X), one run, "
                    "on the floor. In the overview, the β = 0 column is on the floor from "
                    f"{_DQK} = 256 up and below it for small {_DQK}.", beta=0.0, d_qk=1024, n=4),
        make_preset("wide", f"wide attention: β = 0, {_DQK} = 16", "No residual, but the attention "
                    "starts far from uniform: the run leaves the floor.", beta=0.0, d_qk=16, n=4),
        make_preset("small", f"a small residual: β = 0.01, {_DQK} = 1024", "A residual a hundred "
                    "times weaker than the figure's: compare σ<sub>min</sub>(Z) with β = 1, and the "
                    "loss with β = 0.", beta=0.01, d_qk=1024, n=4),
        make_preset("diverge", "too strong for the step: β = 2", "With β = 2 the step μ is too "
                    "large: the blue curve leaves the chart.", beta=2.0, d_qk=1024, n=4),
    ],
    "convergence": [
        make_preset("linear", f"linear convergence: β = 1, μ = 0.002, {_DQK} = 32", "The loss falls "
                    "on a straight line (log scale), far below the theorem's envelope (dashed), which "
                    "holds.", beta=1.0, mu=0.002, d_qk=32),
        make_preset("plateau", f"the plateau: β = 0, {_DQK} = 1024", "No residual and nearly uniform "
                    "attention: α is tiny, the envelope flat, and the loss barely moves.",
                    beta=0.0, mu=0.002, d_qk=1024),
        make_preset("wide", f"no residual, wide: β = 0, μ = 0.005, {_DQK} = 32", "No residual, a "
                    "vacuous envelope, and gradient descent converges all the same.",
                    beta=0.0, mu=0.005, d_qk=32),
        make_preset("small", f"a small residual: β = 0.03, {_DQK} = 1024", "The plateau's setting "
                    "with a weak residual: compare the overview's β = 0 and β = 0.03 cells.",
                    beta=0.03, mu=0.002, d_qk=1024),
        make_preset("diverge", "too large a step: β = 1, μ = 0.02", "The step is too large: the "
                    "loss grows and the run stops.", beta=1.0, mu=0.02, d_qk=32),
    ],
}

#: The lowest value the singular-value charts of the convergence explorer draw (a dead ReLU layer
#: of a diverged run can make ``sigma_min(H)`` exactly 0); the readout gives the exact values.
SIGMA_FLOOR = 1e-6


def rank_collapse_data(grid: Mapping | None = None, *, refresh: bool = False) -> dict:
    """``{"grid": the full grid, "positions": {"i,j,k": record}}`` of the rank-collapse explorer,
    ``i, j, k`` the indices of ``beta, d_qk, n`` in the grid: the experiment
    ``explorer_rank_collapse`` (cached). ``grid`` overrides entries of :data:`RANK_COLLAPSE_GRID`."""
    return _grid_data("explorer_rank_collapse", RANK_COLLAPSE_GRID, grid, refresh)


def _grid_data(name: str, defaults: Mapping, grid: Mapping | None, refresh: bool) -> dict:
    g = merge_grid(grid or {}, defaults, GRID_LISTS[name])
    res = run_experiment(name, overrides=None if g == defaults else g, refresh=refresh)
    return {"grid": g, "positions": res.data["positions"]}


def _rc_charts(g: dict, positions: Mapping) -> list:
    recs = list(positions.values())
    spectra = [
        series_spec("X", "sv_X", "index1", COLORS["grey"], [2, 2], "square"),
        series_spec("Attn", "sv_attn", "index1", COLORS["orange"], [1, 0], "circle"),
        series_spec("Z", "sv_Z", "index1", COLORS["blue"], [6, 3], "triangle-up"),
    ]
    steps = g["gd"]["steps"]
    for ser, label in zip(spectra, ["X (the input)", "Attn(X) (no residual)", None]):
        ser["label"] = label
    gd = [
        series_spec("base", "loss0", "index0", COLORS["orange"], [1, 0], "circle", every=10),
        series_spec("chosen", "loss", "index0", COLORS["blue"], [6, 3], "triangle-up", every=10),
        series_spec("floor", "floor", None, COLORS["black"], [2, 3], "cross", every=1, const_x=[0, steps]),
    ]
    for ser, label in zip(gd, ["β = 0 (no residual)", None, "rank-one floor"]):
        ser["label"] = label
    sv = [v for r in recs for f in ("sv_X", "sv_attn", "sv_Z") for v in r[f]]
    losses = [v for r in recs for f in ("loss0", "loss") for v in r[f]] + [r["floor"] for r in recs]
    return [
        {"name": "spectra", "series": spectra, "x_name": "i", "spec": vega_chart(
            description="Singular values of X, Attn(X) and Z at the chosen position, log scale.",
            x_title="index i", y_title="singular value σᵢ (log scale)", x_domain=[1, max(g["ns"])],
            y_domain=log_domain(sv), series=spectra, height=230, integer_x=True)},
        {"name": "gd", "series": gd, "x_name": "t", "spec": vega_chart(
            description="Loss of gradient descent with beta = 0 and with the chosen beta, log scale.",
            x_title="gradient-descent step t", y_title="loss Φ(θₜ) (log scale)", x_domain=[0, steps],
            y_domain=log_domain(losses), series=gd, height=200)},
    ]


def rank_collapse_explorer(grid: Mapping | None = None, *, start: Mapping | None = None,
                           presets: list | None = None) -> Explorer:
    """The rank-collapse explorer of the book (chapter *Rank collapse under gradient descent*):
    sliders for ``beta``, ``d_qk`` and ``n`` over the grid (default :data:`RANK_COLLAPSE_GRID`),
    the spectra of ``X``, ``Attn(X)`` and ``Z``, their collapse measures and the short gradient
    descent for ``beta = 0`` and the chosen ``beta``, and the overview over ``beta`` and ``d_qk``
    (the last loss over the rank-one floor). ``start``: the first frame's values; ``presets``:
    the named settings (default: those of :data:`PRESETS` on the grid)."""
    data = rank_collapse_data(grid)
    g = data["grid"]
    s = {**START["rank-collapse"], **(start or {})}
    controls = [
        make_control("beta", "β", "residual coefficient", g["betas"], s["beta"]),
        make_control("d_qk", "d<sub>QK</sub>", "query/key width (scale 1/d<sub>QK</sub>)", g["d_qks"],
                     s["d_qk"]),
        make_control("n", "n", "tokens", g["ns"], s["n"]),
    ]
    size = len(g["betas"]) * len(g["d_qks"]) * len(g["ns"])
    gd = g["gd"]
    note = (f"Precomputed with convres when the book was built: {len(g['betas'])} values of β × "
            f"{len(g['d_qks'])} of d<sub>QK</sub> × {len(g['ns'])} of n = {size} positions, each with its "
            f"spectra and {gd['steps']} gradient-descent steps for β = 0 and for the chosen β.")
    alt = ("Two stacked panels: the singular values of X, Attn(X) and Z on a log scale against their "
           "index, and the loss of gradient descent with beta = 0 and with the chosen beta.")
    charts = _rc_charts(g, data["positions"])
    add_static_labels(charts, data["positions"])
    overview = _overview(controls, data["positions"], 0, 1, description=(
        "Overview: for every beta and d_QK at the current n, the loss after the last step over the "
        "rank-one floor; the current position outlined."),
        color_title=f"loss after {gd['steps']} steps ÷ rank-one floor (grey: diverged)")
    return Explorer("rank-collapse", "Rank-collapse explorer", controls, charts,
                    data["positions"], lambda rec, values: rank_collapse_figure(rec, g, values), note, alt, g,
                    presets=_presets("rank-collapse", controls, presets), overview=overview)


def _presets(name: str, controls: list, presets) -> list:
    """The presets of an explorer: ``presets``, or those of :data:`PRESETS` whose values are all on
    the grid (a smaller grid keeps the ones it holds)."""
    if presets is not None:
        return list(presets)
    on_grid = {c["name"]: c["values"] for c in controls}
    return [p for p in PRESETS[name] if all(v in on_grid[k] for k, v in p["values"].items())]


def _overview(controls: list, positions: Mapping, kx: int, ky: int, *, description: str,
              color_title: str) -> dict:
    """The overview panel over the controls ``kx`` (across) and ``ky`` (up): its chart and which
    controls it spans; the colour scale covers every position's ``cell_v``."""
    vs = [r["cell_v"] for r in positions.values() if r["cell_v"] is not None]
    domain = [math.floor(min(vs)), max(math.ceil(max(vs)), math.floor(min(vs)) + 1)] if vs else [-1, 0]
    spec = overview_chart(description=description, x=controls[kx], y=controls[ky],
                          x_title=_plain(controls[kx]["label"]), y_title=_plain(controls[ky]["label"]),
                          color_title=color_title, domain=domain)
    return {"x": kx, "y": ky, "spec": spec}


def _plain(label: str) -> str:
    return label.replace("<sub>", "_").replace("</sub>", "")


def rank_collapse_figure(record: Mapping, grid: Mapping | None = None, values: Mapping | None = None):
    """The static frame of one rank-collapse position: the spectra above, the loss below."""
    g = merge_grid(grid or {}, RANK_COLLAPSE_GRID, GRID_LISTS["explorer_rank_collapse"])
    charts = _rc_charts(g, {"this": record})
    charts[0]["spec"]["layer"][0]["encoding"]["y"]["scale"]["domain"] = log_domain(
        [v for f in ("sv_X", "sv_attn", "sv_Z") for v in record[f]])
    charts[1]["spec"]["layer"][0]["encoding"]["y"]["scale"]["domain"] = log_domain(
        list(record["loss0"]) + list(record["loss"]) + [record["floor"]])
    rec = with_labels(charts, record)
    fig, (ax1, ax2) = figure(1, 2, width=FIGURE_WIDTH_IN, height=3.1)
    draw_chart(ax1, charts[0], rec)
    draw_chart(ax2, charts[1], rec)
    if values:
        fig.suptitle(f"β = {value_text(values['beta'])}, d_QK = {values['d_qk']} (scale 1/d_QK), "
                     f"n = {values['n']}", fontsize=11)
    return fig


def rank_collapse_live(beta: float = 1.0, d_qk: int = 1024, n: int = 4, grid: Mapping | None = None):
    """The rank-collapse explorer for a live kernel: sliders for any ``beta`` in [0, 2], ``d_qk`` a
    power of two up to 16384 and ``n`` from 2 to the grid's ``d``; every change recomputes the
    position with convres (:func:`rank_collapse_position`, about a second with the gradient
    descent) and redraws the static frame."""
    import ipywidgets as w
    g = merge_grid(grid or {}, RANK_COLLAPSE_GRID, GRID_LISTS["explorer_rank_collapse"])
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
        rec = rounded(position(*values.values(), g))
        image.value = explorer_png(figure(rec, g, values))
        readout.value = "<br>".join(html.escape(t) for t in readout_text(rec["readout"]))

    for ctrl in sliders.values():
        ctrl.observe(refresh, names="value")
    refresh()
    return w.VBox([*sliders.values(), readout, image])


def convergence_data(grid: Mapping | None = None, *, refresh: bool = False) -> dict:
    """``{"grid": the full grid, "positions": {"i,j,k": record}}`` of the convergence explorer,
    ``i, j, k`` the indices of ``beta, mu, d_qk`` in the grid: the experiment
    ``explorer_convergence`` (cached). ``grid`` overrides entries of :data:`CONVERGENCE_GRID`."""
    return _grid_data("explorer_convergence", CONVERGENCE_GRID, grid, refresh)


def _cv_charts(g: dict, positions: Mapping) -> list:
    recs = list(positions.values())
    loss = [
        series_spec("loss", "loss", "index0", COLORS["blue"], [1, 0], "circle", every=25),
        series_spec("envelope", "envelope", "env_steps", COLORS["orange"], [6, 3], "triangle-up", every=10),
        series_spec("tol", "tol", None, COLORS["black"], [2, 3], "cross", const_x=[0, g["steps"]]),
    ]
    sv = [
        series_spec("Z", "smin_Z", "rec", COLORS["blue"], [1, 0], "circle", every=5),
        series_spec("H", "smin_H", "rec", COLORS["green"], [6, 3], "square", every=5),
    ]
    losses = [v for r in recs for v in r["loss"]] + [v for r in recs if r["envelope"] for v in r["envelope"]]
    losses += [g["tol"]]
    svs = [v for r in recs for f in ("smin_Z", "smin_H") for v in r[f]]
    sv_domain = log_domain(svs)
    sv_floor = SIGMA_FLOOR if min(svs) < SIGMA_FLOOR else None   # zeros of a dead ReLU layer
    if sv_floor is not None:
        sv_domain[0] = max(sv_domain[0], sv_floor)
    sv_title = "smallest singular value (log scale" + (f", ≥ {decade_text(sv_floor)})" if sv_floor else ")")
    labels_note = {"envelope": "theorem's envelope Φ₀(1 − μα)ᵗ", "tol": "float64 floor (the run stops)",
                   "Z": "smallest singular value of Zₜ (attention output)",
                   "H": "smallest singular value of Hₜ (last hidden matrix)"}
    for s in loss + sv:
        s["label"] = labels_note.get(s["key"])
    return [
        {"name": "loss", "series": loss, "x_name": "t", "spec": vega_chart(
            description="Loss of gradient descent and the theorem's envelope, log scale.",
            x_title="gradient-descent step t", y_title="loss Φ(θₜ) (log scale)", x_domain=[0, g["steps"]],
            y_domain=log_domain(losses), series=loss, height=230)},
        {"name": "sigma", "series": sv, "floor": sv_floor, "x_name": "t", "spec": vega_chart(
            description="Smallest singular values of Z_t and H_t along the run, log scale.",
            x_title="gradient-descent step t", y_title=sv_title,
            x_domain=[0, g["steps"]], y_domain=sv_domain, series=sv, height=180)},
    ]




def convergence_explorer(grid: Mapping | None = None, *, start: Mapping | None = None,
                         presets: list | None = None) -> Explorer:
    """The convergence explorer of the book (chapter *Explore convergence*): sliders for ``beta``,
    the step ``mu`` and ``d_qk`` (scale ``1/d_qk``) over the grid (default
    :data:`CONVERGENCE_GRID`), the loss with the theorem's envelope ``Phi_0 (1 - mu alpha)^t``,
    the smallest singular values of ``Z_t`` and ``H_t`` along the run, and the overview over
    ``beta`` and ``d_qk`` (the last loss over the first). ``presets``: the named settings
    (default: those of :data:`PRESETS` on the grid)."""
    data = convergence_data(grid)
    g = data["grid"]
    s = {**START["convergence"], **(start or {})}
    controls = [
        make_control("beta", "β", "residual coefficient", g["betas"], s["beta"]),
        make_control("mu", "μ", "step size", g["mus"], s["mu"]),
        make_control("d_qk", "d<sub>QK</sub>", "query/key width (scale 1/d<sub>QK</sub>)", g["d_qks"],
                     s["d_qk"]),
    ]
    charts = _cv_charts(g, data["positions"])
    add_static_labels(charts, data["positions"])
    overview = _overview(controls, data["positions"], 0, 2, description=(
        "Overview: for every beta and d_QK at the current step size, the loss after the run over "
        "the loss at the start; the current position outlined."),
        color_title="last loss ÷ first loss (grey: diverged)")
    size = len(g["betas"]) * len(g["mus"]) * len(g["d_qks"])
    note = (f"Precomputed with convres when the book was built: {len(g['betas'])} values of β × "
            f"{len(g['mus'])} of μ × {len(g['d_qks'])} of d<sub>QK</sub> = {size} runs of up to "
            f"{g['steps']} gradient-descent steps each.")
    alt = ("Two stacked panels against the gradient-descent step: the loss on a log scale with the "
           "theorem's envelope, and the smallest singular values of Z_t and H_t.")
    return Explorer("convergence", "Convergence explorer", controls, charts, data["positions"],
                    lambda rec, values: convergence_figure(rec, g, values), note, alt, g,
                    presets=_presets("convergence", controls, presets), overview=overview)


def convergence_figure(record: Mapping, grid: Mapping | None = None, values: Mapping | None = None):
    """The static frame of one convergence position: the loss and the envelope above, the
    smallest singular values below."""
    g = merge_grid(grid or {}, CONVERGENCE_GRID, GRID_LISTS["explorer_convergence"])
    charts = _cv_charts(g, {"this": record})
    rec = with_labels(charts, record)
    fig, (ax1, ax2) = figure(1, 2, width=FIGURE_WIDTH_IN, height=3.1)
    draw_chart(ax1, charts[0], rec)
    draw_chart(ax2, charts[1], rec)
    if values:
        fig.suptitle(f"β = {value_text(values['beta'])}, μ = {value_text(values['mu'])}, "
                     f"d_QK = {values['d_qk']} (scale 1/d_QK)", fontsize=11)
    return fig


def convergence_live(beta: float = 1.0, mu: float = 0.002, d_qk: int = 32, grid: Mapping | None = None):
    """The convergence explorer for a live kernel: sliders for any ``beta`` in [0, 2], ``mu`` from
    1e-4 to 0.1 (log scale) and ``d_qk`` a power of two up to 4096; every change reruns gradient
    descent with convres (:func:`convergence_position`) and redraws the static frame."""
    import ipywidgets as w
    g = merge_grid(grid or {}, CONVERGENCE_GRID, GRID_LISTS["explorer_convergence"])
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
