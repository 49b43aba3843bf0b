"""The reproduction report's tables and badges from :class:`convres.experiments.Result` objects (the
ML Reproducibility Checklist); TeX comes with each record (``tex``, ``criterion``)."""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from . import protocol
from .committed import pieces
from .experiments import EXPERIMENTS, Result
from .experiments.base import protocol_stamp
from .show import fixed, number, power_of_ten, table, tex

#: The thumbnails' width in the claims table, in CSS pixels (their PNGs have twice as many).
THUMBNAIL = 160
#: Badge colours (white text on each, contrast at least 4.5:1), one per verdict.
VERDICT_COLORS = {"reproduced": "#1b6e32", "partly": "#8a5300", "not reproduced": "#a4241b",
                  "reversed": "#6e1f5c", "inconclusive": "#55595f", "not testable": "#33405a"}


def _claim(row: dict) -> str:
    """A row's ``tex`` as HTML, a ``($formula$)`` kept on one line with its parentheses."""
    return re.sub(r"\((<span class=\"math[^\"]*\">.*?</span>)\)",
                  r'<span style="white-space:nowrap">(\1)</span>', tex(row["tex"]))


def claim_row(rows: Sequence[dict], claim_id: str) -> dict:
    """The row of claim ``claim_id`` (``convres.protocol.CLAIMS``), exactly one."""
    found = [r for r in rows if r.get("id") == claim_id]
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows of claim {claim_id!r}; the rows' ids are "
                         f"{[r.get('id') for r in rows]}.")
    return found[0]


def badge(verdict: str) -> str:
    """An HTML badge for ``verdict`` (one of ``convres.protocol.GRADES``)."""
    if verdict not in VERDICT_COLORS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {protocol.GRADES}.")
    return (f'<span style="background:{VERDICT_COLORS[verdict]};color:#fff;border-radius:0.8em;'
            f'padding:0.1em 0.6em;white-space:nowrap;font-size:0.9em">{html.escape(verdict)}</span>')


def verdict_counts_html(rows: list[dict]) -> str:
    """One line of badges with the number of rows of each verdict that occurs (in ``GRADES``' order)."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in protocol.GRADES}
    return "<p>" + " ".join(f"{badge(v)}&nbsp;{n}" for v, n in counts.items() if n) + "</p>"


def _html_table(head: Sequence[str], rows: Sequence[str]) -> str:
    """A table of the site's style that scrolls sideways on a narrow screen."""
    cells = "".join(f"<th>{h}</th>" for h in head)
    return ('<div style="overflow-x:auto"><table class="table"><thead><tr>' + cells + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def claims_html(rows: list[dict], thumbnails: Mapping[str, bytes] | None = None) -> str:
    """The claims table by experiment: id and words, badge and :func:`evidence_text`, and the
    figure's thumbnail (once per figure) linking to it in its chapter."""
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
    """Every row's criterion and full :func:`evidence_text`, folded."""
    items = "".join(f"<li><b>{html.escape(r.get('id', ''))} {_claim(r)}</b> "
                    f"({html.escape(r['experiment'])}): {badge(r['verdict'])}<br>"
                    f"criterion: {tex(r['criterion'])}<br>"
                    f"measurement: {tex(evidence_text(r, full=True))}</li>" for r in rows)
    return ("<details><summary>How each verdict is decided (criteria and measurements)</summary>"
            f"<ul>{items}</ul></details>")


def effect_digits(row: dict) -> int:
    """The decimals of a row's numbers: two significant digits of its interval's width, at least two."""
    lo, hi = row["ci"]
    width = hi - lo
    return 2 if width <= 0 else max(2, 1 - math.floor(math.log10(width)))


def _signed(x: float, digits: int) -> str:
    return ("+" if round(x, digits) > 0 else "") + fixed(x, digits)


def interval_text(row: dict, digits: int | None = None) -> str:
    """A row's 95% interval for the prose, ``0.37 to 0.57`` (minus signs U+2212)."""
    d = effect_digits(row) if digits is None else digits
    return f"{fixed(row['ci'][0], d)} to {fixed(row['ci'][1], d)}"


#: How the report names each interval method of :func:`convres.stats.estimate`.
METHODS = {"t-interval": "Student's t", "BCa bootstrap, stratified": "stratified BCa bootstrap"}


def effect_text(row: dict) -> str:
    """A row's effect and interval, ``+0.48 (0.37 to 0.57)``; empty without an effect."""
    if row.get("effect") is None:
        return ""
    d = effect_digits(row)
    return f"{_signed(row['effect'], d)} ({interval_text(row, d)})"


def evidence_text(row: dict, *, full: bool = False) -> str:
    """A claim row's evidence, ``effect +0.48 (95% interval 0.37 to 0.57; margin 0.4; BCa
    bootstrap, 30 units)``, and the alternatives that grade otherwise; ``full`` adds the sign test,
    the subsets' grades and every alternative."""
    if row.get("effect") is None:
        text = f"no interval: {row.get('reason') or 'too few units'}"
    else:
        d = effect_digits(row)
        text = (f"effect {_signed(row['effect'], d)} (95% interval {interval_text(row, d)}; "
                f"margin {number(row['margin'])}; "
                f"{METHODS.get(row['interval'], row['interval'])}, {row['units']} units)")
        if row.get("diverged"):
            text += f", {row['diverged']} diverged"
    alternatives = [f"{x['tex']} ({x['protocol'].removesuffix(' step')} step"
                    + "".join(f", $L = {L}$" for L in x.get("depths", ()))
                    + (f"; {x['note']}" if x.get("note") else "") + f") {x['verdict']}"
                    for x in row.get("sensitivity") or () if full or x["verdict"] != row["verdict"]]
    if not full:   # the reason of a graded effect, and the alternatives that grade otherwise
        if row.get("effect") is not None and row.get("verdict") == "not testable" and row.get("reason"):
            text += f"; {row['reason']}"
    elif row.get("sign_test_p") is not None:
        text += f"; sign test $p = {power_of_ten(format(row['sign_test_p'], '.2g'))}$"
    if full and row.get("subsets"):
        text += "; by subset: " + ", ".join(f"{k} {v}" for k, v in row["subsets"].items())
    return text + ("; alternatives: " + ", ".join(alternatives) if alternatives else "")


def scale_html(book: Mapping[str, Result], larger: Mapping[str, tuple[Result, dict] | None],
               not_run: Mapping[str, str] | None = None) -> str:
    """Every claim's verdict and effect in the ``book`` result and the committed larger one
    (``larger[name]``: result and info, or None); ``not_run[name]``: why there is no larger run."""
    head = ("experiment", "claim (paper)", "book: verdict", "book: effect (95% interval)",
            "larger: verdict", "larger: effect (95% interval)")
    body = []
    for name, res in book.items():
        big = larger.get(name)
        big_rows = big[0].claims() if big is not None else []
        for i, r in enumerate(res.claims()):
            b = big_rows[i] if i < len(big_rows) else None
            why = (not_run or {}).get(name)
            right = (f"<td>{badge(b['verdict'])}</td><td>{html.escape(effect_text(b))}</td>" if b else
                     f"<td>{badge('not testable')}</td><td>{html.escape(why)}</td>" if why else
                     '<td colspan="2">not computed yet</td>')
            body.append(f"<tr><td>{html.escape(name)}</td><td>{_claim(r)}</td>"
                        f"<td>{badge(r['verdict'])}</td><td>{html.escape(effect_text(r))}</td>{right}</tr>")
    return _html_table(head, body)


def provenance_table(larger: Mapping[str, tuple[Result, dict] | None]):
    """One row per committed piece (seeds, time, commit, machine, protocol), or "none committed"."""
    rows = []
    for name, big in larger.items():
        if big is None:
            rows.append({"experiment": name, "piece": "none committed"})
            continue
        res, info = big
        blocks = pieces(name, res.profile)
        for p in info["provenance"]:
            seeds = blocks[p["piece"]]
            rows.append({"experiment": name, "piece": f"{p['piece'] + 1} of {info['pieces']['total']}",
                         "seeds": f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}",
                         "wall time": f"{p['wall_seconds'] / 60:.1f} min",
                         "commit": (p["commit"] or "unknown")[:10],
                         "machine": f"{p['machine']}, {p['device']}", "PyTorch": p["torch"],
                         "protocol": protocol_line(p.get("protocol"), before=True)})
    return table(rows)


def claims_table(rows: list[dict]):
    """One experiment's claims: effect, interval, margin, units, sign test, verdict, alternatives."""
    sign = any("sign_test_p" in r for r in rows)
    sens = any("sensitivity" in r for r in rows)
    return table([{"claim": r["tex"], "effect": r.get("effect"),
                   "95% interval": "" if r.get("ci") is None else "{:.2f} to {:.2f}".format(*r["ci"]),
                   "margin": r.get("margin"),
                   "units": f"{r['units']} ({r['diverged']} diverged)" if "diverged" in r else "",
                   **({"sign test p": r.get("sign_test_p")} if sign else {}),
                   "verdict": r["verdict"] + (f" ({r['reason']})" if r.get("reason") and sens else ""),
                   **({"sensitivity": "; ".join(f"{s['tex']} ({s['protocol']}): {s['verdict']}"
                                                for s in r.get("sensitivity", []))} if sens else {})}
                  for r in rows],
                 {"effect": "{:.2f}", "margin": "{:.3g}", **({"sign test p": "{:.2g}"} if sign else {})})


def hypotheses_table(checks, *, first: str = "instance"):
    """Checked hypotheses (:class:`convres.checks.Hypothesis` or dicts); a mapping's keys fill ``first``."""
    items = checks.items() if isinstance(checks, Mapping) else [(None, c) for c in checks]
    rows = []
    for key, c in items:
        c = c.to_dict() if hasattr(c, "to_dict") else c
        row = {} if key is None else {first: key}
        name = c["name"] if " " in c["name"] else c["name"].replace("_", " ")
        rows.append({**row, "hypothesis": name, "statement": c["tex"], "value": c["value"],
                     "threshold": c["threshold"], "holds": c["holds"]})
    return table(rows, {"value": "{:.4g}", "threshold": "{:.4g}"})


def settings_table(results: Mapping[str, Result]):
    """Settings per experiment: the paper's (as far as known), the book's, and why."""
    rows = {name: res.report()["settings"] for name, res in results.items()}
    return pd.DataFrame([{"experiment": name, "paper": results[name].experiment.paper, **row}
                         for name, row in rows.items() if row is not None])


def spread_table(results: Mapping[str, Result]):
    """Seeds and spread: each configuration's key measurement, median, min and max."""
    rows = []
    for name, res in results.items():
        for r in res.report()["spread"]:
            fmt = r["format"]
            rows.append({"experiment": name, "configuration": r["configuration"],
                         "measurement": r["measurement"],
                         "median": "" if r["median"] is None else fmt.format(r["median"]),
                         "min to max": "" if r["min"] is None else
                         f"{fmt.format(r['min'])} to {fmt.format(r['max'])}",
                         "seeds": "" if r["seeds"] is None else r["seeds"]})
    return pd.DataFrame(rows)


def compute_table(results: Mapping[str, Result], machine: str):
    """Compute: wall time of each experiment, gradient-descent runs, dtype, device."""
    return pd.DataFrame([{"experiment": name, "wall time (s)": round(res.seconds),
                          "gradient-descent runs": res.report()["runs"],
                          "steps per run": res.settings["steps"],
                          "dtype": res.settings.get("dtype", "float64"),
                          "device": res.data.get("device", "cpu"), "machine": machine}
                         for name, res in results.items()])


def deviations_table(results: Mapping[str, Result]):
    """What the book does differently from (or without knowing) the paper, and why."""
    rows = [
        {"what": "settings", "paper": "sizes, step sizes, steps and seeds not known to us",
         "book": "its own, stated in each chapter", "why": "only the abstract and a summary are available"},
        {"what": "criteria", "paper": "qualitative claims",
         "book": "the mean effect over paired units with its 95% interval, against a margin stated "
                 "per claim (the protocol)", "why": "a verdict needs a test"},
    ]
    return pd.DataFrame(rows + [d for res in results.values() for d in res.report()["deviations"]])


# --- the protocol's statement (protocol v4) -------------------------------------------------------------

def protocol_line(stamp: Mapping | None = None, *, before: bool = False) -> str:
    """``"protocol: tag protocol-v4, commit X, date Y"`` from ``stamp`` (default: the committed one);
    without one, the tag is not made yet, or with ``before`` the piece predates it (v3)."""
    s = stamp if stamp is not None or before else protocol_stamp()
    if s is None:
        return f"before {protocol.TAG} (v3 rule)" if before else \
            f"protocol: tag {protocol.TAG} not made yet (the rule of this commit)"
    return f"protocol: tag {s['tag']}, commit {s['commit'][:10]}, date {s['date'][:10]}"


def late_deviations() -> dict[int, tuple[str, ...]]:
    """The deviations made after the v4 runs were seen, numbered from 1, each with its claims."""
    return {i: d.touches for i, d in enumerate(protocol.DEVIATIONS, 1) if d.after_runs}


def protocol_claims_table():
    """``convres.protocol.CLAIMS`` as amended (not the tagged text), with the late deviations."""
    late = late_deviations()
    return table([{"id": c.id, "claim (paper)": c.tex, "measure":
                   f"{c.measure}; positive: {c.sign}", "unit": c.unit,
                   "margin": f"{c.margin:.3g} ({c.scale})",
                   "rule": c.rule + (", every subset" if c.every else ""),
                   "pre-named subsets": ", ".join(c.subsets) or "none",
                   "alternatives": "; ".join(f"{m} ({p})" for m, p in c.alternatives),
                   "design checks": ", ".join(c.checks),
                   "deviations after the runs": ", ".join(str(i) for i, on in late.items() if c.id in on)
                   or "none"} for c in protocol.CLAIMS.values()])


def protocol_checks_table():
    """The design checks of ``convres.protocol.CHECKS``."""
    return table([{"check": c.name, "value": c.tex, "passes if": f"value {c.op} {c.threshold:g}"}
                  for c in protocol.CHECKS.values()])


def protocol_seeds_table():
    """The disjoint seeds and the fewest units graded per run."""
    run = {"book": "the book's run", "paper": "the larger run"}
    rows = [{"seeds": f"evaluation, {run.get(p, p)}", "values": f"{v[0]} to {v[-1]}",
             "fewest finite units per claim": protocol.MIN_UNITS[p]}
            for p, v in protocol.EVALUATION_SEEDS.items()]
    rows += [{"seeds": what, "values": ", ".join(map(str, v)), "fewest finite units per claim": ""}
             for what, v in (("probe (step sizes)", protocol.PROBE_SEEDS),
                             ("pilot (levels, design checks)", protocol.PILOT_SEEDS))]
    return table(rows)


def protocol_deviations_table():
    """``convres.protocol.DEVIATIONS``: what changed, when, why, the claims touched."""
    return table([{"#": i, "what": d.what, "when": d.when, "why": d.why, "touches": ", ".join(d.touches)}
                  for i, d in enumerate(protocol.DEVIATIONS, 1)])
