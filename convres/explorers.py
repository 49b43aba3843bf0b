"""Live explorers: gradient descent run in the reader's browser (``web/model.js``, float64) on
instances that convres exports. The attention enters only through ``W_Q W_K^T`` on the span of the
tokens, so a :func:`bank` holds ``P = A B^T``, ``A A^T``, ``B B^T`` (``A = Q^T W_Q``,
``B = Q^T W_K``, ``Q`` a basis of the rows of ``X``) and ``Q^T W_V``: a step costs the same at
every ``d_QK``. :func:`run` is the same run in convres."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .cache import cached_json
from .collapse import rank_one_floor
from .experiments.simulations import ESCAPE
from .gd import BLOWUP, gradient_descent
from .instances import problem
from .lemmas import mu_max, rate_alpha
from .model import SCALES, ModelConfig, forward_trace
from .plotting import figure, figure_png
from .rank import sigma_nn
from .show import HTMLBlock

#: The instance families (:func:`convres.instances.problem`): sizes, activation, weight seed offset.
FAMILIES: dict[str, dict] = {
    "collapse": dict(N=4, n=4, d=32, m=32, activation="relu", weight_offset=1),
    "simulations": dict(N=4, n=4, d=32, m=32, activation="gelu", weight_offset=1000),
    "theorem": dict(N=2, n=4, d=16, m=16, activation="gelu", weight_offset=1),
}
#: A run converged below ``RTOL`` times its first loss (float64 rounding).
RTOL = 1e-20


def instance(family: str, seed: int, d_qk: int, *, beta: float = 0.0, scale: str = "1/d_qk"):
    """``(params, X, Y, cfg)`` of ``family`` (:data:`FAMILIES`) for the data seed ``seed``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}.")
    f = FAMILIES[family]
    cfg = ModelConfig(d=f["d"], d_qk=d_qk, m=f["m"], c=1, beta=beta, activation=f["activation"],
                      scale=scale)
    return (*problem(cfg, f["N"], f["n"], seed, weight_seed=seed + f["weight_offset"]), cfg)


def _b64(a) -> str:
    return base64.b64encode(np.ascontiguousarray(np.asarray(a, dtype=np.float64), "<f8").tobytes()).decode()


def bank(family: str, seeds: Sequence[int], d_qks: Sequence[int]) -> dict:
    """The instances a page runs (base64 float64): per seed the data, per seed and ``d_QK`` the weights."""
    f = FAMILIES[family]
    out: dict = {"family": family, "act": f["activation"], "data": {}, "weights": {},
                 **{k: f[k] for k in ("N", "n", "d", "m")}, "r": f["N"] * f["n"]}
    for seed in seeds:
        for d_qk in d_qks:
            p, X, Y, _ = instance(family, seed, d_qk)
            Xs = X.numpy().reshape(-1, f["d"])
            Q = np.linalg.qr(Xs.T)[0]
            A, B = Q.T @ p["layer1.W_Q"].numpy(), Q.T @ p["layer1.W_K"].numpy()
            out["data"][str(seed)] = {"X": _b64(Xs), "R": _b64(Xs @ Q), "Y": _b64(Y.numpy()),
                                      "floor": rank_one_floor(Y)}
            out["weights"][f"{seed}/{d_qk}"] = {
                "V": _b64(Q.T @ p["layer1.W_V"].numpy()), "W_1": _b64(p["layer1.W_1"]),
                "W_2": _b64(p["layer1.W_2"]), "W_U": _b64(p["W_U"]), "P": _b64(A @ B.T),
                "Gq": _b64(A @ A.T), "Gk": _b64(B @ B.T)}
    return out


def run(family: str, seed: int, d_qk: int, beta: float, mu: float, *, scale: str = "1/d_qk",
        steps: int = 500, stop_at_escape: bool = False) -> dict:
    """The page's run by :func:`convres.gradient_descent` (cached): loss, status, floor, escape step,
    ``alpha`` and ``sigma_min(Z_0)``."""
    config = dict(family=family, seed=seed, d_qk=d_qk, beta=beta, mu=mu, scale=scale, steps=steps,
                  stop_at_escape=stop_at_escape, rtol=RTOL)

    def compute() -> dict:
        params, X, Y, cfg = instance(family, seed, d_qk, beta=beta, scale=scale)
        floor = rank_one_floor(Y)
        _, h = gradient_descent(params, X, Y, cfg, mu, steps, blowup=BLOWUP, rtol=RTOL,
                                tol=ESCAPE * floor if stop_at_escape else 0.0)
        return {"loss": h.loss.tolist(), "status": h.status, "floor": floor,
                "escape": escape_step(h.loss, floor), "alpha": rate_alpha(params, X, cfg),
                "sigma_Z0": sigma_nn(forward_trace(params, X, cfg).Z[0].detach())}

    return cached_json("explorer-run", config, compute, source="convres.explorers")


def escape_step(loss, floor: float) -> int | None:
    """The first step whose loss is below :data:`ESCAPE` times ``floor`` (*Simulations*), or None."""
    below = np.flatnonzero(np.asarray(loss) < ESCAPE * floor)
    return int(below[0]) if below.size else None


class Explorer:
    """A live explorer that ``web/explorer.js`` draws from :meth:`payload`."""

    def __init__(self, name: str, title: str, family: str, *, seeds: Sequence[int], d_qks: Sequence[int],
                 start: Mapping, mu_range=(1e-3, 2e-2), horizon: int = 5000,
                 charts: Sequence[str] = ("loss", "sigma", "escape"), presets: Sequence[Mapping] = (),
                 alt: str = "", mu_hat: Mapping | None = None):
        self.name, self.title, self.family, self.alt = name, title, family, alt
        self.seeds, self.d_qks, self.horizon, self.charts = list(seeds), list(d_qks), horizon, list(charts)
        self.beta_range, self.mu_range, self.mu_hat = [0.0, 2.0], list(mu_range), mu_hat
        self.start = dict(start)
        self.presets = [dict(p) for p in presets]

    def preset(self, preset_id: str) -> dict:
        for p in self.presets:
            if p["id"] == preset_id:
                return p
        raise ValueError(f"explorer {self.name!r} has no preset {preset_id!r}; it has "
                         f"{[p['id'] for p in self.presets]}.")

    def link(self, preset_id: str) -> HTMLBlock:
        """A link for the prose that sets the explorer to the preset ``preset_id``."""
        text = self.preset(preset_id)["label"]
        return HTMLBlock(f'<a class="cx-preset-link" href="#cx-{self.name}" data-cx-preset="{preset_id}" '
                         f'title="set the explorer to this setting">{text}</a>')

    def payload(self) -> dict:
        """What the page embeds (JSON): the settings, the presets and the bank."""
        return {"name": self.name, "title": self.title, "start": self.start, "presets": self.presets,
                "beta": self.beta_range, "mu": self.mu_range, "d_qks": self.d_qks, "seeds": self.seeds,
                "scales": list(SCALES[:2]), "horizon": self.horizon, "charts": self.charts,
                "escape": ESCAPE, "rtol": RTOL, "blowup": BLOWUP, "mu_hat": self.mu_hat,
                "bank": bank(self.family, self.seeds, self.d_qks)}

    def html(self) -> str:
        data = json.dumps(self.payload(), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
        sizes = FAMILIES[self.family]
        note = (f"Computed in your browser: gradient descent on the model of the book "
                f"({sizes['activation']}, N = {sizes['N']} sequences of n = {sizes['n']} tokens, "
                f"d = {sizes['d']}, m = {sizes['m']}), "
                f"from the initial weights convres draws for seeds {', '.join(map(str, self.seeds))}"
                + (f" and d<sub>QK</sub> = {', '.join(map(str, self.d_qks))}" if len(self.d_qks) > 1 else "")
                + f" ({len(data) // 1000} kB).")
        return (f'<div class="convres-explorer mathjax_ignore" id="cx-{self.name}" role="figure" '
                f'aria-label="{html.escape(self.title)}">\n<p class="cx-note">{note}</p>\n'
                f'<p class="cx-fallback">{html.escape(self.alt)} This interactive figure needs the '
                "JavaScript of the book's web site.</p>\n"
                f'<script type="application/json" class="cx-data">{data}</script>\n</div>')

    def png(self) -> bytes:
        """The static figure of the start: both runs' loss, and the escape step against ``d_QK``."""
        v = self.start
        runs = {b: run(self.family, v["seed"], v["d_qk"], b, v["mu"], scale=v["scale"],
                       steps=self.horizon) for b in dict.fromkeys([0.0, v["beta"]])}
        panels = 2 if "escape" in self.charts else 1
        fig, axes = figure(panels, 1, width=6.0 / panels, height=3.0)
        ax = axes[0] if panels == 2 else axes
        for (b, r), style, color in zip(runs.items(), ("-", "--"), ("#D55E00", "#0072B2")):
            ax.loglog(np.arange(1, len(r["loss"]) + 1), r["loss"], style, color=color, label=f"β = {b:g}")
        ax.axhline(runs[0.0]["floor"], color="0.3", ls=":", label="rank-one floor")
        ax.set(xlabel="step t + 1", ylabel="loss Φ(θₜ)")
        ax.legend(frameon=False, fontsize=8)
        if panels == 2:
            esc = [(q, r["escape"]) for q in self.d_qks
                   for r in [run(self.family, v["seed"], q, 0.0, v["mu"], scale=v["scale"],
                                 steps=self.horizon, stop_at_escape=True)] if r["escape"]]
            if esc:
                axes[1].loglog(*zip(*esc), "o-", color="#D55E00", label="β = 0")
            axes[1].set_xscale("log")
            axes[1].axvline(v["d_qk"], color="0.5", ls=":")
            axes[1].set(xlabel="d_QK", ylabel="escape step")
        scale = {"1/d_qk": "1/d_QK", "1/sqrt(d_qk)": "1/√d_QK"}[v["scale"]]
        fig.suptitle(f"β = {v['beta']:g}, μ = {v['mu']:.3g}, d_QK = {v['d_qk']}, scale {scale}, "
                     f"seed {v['seed']}", fontsize=10)
        return figure_png(fig, dpi=200)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "image/png": base64.b64encode(self.png()).decode("ascii"),
                "text/plain": f"{self.title} (interactive on the book's web site). {self.alt}"}


def _preset(preset_id: str, label: str, look: str, **values) -> dict:
    return {"id": preset_id, "label": label, "look": look, "values": values}


_DQK = "d<sub>QK</sub>"


def _setting(beta, d_qk, *, mu=0.002, seed=0, scale="1/d_qk") -> dict:
    return dict(beta=beta, mu=mu, d_qk=d_qk, seed=seed, scale=scale)


def rank_collapse_explorer() -> Explorer:
    """The explorer of *Rank collapse under gradient descent* (the figure's instance)."""
    return Explorer(
        "rank-collapse", "Rank-collapse explorer", "collapse", seeds=[0, 1, 2],
        d_qks=[4, 16, 64, 256, 1024, 4096], start=_setting(1.0, 1024),
        alt=("Three panels: the loss of gradient descent without residual and with the chosen beta "
             "against the step (log scales) with the rank-one floor; the smallest singular value of "
             "the attention output Z_t; the escape step of the run without residual against d_QK."),
        presets=[
            _preset("figure", f"the figure: β = 1, {_DQK} = 1024", "The two runs of the figure: without "
                    "residual (orange) the loss sits on the rank-one floor for hundreds of steps, then "
                    "leaves it; with β = 1 (blue) it falls at once.", **_setting(1.0, 1024)),
            _preset("wide", f"wide attention: β = 0, {_DQK} = 16", "No residual, but the attention starts "
                    "far from uniform: the plateau is short.", **_setting(0.0, 16)),
            _preset("scale", f"the usual scale 1/√{_DQK}", "No residual at the usual attention scale: "
                    "the plateau is short at every d<sub>QK</sub> (lowest panel).",
                    **_setting(0.0, 1024, scale="1/sqrt(d_qk)")),
            _preset("small", "a small residual: β = 0.01", "A residual a hundred times weaker than the "
                    "figure's: σ<sub>min</sub>(Z) starts far above the run without residual, yet the "
                    "loss sits on the floor as long.", **_setting(0.01, 1024)),
            _preset("diverge", "too strong for the step: β = 2", "With β = 2 the step μ = 0.002 is "
                    "too large: the blue run diverges and stops.", **_setting(2.0, 1024)),
        ])


def convergence_explorer() -> Explorer:
    """The explorer of *Explore convergence* (the instances of *Simulations*)."""
    return Explorer(
        "convergence", "Convergence explorer", "simulations", seeds=[0, 1, 2],
        d_qks=[4, 16, 64, 256, 1024, 4096], start=_setting(1.0, 256),
        charts=("loss", "envelope", "sigma", "escape"),
        alt=("Three panels: the loss of gradient descent without residual and with the chosen beta "
             "against the step (log scales), with the theorem's envelope of the chosen run and the "
             "rank-one floor; the smallest singular value of Z_t; the escape step without residual "
             "against d_QK."),
        presets=[
            _preset("linear", f"linear convergence: β = 1, {_DQK} = 256", "With the residual the loss "
                    "falls at every step, down to float64 rounding within a few hundred steps, far below "
                    "the theorem's envelope (dotted).", **_setting(1.0, 256)),
            _preset("plateau", f"the plateau: β = 0, {_DQK} = 1024", "No residual and nearly uniform "
                    "attention: α is tiny, the envelope flat, and the loss sits on the floor for "
                    "hundreds of steps before it leaves it.", **_setting(0.0, 1024)),
            _preset("scale", f"the usual scale 1/√{_DQK}", "The same without residual at the usual scale: "
                    "no long plateau, at any d<sub>QK</sub>.", **_setting(0.0, 1024, scale="1/sqrt(d_qk)")),
            _preset("small", f"a weak residual: β = 0.03, {_DQK} = 1024", "The plateau's setting with "
                    "a weak residual: a shorter plateau, and an envelope that is still flat.",
                    **_setting(0.03, 1024)),
            _preset("diverge", "too large a step: μ = 0.02", "With β = 1 the step μ = 0.02 is too "
                    "large: the run diverges.", **_setting(1.0, 256, mu=0.02)),
        ])


def theorem_explorer(seeds: Sequence[int] = (0, 1, 2)) -> Explorer:
    """The theorem's envelope beside a live run, ``mu = 1/(2 L_hat)`` (:func:`convres.lemmas.mu_max`)."""
    hat = {str(s): mu_max(*instance("theorem", s, 16, beta=1.0, scale="1/sqrt(d_qk)"), seed=s)
           for s in seeds}
    start = _setting(1.0, 16, mu=hat["0"], seed=seeds[0], scale="1/sqrt(d_qk)")
    lo = 10 ** math.floor(math.log10(min(hat.values()) / 10))
    hi = 10 ** math.ceil(math.log10(max(hat.values()) * 20))
    return Explorer(
        "theorem", "The theorem's envelope, live", "theorem", seeds=seeds, d_qks=[16], start=start,
        mu_range=(lo, hi), horizon=300, charts=("envelope", "ratio"), mu_hat=hat,
        alt=("Two panels against the step: the loss and the theorem's envelope (1 - mu alpha)^t Phi_0 "
             "on a log scale; the ratio of consecutive losses against 1 - mu alpha."),
        presets=[
            _preset("chapter", "the chapter's step μ̂ = 1/(2L̂)", "The loss stays under the envelope "
                    "at every step, and far below it.", **start),
            _preset("large", "a step 20 times larger", "Far above the chapter's step: the loss rises "
                    "at the first step, above 1 − μα (red) and above the envelope, and then converges.",
                    **{**start, "mu": 20 * hat["0"]}),
            _preset("no-residual", "no residual: β = 0", "Without the residual α is tiny: the envelope "
                    "is nearly flat and guarantees little, while the loss still falls.",
                    **{**start, "beta": 0.0}),
        ])
