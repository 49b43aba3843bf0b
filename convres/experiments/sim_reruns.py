"""The simulations' reruns (protocol v4, section 1): an arm with a diverged run reruns every seed at
half its step; the setting ``halve`` (:func:`second_pass`) carries a second pass over the pieces."""

from __future__ import annotations

import math

from .base import Result

__all__ = ["reruns", "halvings", "second_pass", "first_pass", "places_run", "cell_name"]


def cell_name(scale: str, d_qk: int) -> str:
    """The name of an escape-law cell, as :func:`reruns` and the setting ``halve`` name it."""
    return f"escape, scale {scale}, d_QK = {d_qk}"


def reruns(res: Result) -> list[dict]:
    """The arms run below their tuned step, with the seeds that diverged at each step (this pass's,
    or the earlier one's that ``halve`` records) and the seeds rerun."""
    rows, past = [], first_pass(res.settings)
    for where, protocols in places_run(res):
        for protocol, runs in protocols.items():
            for b in sorted({r["beta"] for r in runs}):
                mine = [r for r in runs if r["beta"] == b]
                moved = [r for r in mine if r["eta"] != r["tuned_eta"]]
                if moved:
                    etas = sorted({e for r in mine for e in r["diverged_before"]}, reverse=True)
                    now = [[e, sorted(r["seed"] for r in mine if e in r["diverged_before"])] for e in etas]
                    at = past.get((where, protocol, b)) or now
                    rows.append(dict(where=where, arm=[protocol, b], beta=b, eta=mine[0]["tuned_eta"],
                                     diverged_seeds=sorted({k for _, seeds in at for k in seeds}),
                                     diverged_at=at, rerun_seeds=sorted(r["seed"] for r in moved),
                                     rerun_eta=sorted({r["eta"] for r in moved}),
                                     every_seed=len(moved) == len(mine)
                                     and len({r["eta"] for r in mine}) == 1))
    return rows


def places_run(res: Result) -> list[tuple[str, dict]]:
    """``(where, {protocol: records})`` of every regime and escape-law cell of a result."""
    return [(c["name"], c["runs"]) for c in res.data["regimes"]] + \
        [(cell_name(c["scale"], c["d_qk"]), c["runs"]) for c in res.data["escape"]]


def halvings(s: dict) -> dict:
    """The setting ``halve`` ``[[where, protocol, beta, times, history], ...]`` as ``{(where, protocol,
    beta): times}``: the arm starts at ``RERUN_FACTOR ** times`` its tuned step."""
    return {key: times for key, (times, _) in _halve_entries(s).items()}


def first_pass(s: dict) -> dict:
    """``{(where, protocol, beta): [[eta, [seeds]], ...]}``: the earlier pass of the setting ``halve``."""
    return {key: history for key, (_, history) in _halve_entries(s).items()}


def _halve_entries(s: dict) -> dict:
    places = [r["name"] for r in s["regimes"]] + [cell_name(sc, q) for sc in s["scales"] for q in s["d_qks"]]
    out = {}
    for entry in s.get("halve") or []:
        ok = isinstance(entry, (list, tuple)) and len(entry) == 5
        where, protocol, beta, times, history = entry if ok else (None,) * 5
        if not (ok and where in places and protocol in ("tuned", "common", "half")
                and isinstance(beta, (int, float)) and not isinstance(beta, bool)
                and isinstance(times, int) and not isinstance(times, bool) and times >= 1
                and isinstance(history, list) and all(
                    isinstance(h, list) and len(h) == 2 and isinstance(h[1], list) for h in history)):
            raise ValueError(f"setting 'halve': each entry is [where, protocol, beta, times, history], where "
                             f"one of {places}, protocol 'tuned', 'common' or 'half', beta a number, times "
                             "how many times the arm's tuned step is halved (an integer >= 1) and history "
                             "[[eta, [seeds]], ...] the seeds that diverged at each step, as "
                             f"sim_reruns.second_pass(result) writes them; got {entry!r}.")
        out[(where, protocol, float(beta))] = (times, history)
    return out


def second_pass(res: Result) -> list[list]:
    """The setting ``halve`` that runs every seed of each arm of :func:`reruns` at its smallest step."""
    return [[x["where"], *x["arm"], round(math.log2(x["eta"] / min(x["rerun_eta"]))), x["diverged_at"]]
            for x in reruns(res)]
