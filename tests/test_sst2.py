"""SST-2 (chapter *SST-2*): the arms and their initializations, the design checks, the baselines, the
held-out table, the claims T1-T4 graded by protocol v4, and a tiny run end to end."""

import math

import numpy as np
import pytest
import torch

from convres import experiments as ex
from convres.experiments import sst2, sst2_arms
from convres.experiments.sst2_arms import ARM_KINDS, Arm, arm_config, arm_params, arms_of
from convres.experiments.sst2_baselines import bow_logistic, heldout_rows, pooled_baseline
from convres.lemmas import parameter_count
from convres.model import ModelConfig, forward_trace, init_params
from convres.protocol import CHECKS

pytestmark = pytest.mark.usefixtures("fresh_cache")


def _rms(t):
    return float(t.double().pow(2).mean().sqrt())


X8 = torch.randn(32, 10, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def test_norm_preserving_init_keeps_every_block_at_the_rms_of_its_input():
    cfg = ModelConfig(d=8, d_qk=8, m=8, L=6, beta=0.0, activation="gelu")
    p = sst2_arms.norm_preserving_init(cfg, X8, seed=3)
    tr = forward_trace(p, X8, cfg)
    assert np.allclose([_rms(t) for t in [*tr.H, *tr.A]], _rms(X8), rtol=1e-10)   # every H_l and A_l
    raw = init_params(cfg, seed=3, branch_scale=1.0)                  # the same draws, scaled per matrix
    for k, w in p.items():
        ratio = w / raw[k]
        assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio))
        assert (k.endswith(("W_V", "W_2")) or float(ratio.flatten()[0]) == 1.0)


def test_isometric_init_starts_each_block_near_an_isometry_from_the_same_draws():
    cfg = ModelConfig(d=8, d_qk=8, m=8, L=4, beta=0.0, activation="gelu")
    c, eps, r = 6.0, 0.05, 0.5
    p = sst2_arms.isometric_init(cfg, X8, seed=3, identity_gain=c, preactivation=eps)
    soft = sst2_arms.isometric_init(cfg, X8, seed=3, identity_gain=c, preactivation=eps, qk_scale=r)
    raw = init_params(cfg, seed=3, branch_scale=1.0)
    tr = forward_trace(p, X8, cfg)
    H, eye = [X8, *tr.H], torch.eye(8, dtype=torch.float64)
    for l in range(1, 5):
        for w in ("W_Q", "W_K"):                                      # the draw plus c I, times r
            assert torch.allclose(p[f"layer{l}.{w}"], raw[f"layer{l}.{w}"] + c * eye)
            assert torch.allclose(soft[f"layer{l}.{w}"], r * (raw[f"layer{l}.{w}"] + c * eye))
        for w in ("W_V", "W_1", "W_2"):                               # a multiple of an orthogonal matrix
            W = p[f"layer{l}.{w}"]
            gram = W.T @ W
            assert torch.allclose(gram, gram[0, 0] * eye, atol=1e-10)
            U, _, Vh = torch.linalg.svd(raw[f"layer{l}.{w}"])
            assert torch.allclose(W / math.sqrt(float(gram[0, 0])), U @ Vh, atol=1e-10)   # of the draw
        assert np.isclose(_rms(tr.Z[l - 1] @ p[f"layer{l}.W_1"]), eps, rtol=1e-10)
        assert np.isclose(_rms(tr.A[l - 1]), math.sqrt(eps) * _rms(H[l - 1]), rtol=1e-10)
        assert np.isclose(_rms(H[l]), _rms(X8), rtol=1e-10)
        assert float(torch.diagonal(tr.S[l - 1], dim1=-2, dim2=-1).median()) > 0.99   # near the identity
    assert _rms(H[-1] - H[-1].mean(-2, keepdim=True)) / _rms(H[-1]) > 0.5          # not collapsed
    sharp, flat = (forward_trace(q, X8, cfg).S[0].amax(-1).mean() for q in (p, soft))
    assert flat < sharp                                                # softer rows
    assert "qk_scale" not in ex.settings("sst2")                       # no profile sets it: keys unchanged
    s = {**ex.settings("sst2"), "qk_scale": r, "d": 8, "d_qk": 8, "m": 8}
    got = arm_params(s, Arm(4, "isometric"), 3, X8)
    assert all(torch.allclose(got[k], soft[k]) for k in soft)
    with pytest.raises(ValueError, match="without residual"):
        sst2_arms.isometric_init(cfg.replace(beta=1.0), X8, identity_gain=c, preactivation=eps)


def test_the_committed_reference_pilots_decision_follows_from_its_numbers():
    """``results/sst2-reference-pilot.json`` (``benchmarks/sst2_reference_pilot.py``, its rule
    committed before it ran): each screen, survivor, "trains" and the decision, from the recorded
    numbers and the rule's thresholds (no recomputation)."""
    import json
    import runpy
    from pathlib import Path

    from convres import committed

    rule = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "sst2_reference_pilot.py"))
    pilot = json.loads((committed.results_dir() / "sst2-reference-pilot.json").read_text())
    assert pilot["thresholds"] == {"alive": 1.0, "within": 0.5, "sigma": 0.1, "saturated": 0.1}
    cands = pilot["candidates"]
    grid = [(c, r) for c in rule["GAINS"] for r in rule["SCALES"]]
    assert [(c["identity_gain"], c["qk_scale"]) for c in cands] == grid
    for c in cands:
        for L, v in c["screens"].items():
            assert v["passed"] == {"alive": abs(math.log10(v["std_ratio"])) <= 1.0,
                                   "within": v["within_sentence"] >= 0.5, "sigma": v["sigma_ratio"] >= 0.1,
                                   "saturation": max(v["saturated"]) < 0.1}
            assert len(v["saturated"]) == int(L)
        assert c["survivor"] == all(all(v["passed"].values()) for v in c["screens"].values())
        for d in (c["depths"] or {}).values():
            assert c["survivor"] and d["trains"] == (bool(d["seeds"]) and all(
                x["final_mse"] is not None and x["final_mse"] < pilot["floor_train_mse"] for x in d["seeds"]))
    assert pilot["finished"] and pilot["decision"] == rule["decide"](pilot) and pilot["provenance"]["commit"]


def test_the_arms_and_the_matched_width():
    s = ex.settings("sst2")
    arms = arms_of(s)
    assert len(arms) == 10 and arms[-1] == Arm(2, "matched") and {a.kind for a in arms} == set(ARM_KINDS)
    deep, matched = (parameter_count(arm_config(s, a)) for a in (Arm(10, "residual"), Arm(2, "matched")))
    assert sst2_arms.matched_width(s) == 176 and matched == deep == 12_816   # d = 16: exact
    assert parameter_count(arm_config(s, Arm(2, "residual"))) == 2_576
    near = {**s, "d": 12, "d_qk": 8, "m": 10}                          # no exact width: the nearest
    gap = abs(parameter_count(arm_config(near, Arm(2, "matched"))) /
              parameter_count(arm_config(near, Arm(10, "residual"))) - 1)
    assert gap < 0.05
    assert arm_config(s, Arm(6, "isometric")).residual == (0.0, 0.0)
    assert arm_config(s, Arm(2, "matched")).residual == (1.0, 1.0)
    res = arm_params(s, Arm(6, "residual"), 3, X8)
    raw = init_params(arm_config(s, Arm(6, "residual")), 3)
    assert all(torch.equal(res[k], raw[k]) for k in raw)
    with pytest.raises(ValueError, match="'arms'"):
        arms_of({**s, "arms": ["residual", "nope"]})


def test_the_baselines_read_a_linear_signal_and_the_sentiment_words():
    X = torch.zeros(4, 2, 3)
    X[:2, :, 0], X[2:, :, 0] = 1.0, -1.0
    labels = np.array([1, 1, 0, 0])
    out = pooled_baseline(X, labels, X.flip(0), labels[::-1].copy())
    assert out["train_accuracy"] == out["val_accuracy"] == 1.0 and out["train_mse"] < 1e-20
    assert out["val_correct"] == "1111"
    rng = np.random.default_rng(0)

    def sents(k):
        labels = np.arange(k) % 2
        words = ["the", "film", "a", "unknown"]
        toks = [list(rng.choice(words, 4)) + ["good" if y else "bad"] for y in labels]
        return toks, labels

    out = bow_logistic(*sents(40), *sents(10), ["good", "bad", "the", "film", "a"], lambdas=[0.01, 1e6],
                       folds=4, iters=50)                               # the penalty by cross-validation
    assert out["val_accuracy"] == 1.0 and out["lambda"] == 0.01 and out["cv_accuracy"][1e6] <= 0.6
    assert out["val_correct"] == "1" * 10


def _result(mse, checks_pass=True, level=0.9, diverged=(), start=None):
    """Fake runs: arm (L, kind) of seed k ends at ``mse[(L, kind)] * (1 + 0.01 k)``, its mean log-loss
    ``log10`` of that over its start (1, or ``start[kind]``); steps to the level 10 (residual) or 50."""
    runs = []
    for protocol in ("tuned", "common"):
        for (L, kind), m in mse.items():
            for k in (0, 1, 2):
                v, v0 = m * (1 + 0.01 * k), (start or {}).get(kind, 1.0)
                div = (L, kind, k) in diverged and protocol == "tuned"
                runs.append({"L": L, "arm": kind, "seed": k, "protocol": protocol, "mse": [v0, v],
                             "status": "diverged" if div else "max_steps", "final_mse": None if div else v,
                             "mean_log_loss": None if div else math.log10(v / v0),
                             "steps_to_level": 10 if kind in ("residual", "matched") else 50})
    checks = [{"name": n, "value": 1.0, "threshold": CHECKS[n].threshold,
               "passed": checks_pass or n != "sst2 arms alive"} for n in CHECKS if n.startswith("sst2")]
    s = {"steps": 100, "depths": [2, 6, 10], "seeds": [0, 1, 2]}
    data = {"runs": runs, "design_checks": checks, "level": level}
    return ex.Result(ex.EXPERIMENTS["sst2"], "smoke", s, data, 0.0)


DEPTHS = (2, 6, 10)
GOOD = {(L, k): v for L in DEPTHS
        for k, v in (("residual", 1 / L), ("isometric", 0.8), ("norm-preserving", 0.9))}
GOOD[(2, "matched")] = 0.6


def test_the_claims_effects_and_grades():
    recs = {r.id: r for r in sst2.claim_records(_result(GOOD))}
    expected = np.mean([math.log(0.8 * L) for L in DEPTHS])
    assert np.isclose(recs["T1"].estimate.effect, expected) and recs["T1"].estimate.units == 9
    assert np.isclose(recs["T2"].estimate.effect, math.log(0.6 / 0.1))        # matched L = 2 against L = 10
    assert np.isclose(recs["T3"].estimate.effect, 0.0)                        # isometric: depth does nothing
    assert np.isclose(recs["T4"].estimate.effect, np.mean([math.log10(0.8 * L) for L in DEPTHS]))
    assert [s["measure"] for s in recs["T4"].sensitivity] == ["steps to the level", "mean log-loss"]
    assert {r.verdict for r in recs.values()} == {"reproduced"}   # T3: lo > -ln 1.1
    worse = {**GOOD, (2, "residual"): 1.6}                                    # residual higher at L = 2
    t1 = {r.id: r for r in sst2.claim_records(_result(worse))}["T1"]
    assert t1.verdict == "partly" and t1.subset == ("L=6", "L=10") and t1.subsets["L=2"] == "reversed"
    failed = sst2.claim_records(_result(GOOD, checks_pass=False))
    assert {r.verdict for r in failed} == {"not testable"}
    higher = {r.id: r for r in sst2.claim_records(_result(GOOD, start={"residual": 3.0, "matched": 3.0}))}
    assert np.isclose(higher["T4"].estimate.effect, recs["T4"].estimate.effect)   # the start cancels
    stuck = {r.id: r for r in sst2.claim_records(_result(GOOD, level=0.75))}     # isometric arms: 0.8+
    assert {k: r.verdict for k, r in stuck.items()} == {"T1": "not testable", "T2": "reproduced",
                                                       "T3": "not testable", "T4": "not testable"}
    assert "precondition" in stuck["T1"].reason and "L=10, isometric" in stuck["T1"].reason
    assert {x["verdict"] for x in stuck["T3"].sensitivity} == {"not testable"}
    one = {r.id: r for r in sst2.claim_records(_result({**GOOD, (2, "norm-preserving"): 0.5}, level=0.75))}
    np1 = one["T1"].sensitivity[0]                # per measure and depth: its reference trains at L = 2
    assert one["T1"].verdict == "not testable" and np1["depths"] == [2] and np1["verdict"] != "not testable"
    assert one["T3"].sensitivity[0]["verdict"] == "not testable"       # T3: both depths must train
    both = {**GOOD, (2, "norm-preserving"): 0.5, (10, "norm-preserving"): 0.6}
    assert sst2.claim_records(_result(both, level=0.75))[2].sensitivity[0]["verdict"] == "reproduced"
    part = {r.id: r for r in sst2.claim_records(_result({**GOOD, (2, "isometric"): 0.9}, level=0.85))}
    assert part["T1"].subsets["L=2"] == "not testable" and part["T1"].verdict == "partly"  # every depth
    assert "not testable at L=2" in part["T1"].reason and "against residual" in part["T1"].reason
    pre = sst2.references_train(_result(GOOD, level=0.75))
    assert not pre["T3"].passed and pre["T2"].passed and np.isclose(pre["T2"].value, 0.606 / 0.75)
    assert np.isclose(sst2.references_train(_result(GOOD))["T3"].value, 0.808 / 0.9)   # the median seed
    matched = {r.id: r for r in sst2.claim_records(_result({**GOOD, (2, "matched"): 0.95}))}
    assert matched["T2"].verdict == "not testable" and matched["T1"].verdict == "reproduced"
    gone = {r.id: r for r in sst2.claim_records(_result(GOOD, diverged={(10, "isometric", 0)}))}
    assert gone["T1"].estimate.diverged == 1 and gone["T3"].estimate.diverged == 1
    assert gone["T2"].estimate.diverged == 0 and gone["T1"].estimate.units == 8


def test_the_heldout_table_pairs_the_arms_with_the_baselines_on_the_same_sentences():
    data = {"runs": [{"L": 2, "arm": "residual", "seed": k, "protocol": "tuned", "status": "max_steps",
                      "val_correct": "1" * 30 + "0" * 10} for k in range(3)],
            "baselines": {"floor": {"val_correct": "1" * 20 + "0" * 20},
                          "floor_2d": {"val_correct": "1" * 20 + "0" * 20},
                          "bow": {"val_correct": "1" * 30 + "0" * 10}, "adam": None}}
    rows = {r["name"]: r for r in heldout_rows(data, ARM_KINDS)}
    arm = rows["L=2, residual"]
    assert arm["accuracy"]["median"] == 0.75 and np.isclose(arm["vs_floor"]["effect"], 0.25)
    assert arm["vs_floor"]["ci"][0] > 0 and arm["beats_floor"]
    assert arm["vs_bow"] == {"effect": 0.0, "ci": [0.0, 0.0]}
    assert not rows["floor with twice the dimension"]["beats_floor"]


def test_a_tiny_run_of_every_arm_with_a_diverged_arm_rerun_and_halvings_across_pieces(
        tmp_path, tiny_sst2, monkeypatch):
    original, calls = sst2._tune, []

    def tune(s, X, Yt, arm, dtype, device):             # the residual L = 2 arm "tuned" far too large
        calls.append(arm)
        t = original(s, X, Yt, arm, dtype, device)
        return {**t, "chosen": 1e4} if arm == Arm(2, "residual") else t

    monkeypatch.setattr(sst2, "_tune", tune)
    base = {**tiny_sst2, "max_reruns": 2}
    r = ex.run_experiment("sst2", "smoke", overrides={**base, "seeds": [0, 1]}, data_dir=tmp_path)
    one, arms, bad = r.data, arms_of(r.settings), Arm(2, "residual")
    assert len(arms) == 7 and one["N"] == 16 and one["N_val"] == 12 and one["matched_m"] >= 4
    tuned = [x for x in one["runs"] if x["protocol"] == "tuned"]
    assert {(x["L"], x["arm"]) for x in tuned} == {tuple(a) for a in arms} and len(tuned) == 2 * 7
    common = [x for x in one["runs"] if x["protocol"] == "common"]
    assert {x["eta"] for x in common} == {one["common_eta"]} == {min(e["eta"] for e in one["eta"])}
    assert {x["arm"] for x in common} == set(sst2.COMMON_KINDS)
    for t in one["step_sizes"]:
        assert t["arm"] == bad.name or t["chosen"] <= t["largest_stable"] / 2 * (1 + 1e-9)
    for x in tuned:
        assert x["eta"] == next(e["eta"] for e in one["eta"] if (e["L"], e["kind"]) == (x["L"], x["arm"]))
        assert len(x["val_correct"]) == 12 and 0 <= x["train_error"] <= 1
    assert [c["arm"] for c in one["float64_check"]] == ["residual", "isometric", "norm-preserving"]
    k = r.summary()
    assert {(x["L"], x["arm"]) for x in k["init_output_std"]} == {tuple(a) for a in arms}
    assert {c["name"] for c in k["design_checks"]} == {n for n in CHECKS if n.startswith("sst2")}
    names = {h["name"] for h in k["heldout"]}
    assert {a.name for a in arms if a != bad} <= names and "bag of words, logistic regression" in names
    # the diverged arm: rerun at half its step, twice
    halved = [(x["from"], x["to"]) for x in one["reruns"] if x["arm"] == bad.name]
    assert halved == [(1e4, 5e3), (5e3, 2.5e3)]
    runs = [x for x in tuned if Arm(x["L"], x["arm"]) == bad]
    assert len(runs) == 2 and {x["eta"] for x in runs} == {2.5e3}
    t1 = next(c for c in r.claims() if c["id"] == "T1")
    assert t1["diverged"] == sum(x["status"] == "diverged" for x in runs)
    calls.clear()
    two = ex.run_experiment("sst2", "smoke", overrides={**base, "seeds": [1],
                                                       "halvings": {"L=1, residual": [[0], [0, 1]]}},
                            data_dir=tmp_path).data
    assert calls == []                                                  # a halving pass re-tunes nothing
    assert one["design_checks"] == two["design_checks"]                 # measured on the pilot seeds
    assert {r["seed"] for r in one["init_pilot"]} == {200, 201} and {r["seed"] for r in two["init"]} == {1}
    eta = {e["arm"]: e["eta"] for e in one["eta"]}["L=1, residual"]
    assert {e["arm"]: e["eta"] for e in two["eta"]}["L=1, residual"] == eta / 4
    first = {"arm": "L=1, residual", "L": 1, "kind": "residual"}
    assert [x for x in two["reruns"] if x["L"] == 1] == [
        {**first, "from": eta, "to": eta / 2, "diverged": 1, "diverged_seeds": [0], "pass": 1},
        {**first, "from": eta / 2, "to": eta / 4, "diverged": 2, "diverged_seeds": [0, 1], "pass": 2}]
    with pytest.raises(ValueError, match="'halvings'"):
        ex.run_experiment("sst2", "smoke", overrides={**base, "halvings": {"L=7, residual": [[0]]}},
                          data_dir=tmp_path)


def test_unique_prefixes_keep_one_row_per_prefix_of_one_label_outside_the_validation_split():
    from convres.data import DataError
    from convres.data.sst2 import unique_prefixes

    tokens = [["a"], ["b"], ["a"], ["c"], ["b"], ["d"], ["e"], ["f"], ["g"]]
    labels = [0, 1, 0, 1, 0, 0, 1, 1, 0]                # "a" twice with one label, "b" with both
    got, y, counts = unique_prefixes(tokens, labels, 4, exclude=[["d"], ["z"]])
    assert got == [["a"], ["c"], ["e"], ["g"]] and y.tolist() == [0, 1, 1, 0]   # file order, 2 per label
    assert counts == {"rows": 9, "prefixes": 7, "conflicting": 1, "conflicting_rows": 2, "in_validation": 1}
    with pytest.raises(DataError, match="label 0"):
        unique_prefixes(tokens, labels, 6, exclude=[["d"]])


def test_a_shared_part_prepared_alone_is_committed_and_read_back_by_a_piece(offline, tmp_path, monkeypatch):
    import json

    from convres import cache, committed

    calls = []
    original = sst2._tune
    monkeypatch.setattr(sst2, "_tune", lambda *a, **k: calls.append(a[3]) or original(*a, **k))
    monkeypatch.setattr(committed, "git_commit", lambda: "made-here")
    t = committed.prepare_part("tune L=2, isometric", folder=tmp_path, profile="smoke")
    assert calls == [Arm(2, "isometric")] and t["arm"] == "L=2, isometric" and t["chosen"] is not None
    [entry] = [json.loads(f.read_text())["result"] for f in (tmp_path / "shared").glob("tune-sst2-*.json")]
    assert entry["value"] == t and entry["commit"] == "made-here" and isinstance(entry["cpu_seconds"], float)
    monkeypatch.setattr(committed, "git_commit", lambda: "later")
    monkeypatch.setattr(cache, "source_fingerprint", lambda module="": "edited")   # the piece runs other code
    path, _ = committed.run_piece("sst2", 0, folder=tmp_path, profile="smoke")
    assert calls.count(Arm(2, "isometric")) == 1 and len(calls) == len(arms_of(ex.settings("sst2", "smoke")))
    piece = json.loads(path.read_text())
    assert next(x for x in piece["data"]["step_sizes"] if x["arm"] == "L=2, isometric") == t
    shared = piece["provenance"]["shared"]
    assert {x["commit"] for x in shared} == {"made-here", "later"}
    assert all(x["cpu_seconds"] is not None for x in shared)
    with pytest.raises(ValueError, match="unknown shared part"):
        sst2.prepare("smoke", "tune L=7, residual")
    with pytest.raises(ValueError, match="profile must be one of"):
        sst2.prepare("huge", "checks")
