"""The reproduction report's tables and badges, computed from the experiments' results.

Book chapter: *Reproduction report* (``book/report.md``). Everything here reads
:class:`convres.experiments.Result` objects and returns a ``pandas.DataFrame`` or an HTML string;
nothing is typed by hand except the paper's side of the comparison, which is what the paper's
abstract and summary say (each experiment's ``paper``). The structure follows the ML
Reproducibility Checklist (claims, settings, seeds and variance, compute, deviations); the rows
come from each experiment's ``report`` hook.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping

from .experiments import EXPERIMENTS, VERDICTS, Result

__all__ = ["VERDICT_COLORS", "badge", "verdict_counts", "verdict_counts_html", "claims_html",
           "criteria_html", "settings_table", "spread_table", "compute_table", "deviations_table",
           "scale_html", "effect_text", "provenance_table"]

#: Badge colours (white text on each, contrast at least 4.5:1), one per verdict.
VERDICT_COLORS = {"reproduced": "#1b6e32", "partly": "#8a5300", "not reproduced": "#a4241b",
                  "inconclusive": "#55595f", "holds a posteriori": "#1f5aa6"}

def badge(verdict: str) -> str:
    """An HTML badge for ``verdict`` (one of :data:`convres.stats.VERDICTS`)."""
    if verdict not in VERDICT_COLORS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {VERDICTS}.")
    return (f'<span style="background:{VERDICT_COLORS[verdict]};color:#fff;border-radius:0.8em;'
            f'padding:0.1em 0.6em;white-space:nowrap;font-size:0.9em">{html.escape(verdict)}</span>')


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """The number of rows of each verdict, in the order of :data:`VERDICTS`."""
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def verdict_counts_html(rows: list[dict]) -> str:
    """One line of badges with the number of rows of each verdict."""
    counts = verdict_counts(rows)
    return "<p>" + " ".join(f"{badge(v)}&nbsp;{n}" for v, n in counts.items()) + "</p>"


def claims_html(rows: list[dict], thumbnails: Mapping[str, bytes] | None = None) -> str:
    """The claims table: experiment, the paper's claim, a verdict badge, one line of evidence and a
    thumbnail (``thumbnails[figure label]``, PNG bytes) linking to the figure in its chapter."""
    thumbnails = thumbnails or {}
    head = "".join(f"<th>{h}</th>" for h in ("experiment", "claim (paper)", "verdict", "evidence (book)",
                                             "figure"))
    body = []
    for r in rows:
        href = f"{EXPERIMENTS[r['experiment']].page}.html#{r['figure']}"
        png = thumbnails.get(r["figure"])
        pic = (f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" width="110" '
               f'alt="thumbnail of figure {r["figure"]}">' if png else "figure")
        body.append(f"<tr><td>{html.escape(r['experiment'])}</td><td>{html.escape(r['claim'])}</td>"
                    f"<td>{badge(r['verdict'])}</td><td>{html.escape(r['evidence'])}</td>"
                    f'<td><a href="{href}">{pic}</a></td></tr>')
    return ('<div style="overflow-x:auto"><table class="table"><thead><tr>' + head + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")


def criteria_html(rows: list[dict]) -> str:
    """The criterion and the full measurement of every row, in a collapsed block."""
    items = "".join(f"<li><b>{html.escape(r['claim'])}</b> ({html.escape(r['experiment'])}): "
                    f"{badge(r['verdict'])}<br>criterion: {html.escape(r['criterion'])}<br>"
                    f"measurement: {html.escape(r['measurement'])}</li>" for r in rows)
    return ("<details><summary>How each verdict is decided (criteria and measurements)</summary>"
            f"<ol>{items}</ol></details>")


def effect_text(row: dict) -> str:
    """A claim row's effect and 95% interval, e.g. ``0.49 [0.34, 0.63]`` (empty for a row
    without one, such as an a-posteriori check)."""
    if row.get("effect") is None:
        return ""
    return f"{row['effect']:.2f} [{row['ci'][0]:.2f}, {row['ci'][1]:.2f}]"


def scale_html(book: Mapping[str, Result], larger: Mapping[str, tuple[Result, dict] | None]) -> str:
    """Every claim at two scales: the ``book`` result beside the committed larger one
    (``larger[name]``: a :class:`Result` and its ``pieces``/``provenance``, or ``None`` where
    nothing is committed): verdict, effect with its 95% interval, and the seeds behind each."""
    head = "".join(f"<th>{h}</th>" for h in ("experiment", "claim (paper)", "book: verdict",
                                             "book: effect [95%]", "larger: verdict",
                                             "larger: effect [95%]"))
    body = []
    for name, res in book.items():
        big = larger.get(name)
        big_rows = big[0].claims() if big is not None else []
        for i, r in enumerate(res.claims()):
            b = big_rows[i] if i < len(big_rows) else None
            right = (f"<td>{badge(b['verdict'])}</td><td>{html.escape(effect_text(b))}</td>" if b else
                     '<td colspan="2">not computed yet</td>')
            body.append(f"<tr><td>{html.escape(name)}</td><td>{html.escape(r['claim'])}</td>"
                        f"<td>{badge(r['verdict'])}</td><td>{html.escape(effect_text(r))}</td>{right}</tr>")
    return ('<div style="overflow-x:auto"><table class="table"><thead><tr>' + head + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")


def provenance_table(larger: Mapping[str, tuple[Result, dict] | None]):
    """One row per committed piece: its seeds, wall time, commit, machine and PyTorch version;
    one row per experiment with nothing committed."""
    import pandas as pd

    rows = []
    for name, big in larger.items():
        if big is None:
            rows.append({"experiment": name, "piece": "none committed", "seeds": "", "wall time (min)": "",
                         "commit": "", "machine": "", "PyTorch": ""})
            continue
        res, info = big
        block = EXPERIMENTS[name].piece_seeds or len(info["pieces"]["planned_seeds"])
        for p in info["provenance"]:
            seeds = info["pieces"]["planned_seeds"][p["piece"] * block:(p["piece"] + 1) * block]
            rows.append({"experiment": name, "piece": f"{p['piece'] + 1} of {info['pieces']['total']}",
                         "seeds": f"{seeds[0]} to {seeds[-1]}",
                         "wall time (min)": f"{p['wall_seconds'] / 60:.1f}",
                         "commit": (p["commit"] or "unknown")[:10],
                         "machine": f"{p['machine']}, {p['device']}", "PyTorch": p["torch"]})
    return pd.DataFrame(rows)


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
         "book": "medians over seeds, thresholds stated per row", "why": "a verdict needs a test"},
    ]
    for res in results.values():
        rows += res.report()["deviations"]
    return pd.DataFrame(rows)
