"""Which experiment lies inside which theorem: :func:`scope_table` decides the shape hypotheses from
the settings alone; :func:`certified_scope` adds whether a certificate establishes the rest."""

from __future__ import annotations

import pandas as pd

from .experiments import EXPERIMENTS, settings
from .experiments.theorem import VARIANTS, scope_certificates
from .lemmas import parameter_count
from .model import ModelConfig

#: The theorems of the book that :func:`scope_table` evaluates, as the chapters name them.
THEOREM_NAMES = {"thm-main": "theorem through $W_U$", "thm-ffn": "theorem through the FFN"}


def scope_rows(label: str, cfg: ModelConfig, N: int, n: int, note: str = "") -> list[dict]:
    """The hypotheses of both theorems that the shapes of ``cfg`` on ``N`` sequences of ``n`` tokens
    decide: ``experiment``, ``theorem``, ``hypothesis``, ``holds``, ``value``, ``threshold``, ``note``."""
    pooled = cfg.pool == "mean"
    rows_out = N if pooled else N * n
    p = parameter_count(cfg)
    smooth = cfg.act.smooth
    act = f"{cfg.activation}: " + ("smooth" if smooth else "not smooth (act' jumps)")

    def row(theorem, hypothesis, holds, value, threshold, why):
        return {"experiment": label, "theorem": theorem, "hypothesis": hypothesis, "holds": bool(holds),
                "value": float(value), "threshold": float(threshold), "note": why}

    pl = ("any PL: parameters p >= outputs", p >= rows_out * cfg.c, p, rows_out * cfg.c,
          "a PL inequality needs rank J = outputs; fewer weights exclude it")
    return [
        row("thm-main", "per-token readout", not pooled, 0.0 if pooled else 1.0, 1.0,
            "the theorem through W_U is stated per token" + ("; this model pools" if pooled else "")),
        row("thm-main", "(A1) width N n <= d", N * n <= cfg.d, N * n, cfg.d,
            f"N n = {N} x {n}" + (f"; {note}" if note else "")),
        row("thm-main", "(A2) smooth activation", smooth, smooth, 1.0, act),
        row("thm-main", *pl),
        row("thm-ffn", "(F1) width m >= rows", cfg.m >= rows_out, cfg.m, rows_out,
            f"rows = {'N (pooled)' if pooled else 'N n (per token)'} = {rows_out}"),
        row("thm-ffn", "(F2) outputs c <= d", cfg.c <= cfg.d, cfg.c, cfg.d, "sigma_c(W_U) > 0 possible"),
        row("thm-ffn", "(A2) smooth activation", smooth, smooth, 1.0, act),
        row("thm-ffn", *pl),
    ]


def _shapes(profile: str) -> list:
    """The models of the records in the report or ``in_scope`` under ``profile``."""
    return [sh for name, e in EXPERIMENTS.items() if e.in_report or e.in_scope
            for sh in e.shapes(settings(name, profile))]


def scope_table(profile: str = "book") -> list[dict]:
    """:func:`scope_rows` of every model in the report or ``in_scope`` under ``profile``."""
    return [row for sh in _shapes(profile) for row in scope_rows(sh.label, sh.cfg, sh.N, sh.n, sh.note)]


def covered(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """``(experiment model, theorem) -> failing rows`` (empty: every shape hypothesis holds)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        out.setdefault((r["experiment"], r["theorem"]), []).extend([] if r["holds"] else [r])
    return out


def scope_summary(rows: list[dict]):
    """The scope table folded to one row per experiment model and theorem (a ``DataFrame``): "all
    hold" or the failing hypotheses with their values."""
    return pd.DataFrame([{"experiment": e, "theorem": THEOREM_NAMES.get(th, th),
                          "shape hypotheses": "all hold" if not bad else
                          "fail: " + "; ".join(_failing(r) for r in bad)}
                         for (e, th), bad in covered(rows).items()])


#: A failing shape hypothesis in words (``{v}``: value, ``{t}``: threshold), TeX (:func:`convres.show.tex`).
_FAILING = {"per-token readout": "per-token readout (this model pools)",
            "(A1) width N n <= d": "(A1) width: $Nn = {v:g} > d = {t:g}$",
            "(A2) smooth activation": "(A2) smooth activation: {note}",
            "(F1) width m >= rows": r"(F1) width: $m = {v:g} < \text{{rows}} = {t:g}$",
            "(F2) outputs c <= d": "(F2) outputs: $c = {v:g} > d = {t:g}$",
            "any PL: parameters p >= outputs": "any PL inequality: parameters $p = {v:g}$ < outputs {t:g}"}


def _failing(r: dict) -> str:
    if r["hypothesis"] in _FAILING:
        return _FAILING[r["hypothesis"]].format(v=r["value"], t=r["threshold"], note=r["note"])
    return f"{r['hypothesis']} ({r['value']:g} vs {r['threshold']:g})"


def certified_scope(profile: str = "book") -> list[dict]:
    """One row per experiment model (and certified variant) and theorem: ``experiment``,
    ``configuration``, ``theorem``, ``certified``, ``failing_hypothesis`` and the largest certificate
    ``ratio`` over the seeds (``None``: none computed); what ``theorem scope`` prints."""
    shapes = _shapes(profile) + VARIANTS.shapes(settings(VARIANTS.name, profile))
    certs = {(c["experiment"], c["theorem"]): c for c in scope_certificates(profile)}
    out = []
    for sh in shapes:
        bad, c = covered(scope_rows(sh.label, sh.cfg, sh.N, sh.n, sh.note)), sh.cfg
        config = (f"N={sh.N}, n={sh.n}, d={c.d}, m={c.m}, d_QK={c.d_qk}, L={c.L}, {c.activation}, "
                  f"scale {c.scale}, {'pooled' if c.pool == 'mean' else 'per token'}")
        for theorem in THEOREM_NAMES:
            failing = [_failing(r) for r in bad[(sh.label, theorem)]]
            cert, certified, ratio = certs.get((sh.label, theorem)), False, None
            if not failing and c.L != 1:
                failing = [f"certified bounds: one block ($L = 1$), this model has $L = {c.L}$"]
            elif not failing and cert is None:
                failing = ["not certified: no certificate is computed for this configuration"]
            elif not failing and cert is not None:
                certified, ratio = bool(cert["certified"]), float(cert["ratio"])
                if not certified:
                    failing = [rf"(b) proper initialization: certificate ratio {ratio:.3g} $\ge 1$ "
                               f"({cert['certified_seeds']} of {cert['seeds']} seeds certified)"]
            out.append({"experiment": sh.label, "configuration": config + (f"; {sh.note}" if sh.note else ""),
                        "theorem": theorem, "certified": certified,
                        "failing_hypothesis": "; ".join(failing) if failing else None, "ratio": ratio})
    return out
