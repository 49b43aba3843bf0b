"""The chapters' own figures (on :func:`convres.plotting.figure`), one call per figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .gd import History
from .plotting import figure, legend_on_top


def _legend_above(ax) -> None:
    ax.legend(frameon=False, fontsize=8, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0))


def _median(sweep: Mapping) -> dict:
    return {k: np.median(v, axis=0) for k, v in sweep.items() if k not in ("d_qk", "betas")}


def plot_collapse_sweep(sweep: Mapping, sweep_sqrt: Mapping):
    """*Rank collapse*: medians of :func:`convres.collapse.dqk_sweep_seeds` against ``d_QK``."""
    d_qks, betas = list(sweep["d_qk"]), list(sweep["betas"])
    med, sq = _median(sweep), _median(sweep_sqrt)
    smin = sweep["attn_sigma_min"]
    band = (np.quantile(smin, 0.1, axis=0)[1:], np.quantile(smin, 0.9, axis=0)[1:])
    fig, axes = figure(1, 3, width=4.8, height=2.5)
    ax = axes[0]
    low = band[0].min() / 3   # the axis starts below d_QK >= 4's band
    ax.loglog(d_qks[1:], med["attn_sigma_min"][1:], "o-", color="tab:orange",
              label=r"$\sigma_{\min}(\mathrm{Attn}(X))$")
    ax.fill_between(d_qks[1:], *band, color="tab:orange", alpha=0.15)
    ax.plot(d_qks[0], low, "v", color="tab:orange", clip_on=False)  # d_QK = 1, off the axis
    ax.annotate(f"{med['attn_sigma_min'][0]:.0e}".replace("e-", r"$\times10^{-") + "}$",
                (d_qks[0], low), xytext=(6, 2), textcoords="offset points", fontsize=7,
                color="tab:orange")
    for j, (b, c) in enumerate(zip(betas, ["#6baed6", "#2171b5", "#08306b"])):
        ax.loglog(d_qks, med["Z_sigma_min"][:, j], "^-", color=c,
                  label=rf"$\sigma_{{\min}}(Z)$, $\beta={b:g}$")
    ax.loglog(d_qks, med["attn_sigma_max"], "x--", color="tab:orange", alpha=0.6,
              label=r"$\sigma_{\max}(\mathrm{Attn}(X))$")
    ref = med["attn_sigma_min"][3] * (np.array(d_qks) / 64.0) ** -0.5
    ax.loglog(d_qks[3:], ref[3:], ":", color="k", label=r"slope $-1/2$")
    ax.set_ylabel("singular value")
    ax.set_ylim(low, 30)
    _legend_above(ax)
    ax = axes[1]
    for key, fmt, color, label in (
            ("attn_effective_rank", "o-", "tab:orange", "effective rank, Attn"),
            ("attn_stable_rank", "s--", "tab:orange", "stable rank, Attn"),
            ("Z_effective_rank", "^-", "#08306b", r"effective rank, $Z$ ($\beta=1$)"),
            ("Z_stable_rank", "v--", "#08306b", r"stable rank, $Z$ ($\beta=1$)")):
        y = med[key] if key.startswith("attn") else med[key][:, betas.index(1.0)]
        ax.semilogx(d_qks, y, fmt, color=color, label=label)
    ax.set_ylabel(r"rank measure (at most $n = 8$)")
    ax.set_ylim(0, 9)
    _legend_above(ax)
    for ax in axes[:2]:
        ax.set_xlabel(r"$d_{QK}$ (scale $1/d_{QK}$)")
    ax = axes[2]
    for m, ls, s_, (c1, c2) in ((med, "-", "1/d_{QK}", ("tab:orange", "tab:red")),
                               (sq, ":", r"1/\sqrt{d_{QK}}", ("tab:green", "tab:purple"))):
        ax.loglog(d_qks, m["attn_rank_one_residual"], "o" + ls, color=c1,
                  label=rf"res(Attn), ${s_}$")
        ax.loglog(d_qks, m["dist_uniform"], "d" + ls, color=c2, label=rf"$\|S-U\|_2$, ${s_}$")
    ax.set_xlabel(r"$d_{QK}$")
    ax.set_ylabel(r"$\|S-U\|_2$ or relative res")
    _legend_above(ax)
    return fig


def plot_uniform_bound(sweep: Mapping):
    """*Rank collapse*: ``sigma_2(Attn(X))`` and its two bounds against ``d_QK``, medians."""
    med = _median(sweep)
    fig, ax = figure(1, width=4.8, height=3.2)
    ax.loglog(sweep["d_qk"], med["attn_sv"][:, 1], "o-", color="tab:orange",
              label=r"$\sigma_2(\mathrm{Attn}(X))$")
    ax.loglog(sweep["d_qk"], med["uniform_bound"], "ks--", label=r"$\|S-U\|_2\|X\|_2\|W_V\|_2$")
    ax.loglog(sweep["d_qk"], med["logit_bound"], "k^:",
              label=r"$\frac{1}{2}\|sL\|_F\|X\|_2\|W_V\|_2$")
    ax.set_xlabel(r"$d_{QK}$ (scale $1/d_{QK}$)")
    ax.set_ylabel("value (median over instances)")
    _legend_above(ax)
    return fig


def plot_saturated(scales: Sequence[float], sweep: Mapping, hot_bound):
    """*Rank collapse*: :func:`convres.collapse.scale_sweep` on the saturated instance."""
    floor = 1e-17
    fig, axes = figure(1, 3, width=4.8, height=2.8)
    ax = axes[0]
    ax.loglog(scales, np.maximum(sweep["attn_sigma_min"], floor), "o-", color="tab:orange",
              label=r"$\sigma_{\min}(\mathrm{Attn}(X))$")
    ax.loglog(scales, sweep["Z_sigma_min"][:, 0], "^-", color="#6baed6",
              label=r"$\sigma_{\min}(Z)$, $\beta=0.1$")
    ax.loglog(scales, sweep["Z_sigma_min"][:, 1], "v-", color="#08306b",
              label=r"$\sigma_{\min}(Z)$, $\beta=1$")
    ax.axhline(floor, color="0.6", lw=0.8, ls=":")
    ax.set_ylabel(r"smallest singular value")
    _legend_above(ax)
    ax = axes[1]
    ax.loglog(scales, sweep["dist_uniform"], "d-", color="tab:red", label=r"$\|S-U\|_2$")
    ax.loglog(scales, np.maximum(sweep["dist_one_hot"], floor), "s-", color="tab:purple",
              label=r"$\|S-\mathbf{1}e_0^\top\|_2$")
    ax.loglog(scales, np.maximum(hot_bound, floor), "--", color="tab:purple", lw=0.8,
              label=r"bound $2(n-1)\sqrt{n}e^{-s\min_i m_i}$")
    ax.loglog(scales, np.maximum(sweep["S_rank_one_residual"], floor), "x:", color="0.3",
              label=r"$\mathrm{res}(S)$")
    ax.set_ylim(floor / 3, 30)
    ax.set_ylabel(r"distance (floor $10^{-17}$)")
    _legend_above(ax)
    ax = axes[2]
    ax.semilogx(scales, sweep["attn_effective_rank"], "o-", color="tab:orange")
    ax.set_ylim(0.9, 2)
    ax.set_ylabel(r"effective rank of $\mathrm{Attn}(X)$")
    for ax in axes:
        ax.set_xlabel("attention scale $s$")
    return fig


def plot_weyl(betas, sv_Z, bounds, sigma_min_A: float):
    """*Rank collapse*: the two smallest singular values of ``Z`` against ``beta``, and their Weyl bounds."""
    fig, ax = figure(1, width=4.8, height=3.4)
    for k, fmt, ls, color in ((0, "^-", "--", "#08306b"), (1, "v-", ":", "#4292c6")):
        label = r"$\sigma_n(Z)=\sigma_{\min}(Z)$" if k == 0 else r"$\sigma_{n-1}(Z)$"
        ax.loglog(betas, sv_Z[:, k], fmt, markevery=4, color=color, label=label)
        ax.loglog(betas, np.where(bounds[:, k] > 0, bounds[:, k], np.nan), ls, color=color,
                  label=rf"Weyl $\beta\sigma_{{\min}}(X)-\sigma_{k + 1}(\mathrm{{Attn}})$")
    ax.axhline(sigma_min_A, color="tab:orange", ls="-.", label=r"$\sigma_{\min}(\mathrm{Attn}(X))$")
    ax.set_xlabel(r"residual coefficient $\beta$")
    ax.set_ylabel("singular value")
    _legend_above(ax)
    return fig


def plot_beta_runs(runs: Mapping[str, History], ratio_ylim=None):
    """*The model*, *Assumptions*: the loss of runs by beta; with ``ratio_ylim`` also ``sigma_min(Z_t)``
    and ``Phi_{t+1} / Phi_t``."""
    panels = 1 if ratio_ylim is None else 3
    fig, axes = figure(1, panels, width=5.6, height=3.0 if panels == 1 else 2.2)
    axes = np.atleast_1d(axes)
    for (label, h), mk, c in zip(runs.items(), ("o", "s"), ("tab:orange", "tab:blue")):
        axes[0].semilogy(h.loss, marker=mk, markevery=30, color=c,
                         label=label.replace("beta", r"$\beta$"))
        if panels == 3:
            axes[1].semilogy(h.record_steps, h.sigma_min_Z, marker=mk, markevery=30, color=c)
            axes[2].plot(h.ratio, marker=mk, markevery=30, color=c)
    axes[0].set_ylabel(r"loss $\Phi(\theta_t)$")
    if panels == 3:
        ratio = next(iter(runs.values())).ratio
        up = np.flatnonzero(ratio > 1)       # steps t with Phi_{t+1} > Phi_t
        axes[2].plot(up, ratio[up], "x", color="tab:red", label="loss rises")
        axes[2].axhline(1, color="black", linestyle="--", linewidth=0.8)
        axes[2].set_ylim(*ratio_ylim)
        axes[1].set_ylabel(r"$\sigma_{\min}(Z_t)$")
        axes[2].set_ylabel(r"$\Phi(\theta_{t+1})/\Phi(\theta_t)$")
    axes[-1].set_xlabel("gradient-descent step $t$")
    legend_on_top(fig, 3 if panels == 3 else 2)
    return fig


def plot_contraction(run):
    """*The theorem*: a :class:`convres.theory.TheoremRun`'s loss against ``(1 - mu alpha)^t Phi_0``."""
    loss, mu_alpha, excess = run.history.loss, run.mu * run.alpha, run.check.contraction.excess
    t = np.arange(len(loss))
    fig, (ax1, ax2) = figure(1, 2, width=5.6, height=2.1)
    ax1.semilogy(t, loss, "o-", ms=3, markevery=30, label=r"$\Phi(\theta_t)$")
    ax1.semilogy(t, loss[0] * (1 - mu_alpha) ** t, "k--",
                 label=r"$(1-\mu\alpha)^t\,\Phi(\theta_0)$")
    ax1.set_ylabel("loss")
    ax2.plot(np.arange(len(excess)), excess, "s-", ms=3, markevery=30, color="tab:orange",
             label=r"$\Phi_{t+1}/\Phi_t-(1-\mu\alpha)$")
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel("excess")
    legend_on_top(fig, 3, fontsize=8)
    return fig


def plot_depth(res: Mapping, sig: Mapping):
    """*Multiple layers*: per block, ``H^(l)``'s relative distance to rank one and ``sigma_Nn / ||.||_2``."""
    fig, axes = figure(1, 2, width=5.6, height=2.5)
    style = {"pure attention": ("tab:red", "v", "pure attention"),
             "attention + FFN": ("tab:orange", "s", "attention + FFN"),
             "residual": ("tab:blue", "o", r"residual, $\beta = 1$")}
    for name, (color, marker, label) in style.items():
        for ax, values in zip(axes, (res[name], sig[name])):
            for k, v in enumerate(values):
                ax.semilogy(range(1, len(v) + 1), np.maximum(v, 1e-18), color=color,
                            marker=marker, alpha=0.8, label=label if k == 0 else None)
    axes[0].set_ylabel(r"$\mathrm{res}(H^{(\ell)})/\|H^{(\ell)}\|_F$")
    axes[1].set_ylabel(r"$\sigma_{Nn}(H^{(\ell)})/\|H^{(\ell)}\|_2$")
    axes[1].set_xlabel(r"block $\ell$")
    legend_on_top(fig, 3, fontsize=8)
    return fig


def plot_separation_window(run: Mapping, floor: float):
    """*Separation*: one draw's loss without and with the residual, the certified window shaded."""
    every = max(1, run["T_lb"] // 200)
    fig, ax = figure(1, width=5.6, height=3.0)
    ax.semilogy(np.arange(len(run["loss"])) * every, run["loss"], "o-", ms=3, markevery=20,
                label=r"$\beta=0$")
    t1 = np.arange(len(run["residual_loss"])) * every          # it stops once converged
    ax.semilogy(t1, np.maximum(run["residual_loss"], 1e-30), "s--", ms=3, label=r"$\beta=1$")
    ax.axhline(0.5 * floor, color="k", ls=":", lw=1.2, label=r"$\Phi_{\mathrm{floor}}/2$")
    ax.axvspan(run["steps_to"], run["T_lb"], color="tab:green", alpha=0.15,
               label="certified window")
    ax.set_ylim(1e-30, 10)
    ax.set_xlabel("gradient-descent step $t$")
    ax.set_ylabel("loss")
    legend_on_top(fig, 4, fontsize=8)
    return fig


def plot_plateaus(family, sims):
    """*Separation*: plateau lengths (``mu t``) against ``d_QK``: ``T_lb`` and the escapes."""
    fig, ax = figure(1, width=5.6, height=3.4)
    for data, col, mark, color, label in (
            (family, "lb", "o-", "tab:blue", r"certified $T_{\mathrm{lb}}$, $\mu=0.1$"),
            (family, "lb_small", "o--", "tab:blue", r"certified $T_{\mathrm{lb}}$, $\mu=10^{-3}$"),
            (family, "esc", "s-", "tab:red", "measured escape (family)"),
            (sims, "esc", "^--", "tab:green", r"measured escape (Simulations, $\mu=0.002$)")):
        g = data.groupby("d_qk")[col]
        x = np.array(sorted(data.d_qk.unique()))
        ax.fill_between(x, g.min(), g.max(), color=color, alpha=0.12)
        ax.loglog(x, g.median(), mark, color=color, ms=6, label=label,
                  mfc="white" if col == "lb_small" else color)
    x = np.array(sorted(family.d_qk.unique()))
    ax.loglog(x, family[family.d_qk == 16].esc.median() * np.sqrt(x / 16), "k:",
              label=r"$\propto\sqrt{d_{QK}}$")
    ax.set_xlabel("$d_{QK}$")
    ax.set_ylabel(r"plateau, in units of $\mu t$")
    legend_on_top(fig, 2, fontsize=8)
    return fig


def plot_width_growth(growth, d_star):
    """*Width*: the proven ``d_min`` and the measured ``d*`` against ``N n``, log-log."""
    fig, ax = figure(1, width=5.6, height=3.4)
    ax.loglog(growth.Nn, growth.d_min, "o-", color="tab:blue", label=r"proven $d_{\min}$")
    ax.loglog(d_star.index, d_star.values, "s", ms=7, color="tab:red", label=r"measured $d^*$")
    ax.loglog(growth.Nn, growth.lower, "k--", lw=1, label=r"lower bound $2.80\,(Nn)^2$")
    last = growth.iloc[-1]
    ax.loglog(growth.Nn, last.d_min * (growth.Nn / last.Nn) ** 2, "k:", lw=1, label="slope 2")
    ax.set_xlabel("training tokens $Nn$")
    ax.set_ylabel("width $d$")
    legend_on_top(fig, 2, fontsize=8)
    return fig
