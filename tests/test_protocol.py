"""Protocol v4 in code: constants, claim records, design checks and the stamp of the tag."""

import json
import math
import subprocess
from pathlib import Path

import pytest

from convres import protocol as P
from convres import report
from convres.experiments import EXPERIMENTS
from convres.experiments.base import STAMP_FILE, claim_record, design_check, protocol_stamp, protocol_summary
from convres.show import plain, tex

ROOT = Path(__file__).resolve().parent.parent


def test_the_constants_are_those_of_protocol_md():
    margins = {"S1": 0.4, "S2": 0.1, "S3": 1.0, "S4": 0.4, "S5": 0.3, "J1": 0.4, "J2": 0.05,
               "T1": math.log(1.1), "T2": math.log(1.1), "T3": -math.log(1.1), "T4": 0.1}
    assert {k: c.margin for k, c in P.CLAIMS.items()} == margins
    assert [c.id for c in P.CLAIMS.values() if c.rule == "non-inferiority"] == ["T3"]
    assert [c.id for c in P.CLAIMS.values() if c.every] == ["T1"]
    seeds = [set(P.PILOT_SEEDS), set(P.PROBE_SEEDS), set(P.EVALUATION_SEEDS["paper"])]
    assert all(not (a & b) for i, a in enumerate(seeds) for b in seeds[i + 1:])      # disjoint
    assert set(P.EVALUATION_SEEDS["book"]) <= seeds[2] and len(P.PROBE_SEEDS) == 3 and len(P.PILOT_SEEDS) == 2
    assert all(P.MIN_UNITS[p] <= len(v) for p, v in P.EVALUATION_SEEDS.items())
    assert (P.GRID_FACTOR, P.PROBE_HORIZON_MAX, P.STABLE_FRACTION, P.T_INTERVAL_BELOW) == (2.0, 4, 0.5, 20)
    assert (P.LEVEL, P.LOG_LOSS_FLOOR, P.RERUN_FACTOR, P.PROTOCOLS) == (0.95, 1e-12, 0.5, ("tuned", "common"))
    for c in P.CLAIMS.values():
        assert set(c.checks) <= set(P.CHECKS) and c.checks and c.alternatives
        assert all(p in (*P.PROTOCOLS, "half step") for _, p in c.alternatives)
        assert c.experiment in EXPERIMENTS and (c.margin > 0) == (c.rule == "superiority")
        for field in (c.tex, c.measure, c.unit, c.scale, c.sign):      # TeX a reader sees, balanced
            assert tex(field) and "$" not in plain(field) and "\\" not in plain(field), (c.id, field)
    assert all(tex(ch.tex) and "$" not in ch.text for ch in P.CHECKS.values())
    assert all(tex(d.what) and tex(d.why) for d in P.DEVIATIONS)
    assert all(tex(t) and m in {a for c in P.CLAIMS.values() for a, _ in c.alternatives}
               for m, t in P.ALTERNATIVES.items())
    assert all(set(d.touches) <= set(P.CLAIMS) and d.why for d in P.DEVIATIONS)
    sim = EXPERIMENTS["simulations"].profiles["book"]                 # the pre-named subsets
    assert tuple(r["name"] for r in sim["regimes"]) == P.REGIMES
    for profile in ("book", "paper"):
        depths = EXPERIMENTS["sst2"].profiles[profile]["depths"]
        assert tuple(f"L={L}" for L in depths) == P.DEPTHS


def _checks(experiment, failed=()):
    return [design_check(c.name, c.threshold + (1 if c.op in ("<", "<=") else -1) * (c.name in failed)
                         + (0.5 if c.op == ">" else -0.001 if c.op == "<" else 0))
            for c in P.CHECKS.values() if c.experiment == experiment]


def test_design_checks_pass_and_fail_at_their_thresholds(clear_error):
    assert all(ch.passed for e in ("simulations", "jena", "sst2") for ch in _checks(e))
    failed = _checks("jena", failed=["jena informative"])
    assert [ch.name for ch in failed if not ch.passed] == ["jena informative"]
    assert design_check("jena equal start", 0.0099).passed
    assert not design_check("jena equal start", 0.01).passed
    for name, value in (("no such check", 0.0), ("jena equal start", math.nan), ("jena reachable", None)):
        clear_error(lambda: design_check(name, value), name)  # noqa: B023 (called at once)


def test_a_claim_record_is_strict_json_and_refuses_what_the_protocol_did_not_name(clear_error):
    """A failed design check makes every measure not testable."""
    c = P.CLAIMS["S1"]
    strata = [s for s in c.subsets for _ in range(10)]
    effects = [None, None] + [0.6 + 0.01 * i for i in range(28)]
    sens = dict.fromkeys(c.alternatives, effects)
    for failed in ([], [c.checks[-1]]):
        rec = claim_record("S1", effects, profile="book", checks=_checks(c.experiment, failed), strata=strata,
                           sensitivity=sens, draws=200)
        doc = json.loads(json.dumps(rec.to_json(), allow_nan=False))
        assert doc["id"] == rec.id == "S1" and doc["diverged"] == 2 and doc["measure"] == plain(c.measure)
        assert [(x["measure"], x["protocol"]) for x in doc["sensitivity"]] == list(c.alternatives)
        assert rec.row(figure="f") == {"claim": plain(c.tex), "tex": c.tex, **rec.to_json(), "figure": "f"}
        verdicts = {doc["verdict"], *(x["verdict"] for x in doc["sensitivity"])}
        assert verdicts == {"not testable"} if failed else "not testable" not in verdicts
        assert c.checks[-1] in doc["reason"] if failed else doc["verdict"] == "reproduced"
    base = dict(claim_id="S1", effects=effects, profile="book", checks=_checks("simulations"), strata=strata,
                sensitivity=sens)
    for change, name in ((dict(claim_id="S9"), "S9"), (dict(profile="huge"), "profile"),
                         (dict(checks=_checks("simulations")[:1]), "checks"), (dict(strata=None), "strata"),
                         (dict(sensitivity={("steps to 1e-3", "tuned"): effects}), "sensitivity")):
        kw = base | change
        clear_error(lambda: claim_record(kw.pop("claim_id"), kw.pop("effects"), **kw), name)  # noqa: B023


def test_the_stamp_is_read_strictly(tmp_path):
    assert protocol_stamp(tmp_path / "absent.json") is None
    good = {"tag": P.TAG, "commit": "a" * 40, "date": "2025-01-02T03:04:05+00:00"}
    f = tmp_path / "protocol.json"
    f.write_text(json.dumps(good))
    assert protocol_stamp(f) == good
    assert report.protocol_line(good) == f"protocol: tag {P.TAG}, commit {'a' * 10}, date 2025-01-02"
    assert report.protocol_line(None, before=True) == f"before {P.TAG} (v3 rule)"
    for bad in ({**good, "tag": "v3"}, {**good, "commit": "xyz"}, {**good, "date": "soon"}, [1], "{not json"):
        f.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(ValueError, match="protocol.json.*git show"):
            protocol_stamp(f)
    assert protocol_summary([])["protocol"]["tag"] == P.TAG


def test_the_committed_stamp_agrees_with_the_tag():
    """Skipped before the protocol commit is tagged and stamped, or without git or the tag."""
    git = ["git", "-C", str(ROOT), "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
    tag = [*git, "rev-parse", "--verify", "--quiet", f"{P.TAG}^{{commit}}"]
    stamp = protocol_stamp()
    if stamp is None or not (ROOT / ".git").exists() or subprocess.run(tag, capture_output=True).returncode:
        pytest.skip(f"{STAMP_FILE.name} is not committed yet, or git does not know the tag {P.TAG} here")
    commit = subprocess.run(tag, capture_output=True, text=True).stdout.strip()
    date = subprocess.run([*git, "show", "-s", "--format=%cI", commit], capture_output=True, text=True).stdout
    assert stamp["commit"] == commit and stamp["date"][:10] == date[:10]
    assert subprocess.run([*git, "cat-file", "-e", f"{commit}:convres/protocol.py"]).returncode == 0
