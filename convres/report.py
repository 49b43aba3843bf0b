"""The reproduction report's tables and badges, from :class:`convres.experiments.Result` objects
(the ML Reproducibility Checklist: claims, settings, seeds and variance, compute, deviations).
:func:`notation` writes plain-text symbols (``N n <= d``, ``beta``) in the book's TeX.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Mapping, Sequence

from .committed import pieces
from .experiments import EXPERIMENTS, Result
from .experiments.base import protocol_stamp
from .protocol import (
    CHECKS,
    CLAIMS,
    DEVIATIONS,
    EVALUATION_SEEDS,
    GRADES,
    MIN_UNITS,
    PILOT_SEEDS,
    PROBE_SEEDS,
    TAG,
)
from .show import fixed, power_of_ten, table, tex
from .theory import MIN_DECREASE

__all__ = ["VERDICT_COLORS", "NOTATION", "STATEMENTS", "notation", "badge", "verdict_counts",
           "verdict_counts_html", "claims_html", "criteria_html", "claims_table", "hypotheses_table",
           "settings_table", "spread_table", "compute_table", "deviations_table", "scale_html",
           "effect_text", "evidence_text", "effect_digits", "interval_text", "provenance_table",
           "ALL_VERDICTS",
           "claim_row", "protocol_line", "METHODS", "THUMBNAIL",
           "protocol_claims_table", "protocol_checks_table", "protocol_seeds_table",
           "protocol_deviations_table"]

#: Every verdict a row can carry: protocol v4's grades.
ALL_VERDICTS = GRADES
#: The thumbnails' width in the claims table, in CSS pixels (their PNGs have twice as many).
THUMBNAIL = 160
#: Badge colours (white text on each, contrast at least 4.5:1), one per verdict.
VERDICT_COLORS = {"reproduced": "#1b6e32", "partly": "#8a5300", "not reproduced": "#a4241b",
                  "reversed": "#6e1f5c", "inconclusive": "#55595f", "not testable": "#33405a"}

_ESCAPE = r"T_{\text{escape}}"


def _sub(text: str) -> str:
    """A subscript of the plain text (``none``, ``{L=2, matched}``) in TeX: words upright."""
    parts = text.strip("{}").split(", ")
    return r",\ ".join(f"L = {m[1]}" if (m := re.fullmatch(r"L ?= ?(\d+)", p)) else rf"\text{{{p}}}"
                       for p in parts)


#: The plain-text symbols of the experiments' rows (which the command line prints as they are) and
#: their TeX in the book's notation: ``(pattern, match -> TeX)``, tried in this order.
NOTATION = [
    (r"\blog10 max\(Phi_t ?/ ?Phi_0, 1e-0*(\d+)\)",
     lambda m: rf"\log_{{10}}\max(\Phi_t/\Phi_0,\ 10^{{-{m[1]}}})"),
    (r"\bt = 1\.\.T\b", lambda m: r"t = 1, \dots, T"),
    (r"\blog10\(T_escape\(beta = (\d+)\) / T_escape\(beta = (\d+)\)\)",
     lambda m: rf"\log_{{10}}\big({_ESCAPE}(\beta = {m[1]})/{_ESCAPE}(\beta = {m[2]})\big)"),
    (r"\bT_escape\(beta = (\d+)\)", lambda m: rf"{_ESCAPE}(\beta = {m[1]})"),
    (r"\bln\(MSE_(\{[^}]*\}|\w+) / MSE_(\{[^}]*\}|\w+)\)",
     lambda m: rf"\ln(\mathrm{{MSE}}_{{{_sub(m[1])}}}/\mathrm{{MSE}}_{{{_sub(m[2])}}})"),
    (r"(?<![\w.])-ln (Phi_t|\d+(?:\.\d+)?)\b",
     lambda m: r"-\ln " + (r"\Phi_t" if m[1] == "Phi_t" else m[1])),
    (r"Phi_\{t\+1\} <= \(1 - mu sigma_min\(H_t\)\^2\) Phi_t",
     lambda m: r"\Phi_{t+1} \le (1 - \mu\,\sigma_{\min}(H_t)^2)\,\Phi_t"),
    (r"\bmu sigma_min\(H_0\)\^2", lambda m: r"\mu\,\sigma_{\min}(H_0)^2"),
    (r"\bsigma_min\((\w+)\)(\^2)?", lambda m: rf"\sigma_{{\min}}({m[1]}){m[2] or ''}"),
    (r"\bsigma_(min|max)\b", lambda m: rf"\sigma_{{\{m[1]}}}"),
    (r"\bsigma_c\(W_U\) > 0", lambda m: r"\sigma_c(W_U) > 0"),
    (r"\bPhi_T ?/ ?Phi_0\b", lambda m: r"\Phi_T/\Phi_0"),
    (r"\bN n = (\d+) > d = (\d+)", lambda m: rf"Nn = {m[1]} > d = {m[2]}"),
    (r"\bN n <= d\b", lambda m: r"Nn \le d"),
    (r"\bN n\b", lambda m: "Nn"),
    (r"\bm = (\d+) < rows = (\d+)", lambda m: rf"m = {m[1]} < \text{{rows}} = {m[2]}"),
    (r"\bm >= rows\b", lambda m: r"m \ge \text{rows}"),
    (r"\bc <= d\b", lambda m: r"c \le d"),
    (r"\bp >= outputs\b", lambda m: r"p \ge \text{outputs}"),
    (r"\(t_0 - t_small\) / t_0", lambda m: r"(t_0 - t_{\text{small}})/t_0"),
    (r"\b1/sqrt\(d_(?:qk|QK)\)", lambda m: r"1/\sqrt{d_{QK}}"),
    (r"\b1/sqrt\((\w)\)", lambda m: rf"1/\sqrt{{{m[1]}}}"),
    (r"\b1/d_(?:qk|QK)\b", lambda m: r"1/d_{QK}"),
    (r"\bd_(?:qk|QK) to infinity\b", lambda m: r"d_{QK} \to \infty"),
    (r"\bd_(?:qk|QK)\^(\d+(?:\.\d+)?)", lambda m: rf"d_{{QK}}^{{{m[1]}}}"),
    (r"\bd_(?:qk|QK)( ?= ?\d+(?:,\d{3})*)?(?![\w.])", lambda m: r"d_{QK}" + (m[1] or "")),
    (r"\b([A-Z])_([A-Za-z0-9])\b", lambda m: rf"{m[1]}_{m[2]}"),
    (r"(?<![\w.])1e-0*(\d+)\b", lambda m: rf"10^{{-{m[1]}}}"),
    (r"(?<![\w.])(\d+(?:\.\d+)?e[+-]\d+)(?!\d)", lambda m: power_of_ten(m[1])),
    (r"(?<![\w.])-tau\b", lambda m: r"-\tau"),
    (r"\b(beta|tau|eta|mu|alpha|rho)( ?= ?-?\d+(?:\.\d+)?)?(?![\w.])", lambda m: "\\" + m[1] + (m[2] or "")),
    (r"(?<= )(<=|>=)(?= )", lambda m: r"\le" if m[1] == "<=" else r"\ge"),
    (r"\bL ?= ?(\d+)\b", lambda m: f"L = {m[1]}"),
    (r"(?<=\d) ?x(?=[ ,;)]|$)", lambda m: r"\times"),
    (r"(?<=[a-z] )x(?= [a-z])", lambda m: r"\times"),
    (r"(?<![\w.])(\d+)min\b", lambda m: rf"{m[1]}\ \text{{min}}"),
    (r"\blog10\b", lambda m: r"\log_{10}"),
]


#: The statements of the hypotheses that :func:`convres.theory.check_assumptions` and
#: :func:`convres.theory.ffn_theorem_run` check (plain text, for the command line), in the book's
#: notation; :func:`notation` looks a whole statement up here first.
STATEMENTS = {
    "N n <= d": r"$Nn \le d$",
    "act' is Lipschitz (gelu, tanh, softplus)": "the activation's derivative is Lipschitz "
                                                "(GELU, tanh, softplus)",
    "sigma_Nn(X) / ||X||_2 > 1e-10": r"$\sigma_{Nn}(X)/\|X\|_2 > 10^{-10}$",
    "sigma_Nn(H_0) / ||H_0||_2 > 1e-10": r"$\sigma_{Nn}(H_0)/\|H_0\|_2 > 10^{-10}$",
    f"mu alpha T >= ln(1/{MIN_DECREASE:g})": rf"$\mu\alpha T \ge \ln(1/{MIN_DECREASE:g})$",
    "FFN width m >= number of output rows": r"FFN width $m \ge$ the number of output rows",
    "outputs c <= d": r"outputs $c \le d$",
    "sigma_rows(M~_0) / ||M~_0||_2 > 1e-10":
        r"$\sigma_{\text{rows}}(\tilde M_0)/\|\tilde M_0\|_2 > 10^{-10}$",
    "sigma_c(W_U^0) / ||W_U^0||_2 > 1e-10": r"$\sigma_c(W_U^0)/\|W_U^0\|_2 > 10^{-10}$",
    f"mu alpha' T >= ln(1/{MIN_DECREASE:g})": rf"$\mu\alpha' T \ge \ln(1/{MIN_DECREASE:g})$",
    "mu L_hat_0 <= 1 (L_hat_0 <= L_B: a failure certifies mu > 1/L_B)":
        r"$\mu \hat L_0 \le 1$ ($\hat L_0 \le L_B$: a failure certifies $\mu > 1/L_B$)",
    "min over recorded steps of sigma_rows(M~_t) / sigma_M0":
        r"$\min_t \sigma_{\text{rows}}(\tilde M_t)/\sigma_{\text{rows}}(\tilde M_0)$ over the "
        "recorded steps",
    "min over recorded steps of sigma_c(W_U,t) / sigma_U0":
        r"$\min_t \sigma_c(W_{U,t})/\sigma_c(W_U^0)$ over the recorded steps",
    "min over steps of (Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}) / Phi_t":
        r"$\min_t\, (\Phi_t - \tfrac{\mu}{2}\|g_t\|^2 - \Phi_{t+1})/\Phi_t$",
}


def notation(text: str) -> str:
    """``text`` with the plain-text symbols of :data:`NOTATION` written as inline TeX (``$...$``,
    for :func:`convres.show.tex`): ``"d_QK = 64"`` becomes ``"$d_{QK} = 64$"``. A statement of
    :data:`STATEMENTS` is replaced whole; text already between dollars is left as it is."""
    text = str(text)
    if text in STATEMENTS:
        return STATEMENTS[text]
    for pattern, to_tex in NOTATION:
        def dollars(m, to_tex=to_tex):
            return f"${to_tex(m)}$"

        parts = text.split("$")
        parts[::2] = [re.sub(pattern, dollars, p) for p in parts[::2]]
        text = "$".join(parts)
    return text


def _html(text: str) -> str:
    return tex(notation(text))


def _claim(row: dict) -> str:
    """A row's claim as HTML: a protocol-v4 row's own TeX, else the plain text through :func:`notation`;
    a formula in parentheses, ``($\\beta = 0.1$)``, is kept on one line with its parentheses."""
    out = tex(row["tex"]) if "tex" in row else _html(row["claim"])
    return re.sub(r"\((<span class=\"math[^\"]*\">.*?</span>)\)",
                  r'<span style="white-space:nowrap">(\1)</span>', out)


def claim_row(rows: Sequence[dict], claim_id: str) -> dict:
    """The row of claim ``claim_id`` (``"S1"`` ... ``"T4"``, ``convres.protocol.CLAIMS``)."""
    found = [r for r in rows if r.get("id") == claim_id]
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows of claim {claim_id!r}; the rows' ids are "
                         f"{[r.get('id') for r in rows]}.")
    return found[0]


def badge(verdict: str) -> str:
    """An HTML badge for ``verdict`` (one of :data:`ALL_VERDICTS`)."""
    if verdict not in VERDICT_COLORS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {ALL_VERDICTS}.")
    return (f'<span style="background:{VERDICT_COLORS[verdict]};color:#fff;border-radius:0.8em;'
            f'padding:0.1em 0.6em;white-space:nowrap;font-size:0.9em">{html.escape(verdict)}</span>')


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """The number of rows of each verdict, in the order of :data:`ALL_VERDICTS`."""
    return {v: sum(r["verdict"] == v for r in rows) for v in ALL_VERDICTS}


def verdict_counts_html(rows: list[dict]) -> str:
    """One line of badges with the number of rows of each verdict that occurs."""
    counts = verdict_counts(rows)
    return "<p>" + " ".join(f"{badge(v)}&nbsp;{n}" for v, n in counts.items() if n) + "</p>"


def _html_table(head: Sequence[str], rows: Sequence[str]) -> str:
    """A table of the site's style that scrolls sideways on a narrow screen: the header cells
    ``head`` and the rows ``rows`` (each ``<tr>...</tr>``)."""
    cells = "".join(f"<th>{h}</th>" for h in head)
    return ('<div style="overflow-x:auto"><table class="table"><thead><tr>' + cells + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def claims_html(rows: list[dict], thumbnails: Mapping[str, bytes] | None = None) -> str:
    """The claims table, one group of rows per experiment (a heading row linking to its chapter):
    the claim's id and the paper's words, the verdict badge over one line of evidence
    (:func:`evidence_text`) and a thumbnail (``thumbnails[figure label]``, PNG bytes,
    :data:`THUMBNAIL` pixels wide, once per figure: a later claim of the same figure links to it by
    name) linking to the figure in its chapter."""
    thumbnails = thumbnails or {}
    head = ("claim (paper)", "verdict and evidence (book)", "figure")
    body, group, shown = [], None, set()
    for r in rows:
        exp = EXPERIMENTS[r["experiment"]]
        chapter = exp.title.split(":")[0]
        if r["experiment"] != group:
            group = r["experiment"]
            body.append(f'<tr style="border:none"><th colspan="3" style="padding-top:0.9em">'
                        f'<a href="{exp.page}.html">{html.escape(chapter)}</a></th></tr>')
        png = thumbnails.get(r["figure"])
        pic = ("the same figure" if r["figure"] in shown else "figure" if png is None else
               f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" width="{THUMBNAIL}" '
               f'style="width:{THUMBNAIL}px;max-width:none;height:auto" '
               f'alt="the {html.escape(chapter)} chapter\'s figure for this claim">')
        shown.add(r["figure"])
        body.append(f"<tr><td><b>{html.escape(r.get('id', ''))}</b> {_claim(r)}</td>"
                    f"<td>{badge(r['verdict'])}<br>{tex(evidence_text(r))}</td>"
                    f'<td><a href="{exp.page}.html#{r["figure"]}">{pic}</a></td></tr>')
    return _html_table(head, body)


def criteria_html(rows: list[dict]) -> str:
    """The criterion and the full measurement of every row (:func:`evidence_text` with the sign test,
    the pre-named subsets' grades and the alternatives'), in a collapsed block."""
    items = "".join(f"<li><b>{html.escape(r.get('id', ''))} {_claim(r)}</b> "
                    f"({html.escape(r['experiment'])}): {badge(r['verdict'])}<br>"
                    f"criterion: {_html(r['criterion'])}<br>"
                    f"measurement: {_html(evidence_text(r, full=True))}</li>" for r in rows)
    return ("<details><summary>How each verdict is decided (criteria and measurements)</summary>"
            f"<ul>{items}</ul></details>")


def effect_digits(row: dict) -> int:
    """The decimals of a claim row's numbers: two significant digits of its interval's width, at
    least two (``0.37 to 0.57``; ``-0.007 to 0.004``)."""
    lo, hi = row["ci"]
    width = hi - lo
    return 2 if width <= 0 else max(2, 1 - math.floor(math.log10(width)))


def _signed(x: float, digits: int) -> str:
    return ("+" if round(x, digits) > 0 else "") + fixed(x, digits)


def interval_text(row: dict, digits: int | None = None) -> str:
    """A row's 95% interval for the prose, ``0.37 to 0.57`` (minus signs U+2212), with ``digits``
    decimals (default :func:`effect_digits`)."""
    d = effect_digits(row) if digits is None else digits
    return f"{fixed(row['ci'][0], d)} to {fixed(row['ci'][1], d)}"


#: How the report names each interval method of :func:`convres.stats.estimate`.
METHODS = {"t-interval": "Student's t", "BCa bootstrap": "BCa bootstrap",
           "BCa bootstrap, stratified": "stratified BCa bootstrap"}


def effect_text(row: dict) -> str:
    """A claim row's effect and 95% interval, ``+0.48 (0.37 to 0.57)`` (:func:`effect_digits`
    decimals, a minus sign U+2212); empty for a row without one."""
    if row.get("effect") is None:
        return ""
    d = effect_digits(row)
    return f"{_signed(row['effect'], d)} ({interval_text(row, d)})"


def evidence_text(row: dict, *, full: bool = False) -> str:
    """The evidence of a claim row (:meth:`convres.experiments.base.ClaimRecord.row`), the same for
    every experiment: ``effect +0.48 (95% interval 0.37 to 0.57; margin 0.4; BCa bootstrap, 30
    units)``, and the diverged units; ``full`` adds the sign test, each pre-named subset's grade and
    the alternative measures' grades. A row without an interval gives its reason."""
    if row.get("effect") is None:
        text = f"no interval: {row.get('reason') or 'too few units'}"
    else:
        d = effect_digits(row)
        margin = f"{row['margin']:.2g}".replace("-", "\N{MINUS SIGN}")
        text = (f"effect {_signed(row['effect'], d)} (95% interval {interval_text(row, d)}; "
                f"margin {margin}; "
                f"{METHODS.get(row['interval'], row['interval'])}, {row['units']} units)")
        if row.get("diverged"):
            text += f", {row['diverged']} diverged"
    if not full:
        return text
    if row.get("sign_test_p") is not None:
        text += f"; sign test p = {row['sign_test_p']:.2g}"
    if row.get("subsets"):
        text += "; by subset: " + ", ".join(f"{k} {v}" for k, v in row["subsets"].items())
    if row.get("sensitivity"):
        text += "; alternatives: " + ", ".join(
            f"{x['measure']} ({x['protocol'].removesuffix(' step')} step) {x['verdict']}"
            for x in row["sensitivity"])
    return text


def scale_html(book: Mapping[str, Result], larger: Mapping[str, tuple[Result, dict] | None]) -> str:
    """Every claim at two scales: the ``book`` result beside the committed larger one
    (``larger[name]``: a :class:`Result` and its ``pieces``/``provenance``, or ``None`` where
    nothing is committed): verdict, effect with its 95% interval, and the seeds behind each."""
    head = ("experiment", "claim (paper)", "book: verdict", "book: effect (95% interval)",
            "larger: verdict", "larger: effect (95% interval)")
    body = []
    for name, res in book.items():
        big = larger.get(name)
        big_rows = big[0].claims() if big is not None else []
        for i, r in enumerate(res.claims()):
            b = big_rows[i] if i < len(big_rows) else None
            right = (f"<td>{badge(b['verdict'])}</td><td>{html.escape(effect_text(b))}</td>" if b else
                     '<td colspan="2">not computed yet</td>')
            body.append(f"<tr><td>{html.escape(name)}</td><td>{_claim(r)}</td>"
                        f"<td>{badge(r['verdict'])}</td><td>{html.escape(effect_text(r))}</td>{right}</tr>")
    return _html_table(head, body)


def provenance_table(larger: Mapping[str, tuple[Result, dict] | None]):
    """One row per committed piece: its seeds, wall time, commit, machine, PyTorch version and the
    protocol it was run under (the stamp its provenance recorded: a piece without one was run before
    the tag, by the v3 rule); one row per experiment with nothing committed (a ``Styler``,
    :func:`convres.show.table`)."""
    rows = []
    for name, big in larger.items():
        if big is None:
            rows.append({"experiment": name, "piece": "none committed", "seeds": "", "wall time": "",
                         "commit": "", "machine": "", "PyTorch": "", "protocol": ""})
            continue
        _, info = big
        blocks = pieces(name)
        for p in info["provenance"]:
            seeds = blocks[p["piece"]]
            rows.append({"experiment": name, "piece": f"{p['piece'] + 1} of {info['pieces']['total']}",
                         "seeds": f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}",
                         "wall time": f"{p['wall_seconds'] / 60:.1f} min",
                         "commit": (p["commit"] or "unknown")[:10],
                         "machine": f"{p['machine']}, {p['device']}", "PyTorch": p["torch"],
                         "protocol": protocol_line(p.get("protocol"), before=True)})
    return table(rows)


def claims_table(rows: list[dict], effect: str = "{:.2f}"):
    """The claims of one experiment as its chapter shows them (a ``Styler``, :func:`convres.show.table`):
    claim, mean per-unit effect (format ``effect``) with its 95% interval, margin, units (and how many
    diverged), sign test and verdict (with its reason and the alternative measures' grades beside it).
    ``rows`` are :meth:`convres.experiments.base.ClaimRecord.row`; a row without an effect leaves those
    cells empty."""
    def interval(ci):
        return "" if ci is None else f"{effect.format(ci[0])} to {effect.format(ci[1])}"

    sign = any("sign_test_p" in r for r in rows)
    sens = any("sensitivity" in r for r in rows)
    return table([{"claim": r.get("tex", r["claim"]), "effect": r.get("effect"),
                   "95% interval": interval(r.get("ci")), "margin": r.get("margin"),
                   "units": f"{r['units']} ({r['diverged']} diverged)" if "diverged" in r else "",
                   **({"sign test p": r.get("sign_test_p")} if sign else {}),
                   "verdict": r["verdict"] + (f" ({r['reason']})" if r.get("reason") and sens else ""),
                   **({"sensitivity": "; ".join(f"{s['measure']} ({s['protocol']}): {s['verdict']}"
                                                for s in r.get("sensitivity", []))} if sens else {})}
                  for r in rows],
                 {"effect": effect, "margin": "{:.3g}", **({"sign test p": "{:.2g}"} if sign else {})},
                 text=notation)


def hypotheses_table(checks, *, first: str = "instance"):
    """Checked hypotheses (:class:`convres.checks.Hypothesis` records or their dicts) as a table
    (a ``Styler``, :func:`convres.show.table`): name, statement in the book's notation, value,
    threshold and whether it holds. When ``checks`` is a mapping, its keys fill a first column
    named ``first``."""
    items = checks.items() if isinstance(checks, Mapping) else [(None, c) for c in checks]
    rows = []
    for key, c in items:
        c = c.to_dict() if hasattr(c, "to_dict") else c
        row = {} if key is None else {first: key}
        name = c["name"] if " " in c["name"] else c["name"].replace("_", " ")
        rows.append({**row, "hypothesis": name, "statement": c["statement"], "value": c["value"],
                     "threshold": c["threshold"], "holds": c["holds"]})
    return table(rows, {"value": "{:.4g}", "threshold": "{:.4g}"}, text=notation)


def _fmt(x, spec="{:.3g}") -> str:
    return "" if x is None else spec.format(x)


def settings_table(results: Mapping[str, Result]):
    """Settings per experiment: the paper's (as far as known), the book's, and why."""
    import pandas as pd

    rows = []
    for name, res in results.items():
        row = res.report()["settings"]
        if row is not None:
            rows.append({"experiment": name, "paper": res.experiment.paper, **row})
    return pd.DataFrame(rows)


def spread_table(results: Mapping[str, Result]):
    """Seeds and spread: the key measurement of every configuration, median with min and max."""
    import pandas as pd

    rows = []
    for name, res in results.items():
        for r in res.report()["spread"]:
            fmt = r["format"]
            rows.append({"experiment": name, "configuration": r["configuration"],
                         "measurement": r["measurement"], "median": _fmt(r["median"], fmt),
                         "min to max": "" if r["min"] is None else
                         f"{fmt.format(r['min'])} to {fmt.format(r['max'])}",
                         "seeds": "" if r["seeds"] is None else r["seeds"]})
    return pd.DataFrame(rows)


def compute_table(results: Mapping[str, Result], machine: str):
    """Compute: wall time of each experiment's computation, gradient-descent runs, dtype, device."""
    import pandas as pd

    return pd.DataFrame([{"experiment": name, "wall time (s)": round(res.seconds),
                          "gradient-descent runs": res.report()["runs"],
                          "steps per run": res.settings["steps"],
                          "dtype": res.settings.get("dtype", "float64"),
                          "device": res.data.get("device", "cpu"), "machine": machine}
                         for name, res in results.items()])


def deviations_table(results: Mapping[str, Result]):
    """What the book does differently from (or without knowing) the paper, and why."""
    import pandas as pd

    rows = [
        {"what": "settings", "paper": "sizes, step sizes, steps and seeds not known to us",
         "book": "its own, stated in each chapter", "why": "only the abstract and a summary are available"},
        {"what": "criteria", "paper": "qualitative claims",
         "book": "the mean effect over paired units with its 95% interval, against a margin stated "
                 "per claim (the protocol)", "why": "a verdict needs a test"},
    ]
    for res in results.values():
        rows += res.report()["deviations"]
    return pd.DataFrame(rows)


# --- the protocol's statement (protocol v4) -------------------------------------------------------------

def protocol_line(stamp: Mapping | None = None, *, before: bool = False) -> str:
    """``"protocol: tag protocol-v4, commit X, date Y"`` from ``stamp`` (default: the committed stamp,
    :func:`convres.experiments.base.protocol_stamp`). Without one: the tag is not made yet, or, with
    ``before`` (a piece's own record), the piece was run before it, by the v3 rule."""
    s = stamp if stamp is not None or before else protocol_stamp()
    if s is None:
        return f"before {TAG} (v3 rule)" if before else \
            f"protocol: tag {TAG} not made yet (the rule of this commit)"
    return f"protocol: tag {s['tag']}, commit {s['commit'][:10]}, date {s['date'][:10]}"


def protocol_claims_table():
    """The claims of ``convres.protocol.CLAIMS``: words, measure, unit, margin, rule, the
    pre-named subsets, the alternatives and the design checks each needs (a ``Styler``)."""
    return table([{"id": c.id, "claim (paper)": c.tex or c.text, "measure":
                   f"{c.measure}; positive: {c.sign}", "unit": c.unit,
                   "margin": f"{c.margin:.3g} ({c.scale})",
                   "rule": c.rule + (", every subset" if c.every else ""),
                   "pre-named subsets": ", ".join(c.subsets) or "none",
                   "alternatives": "; ".join(f"{m} ({p})" for m, p in c.alternatives),
                   "design checks": ", ".join(c.checks)} for c in CLAIMS.values()], text=notation)


def protocol_checks_table():
    """The design checks of ``convres.protocol.CHECKS`` (a ``Styler``)."""
    return table([{"check": c.name, "value": c.statement, "passes if": f"value {c.op} {c.threshold:g}"}
                  for c in CHECKS.values()], text=notation)


def protocol_seeds_table():
    """The disjoint seeds and the fewest units graded in the book's run and the larger one
    (a ``Styler``)."""
    run = {"book": "the book's run", "paper": "the larger run"}
    rows = [{"seeds": f"evaluation, {run.get(p, p)}", "values": f"{v[0]} to {v[-1]}",
             "fewest finite units per claim": MIN_UNITS[p]} for p, v in EVALUATION_SEEDS.items()]
    rows += [{"seeds": what, "values": ", ".join(map(str, v)), "fewest finite units per claim": ""}
             for what, v in (("probe (step sizes)", PROBE_SEEDS),
                             ("pilot (levels, design checks)", PILOT_SEEDS))]
    return table(rows)


def protocol_deviations_table():
    """``convres.protocol.DEVIATIONS``: what changed, when, why and the claims it touches."""
    return table([{"what": d.what, "when": d.when, "why": d.why, "touches": ", ".join(d.touches)}
                  for d in DEVIATIONS], text=notation)
