"""The Jena experiment: data, the age feature, baselines, design checks, claims J1-J2, held-out."""

import numpy as np
import pytest
import torch

from convres import experiments as ex
from convres.data import JENA_FEATURES, DataError
from convres.data.jena import AGE
from convres.experiments import jena
from convres.model import forward

pytestmark = pytest.mark.usefixtures("fresh_cache")


def test_jena_data_splits_standardizes_on_training_rows_and_looks_only_at_the_past(offline):
    s = {**ex.settings("jena", "book"), "age": False}
    task = ex.jena_data(s)
    assert task.rows == 4000 and task.train_rows == 3 * 7 * 144 and task.val_rows == 4000 - task.train_rows
    w, h, stride = s["window"], s["horizon"], s["stride"]
    assert task.X.shape == (len(range(0, task.train_rows - w - h + 1, stride)), w, 11)
    assert task.Y.shape == (task.X.shape[0], 1)                     # one target per window
    assert task.X_val.shape == (task.val_rows - w - h + 1, w, 11) and task.Y_val.shape[-1] == 1
    t = list(JENA_FEATURES).index(s["target"])
    # the target of a window is the temperature h rows after its last row (never one of its inputs):
    # with stride 1 it is the first row of the window that starts w + h - 1 rows later
    raw = ex.jena_data({**s, "stride": 1})
    assert torch.equal(raw.X[::stride], task.X) and torch.equal(raw.Y[::stride], task.Y)
    for X, Y in ((raw.X, raw.Y), (raw.X_val, raw.Y_val)):
        assert torch.equal(Y[:-(w + h - 1), 0], X[w + h - 1:, 0, t])
    flat = raw.X[::w].reshape(-1, 11)                              # disjoint windows: the training rows
    assert abs(float(flat.mean())) < 0.1 and abs(float(flat.std()) - 1) < 0.1
    persistence = float(((task.X_val[:, -1, t] - task.Y_val[:, 0]) ** 2).mean())
    assert task.persistence["val"] == pytest.approx(persistence)
    tod = ex.jena_data({**s, "time_of_day": True})
    assert torch.equal(tod.X[..., :11], task.X) and tod.features[-2:] == ("sin(hour)", "cos(hour)")
    assert np.allclose(tod.X[..., 11] ** 2 + tod.X[..., 12] ** 2, 1.0)
    # the age: one more column, 0 for the latest row, -(w - 1) for the oldest, nothing else changed
    aged = ex.jena_data({**s, "age": True})
    assert aged.features == (*JENA_FEATURES, AGE) and torch.equal(aged.X[..., :11], task.X)
    assert torch.equal(aged.X[0, :, -1], torch.arange(-(w - 1), 1, dtype=aged.X.dtype))
    assert (aged.X[..., -1] == aged.X[:1, :, -1]).all() and aged.persistence == task.persistence
    with pytest.raises(DataError, match="held-out rows"):           # too few rows after train_end
        ex.jena_data({**s, "train_end": "2009-01-28 17:00"})


def test_without_the_age_the_model_is_order_blind_and_with_it_it_can_represent_persistence(offline):
    """F(PX) = F(X) for a permutation P of a window's rows without the age, with it not; every beta of a
    seed starts from the same weights and loss; persistence_weights computes persistence at every beta."""
    s = ex.settings("jena", "book")
    task = ex.jena_data(s, dtype=torch.float64)
    X = task.X[:50]
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    for b in (0.0, 1.0):
        blind = jena._config(s, 11, b)
        p = jena._init({**s, "readout_scale": 1.0}, 11, 0, torch.float64)
        assert torch.allclose(forward(p, X[..., :11], blind), forward(p, X[:, perm, :11], blind), atol=1e-12)
        aware = jena._config(s, 12, b)
        q = jena._init({**s, "readout_scale": 1.0}, 12, 0, torch.float64)
        moved = torch.cat([X[:, perm, :11], X[..., 11:]], dim=-1)            # rows moved, ages in place
        assert (forward(q, X, aware) - forward(q, moved, aware)).abs().max() > 1e-3
    p = jena._init(s, task.X.shape[-1], 3, torch.float64)
    assert torch.count_nonzero(p["W_U"]) == 0                            # readout_scale = 0
    assert all(torch.count_nonzero(v) > 0 for k, v in p.items() if k != "W_U")
    start = [float((forward(p, task.X, jena._config(s, 12, b)) - task.Y).pow(2).mean()) for b in s["betas"]]
    assert max(start) == min(start) == pytest.approx(float(task.Y.pow(2).mean()))
    t, a = task.features.index(s["target"]), task.features.index(AGE)
    for b in s["betas"]:
        cfg = jena._config(s, task.X.shape[-1], b)
        F = forward(jena.persistence_weights(cfg, s["window"], t, a), task.X, cfg)
        assert (F[:, 0] - task.X[:, -1, t]).abs().max() < 1e-9
        assert float((F - task.Y).pow(2).mean()) == pytest.approx(task.persistence["train"], rel=1e-9)
    with pytest.raises(ValueError, match="m >= 4"):
        jena.persistence_weights(jena._config({**s, "m": 2}, 12, 1.0), 6, t, a)


def test_the_baselines_choose_their_ridge_on_the_training_split_and_only_the_ar_sees_the_order():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3, 2))
    c = rng.normal(size=6)
    Y = X.reshape(200, -1) @ c + 0.5 + 0.01 * rng.normal(size=200)
    Xv = rng.normal(size=(50, 3, 2))
    Yv = Xv.reshape(50, -1) @ c + 0.5
    inner = np.arange(200) < 150
    ar = jena.linear_ar(X, Y[:, None], Xv, Yv[:, None], inner, [0.0, 1.0, 1e3])
    assert ar["ridge"] == 0.0 and ar["train"] < 1e-3 and ar["val"] < 1e-3 and ar["parameters"] == 7
    # a held-out set the fit must not see: scrambling it changes the held-out MSE only
    bad = jena.linear_ar(X, Y[:, None], Xv, -Yv[:, None], inner, [0.0, 1.0, 1e3])
    assert bad["ridge"] == ar["ridge"] and bad["train"] == ar["train"] and bad["val"] > 1
    with pytest.raises(ValueError, match="inner split"):
        jena.linear_ar(X, Y[:, None], Xv, Yv[:, None], np.ones(200, bool), [0.0])
    # the informative check's ridge ignores the rows' order (and a constant age); the AR does not
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4, 3))
    Y = X[:, -1, :1] + 0.1 * rng.normal(size=(300, 1))           # persistence-like: the order matters
    inner = np.arange(300) < 200
    shuffled = np.stack([x[rng.permutation(4)] for x in X])
    blind = jena.order_blind(X, Y, X[:50], Y[:50], inner, [0.0, 1.0])
    assert jena.order_blind(shuffled, Y, shuffled[:50], Y[:50], inner, [0.0, 1.0])["train"] == \
        pytest.approx(blind["train"], rel=1e-9)
    aged = np.concatenate([X, np.broadcast_to(np.arange(-3, 1.0)[None, :, None], (300, 4, 1))], axis=2)
    assert jena.order_blind(aged, Y, aged[:50], Y[:50], inner, [0.0, 1.0])["train"] == \
        pytest.approx(blind["train"], rel=1e-6)
    ar = jena.linear_ar(X, Y, X[:50], Y[:50], inner, [0.0, 1.0])
    assert ar["train"] < 0.5 * blind["train"]                        # the order carries the signal here
    assert blind["train_least_squares"] <= blind["train"] + 1e-12    # least squares: the smallest fit


@pytest.mark.parametrize("key, bad", [("window", 0), ("stride", 1.5), ("horizon", 0), ("target", "wind"),
                                      ("train_end", "2009-02-01 00:00"), ("freq", "bogus"),   # after the end
                                      ("start", "not a date"), ("train_end", "nope")])
def test_a_bad_setting_is_named_before_any_work_and_nothing_is_cached(key, bad, tmp_path, clear_error):
    clear_error(lambda: ex.run_experiment("jena", "smoke", overrides={key: bad}, data_dir=tmp_path), key)
    assert not list((tmp_path / "cache").glob("*.json"))


def _pilot(beta, seed, curve, status="max_steps"):
    return {"beta": beta, "seed": seed, "eta": 0.1, "status": status, "train_mse": curve,
            "mean_log_loss": None}


def _checks(s, pilots, level, least_squares):
    no_age = [_pilot(b, sd, [1.0, 0.3]) for sd in (200, 201) for b in (0.0, 1.0)]
    data = {"pilots": {**pilots, "order_blind_model": no_age}, "level": level,
            "order_blind": {"train_least_squares": least_squares}}
    return {c.name: c for c in jena._checks(s, data)}


def test_the_level_and_the_design_checks_come_from_the_pilots():
    """The level (the smallest ladder factor every pilot reaches by T/2) and the four design checks."""
    s = {**ex.settings("jena"), "steps": 10, "betas": [0.0, 1.0], "pilot_seeds": [200, 201]}
    fast = [1.0] + [0.05] * 10
    slow = [1.0, 0.5, 0.3, 0.2, 0.13, 0.12, 0.1, 0.1, 0.1, 0.1, 0.1]     # 0.12 at step 5 = T / 2
    pilots = {"runs": [_pilot(b, sd, fast if b == 0 else slow) for sd in (200, 201) for b in (0.0, 1.0)]}
    level = jena._level(s, pilots, 0.1)
    assert level["found"] and level["factor"] == pytest.approx(1.2) and level["level"] == pytest.approx(0.12)
    checks = _checks(s, pilots, level, 0.15)
    assert checks["jena informative"].value == pytest.approx(1.25) and checks["jena informative"].passed
    assert checks["jena reachable"].value == 0 and checks["jena equal start"].value == 0.0
    assert checks["jena order-aware"].value == 0 and checks["jena order-aware"].passed
    assert not _checks(s, pilots, level, 0.11)["jena informative"].passed
    # the model without the age below the level fails "informative" too
    blind = _checks(s, pilots, {**level, "level": 0.35}, 0.5)["jena informative"]
    assert blind.value == pytest.approx(0.3 / 0.35)
    # a diverged pilot, or one that is too slow for every level of the ladder, fails "reachable"
    pilots["runs"][1] = _pilot(1.0, 200, slow[:4], "diverged")
    level = jena._level(s, pilots, 0.1)
    assert not level["found"] and level["factor"] == s["level_factor_max"]
    checks = _checks(s, pilots, level, 0.2)
    assert checks["jena reachable"].value == checks["jena order-aware"].value == 1
    # a different start between the betas of a seed fails "equal start"
    pilots["runs"][1] = _pilot(1.0, 200, [1.02] + slow[1:])
    assert not _checks(s, pilots, jena._level(s, pilots, 0.1), 0.2)["jena equal start"].passed


def _fake(mll, *, status=None, steps_to_level=None, horizon=100, least_squares=0.18, start=1.0):
    """A Jena result of the given mean log-loss per (beta index, seed); pilots as the keywords say."""
    betas = [0.0, 0.1, 1.0]
    runs = []
    for protocol in ("tuned", "common"):
        for k, per_beta in enumerate(mll):
            for b, v in zip(betas, per_beta):
                bad = status is not None and status(b, k)
                runs.append({"beta": b, "seed": k, "eta": 0.1, "tuned_eta": 0.1, "protocol": protocol,
                             "rerun": 0, "status": "diverged" if bad else "max_steps",
                             "train_mse": [1.0, 0.1],
                             "mean_log_loss": None if bad else v,
                             "steps_to_level": None if bad else (steps_to_level or {}).get(b, 10),
                             "val_mse": None if bad else 0.02})
    s = {**ex.settings("jena"), "steps": horizon, "betas": betas, "seeds": list(range(len(mll))),
         "pilot_seeds": [200]}
    pilots = {"runs": [_pilot(b, 200, [start if b == 1.0 else 1.0, 0.1]) for b in betas],
              "order_blind_model": [_pilot(b, 200, [1.0, 0.2]) for b in (0.0, 1.0)]}
    data = {"runs": runs, "pilots": pilots, "level": {"half": 1, "level": 0.12},
            "order_blind": {"train_least_squares": least_squares},
            "persistence": {"val": 0.0125, "train": 0.025}, "linear_ar": {"val": 0.009, "train": 0.02}}
    return ex.Result(ex.EXPERIMENTS["jena"], "book", s, data, 0.0)


def test_the_claims_are_graded_on_the_mean_log_loss():
    rng = np.random.default_rng(0)
    faster = [[-1.0 + 0.01 * rng.normal(), -1.2, -1.5] for _ in range(10)]       # larger beta, lower
    j1, j2 = jena.claim_records(_fake(faster))
    assert (j1.id, j1.verdict, j2.id) == ("J1", "reproduced", "J2")
    assert j1.estimate.effect == pytest.approx(1.0) and j2.estimate.effect == pytest.approx(0.2, abs=0.01)
    assert j2.verdict == "reproduced" and j1.estimate.method == "t-interval" and j1.estimate.units == 10
    slower = [[-1.5, -1.2 + 0.01 * rng.normal(), -1.0] for _ in range(10)]
    assert [r.verdict for r in jena.claim_records(_fake(slower))] == ["reversed", "reversed"]
    # a small beta faster by 0.02 decade on every seed: the direction holds, the 0.05 margin is excluded
    small = [[-1.0, -1.02 + 0.001 * rng.normal(), -1.5] for _ in range(10)]
    assert jena.claim_records(_fake(small))[1].verdict == "partly"
    # a failed design check: not testable, whatever the numbers
    rec = jena.claim_records(_fake(faster, start=1.5))
    assert [r.verdict for r in rec] == ["not testable"] * 2 and "jena equal start" in rec[0].reason
    # a failed "informative" check makes only the steps to the level not testable (a deviation)
    rec = jena.claim_records(_fake(faster, least_squares=0.108))
    assert [r.verdict for r in rec] == ["reproduced"] * 2
    assert {x["measure"]: x["verdict"] for x in rec[0].sensitivity}["steps to the level"] == "not testable"
    assert jena._estimates(_fake(faster, least_squares=0.108))["J1|steps to the level|tuned"]["verdict"] \
        == "not testable"
    # a diverged run is not a unit: 9 units in the book profile are too few (protocol: 10)
    rec = jena.claim_records(_fake(faster, status=lambda b, k: b == 1.0 and k == 0))
    assert rec[0].estimate.diverged == 1 and rec[0].verdict == "inconclusive" and rec[1].estimate.units == 10
    # the steps to the level are the sensitivity measure: tied steps give tau 0, not a unit lost
    rows = jena.claim_records(_fake(faster, steps_to_level={0.0: 50, 0.1: 50, 1.0: 50}))
    assert {(x["measure"], x["protocol"]) for x in rows[0].sensitivity} == {("steps to the level", "tuned"),
                                                                              ("mean log-loss", "common")}
    est = jena._estimates(_fake(faster, steps_to_level={0.0: 50, 0.1: 50, 1.0: 50}))
    assert est["J1|steps to the level|tuned"]["effect"] == 0.0
    assert est["J2|steps to the level|tuned"]["effect"] == 0.0


def test_j1_over_some_betas_and_the_heldout_comparison():
    """The per-seed J1 effects over every beta by default, or over the betas asked for (the chapter's
    J1 without beta = 1), whatever their order; the held-out MSE against the baselines."""
    mll = [[-1.0, -1.2, -0.5], [-1.5, -1.2, -0.5]]      # beta 1 slowest; beta 0.1 faster on seed 0 only
    res = _fake(mll)
    assert jena._effects(res, "J1", "mean log-loss", "tuned") == pytest.approx([-1 / 3, -1.0])
    assert jena._effects(res, "J1", "mean log-loss", "tuned", betas=[0.1, 0.0]) == pytest.approx([1.0, -1.0])
    rows = jena._heldout_table(_fake([[-1.0, -1.2, -1.5]] * 10))
    assert [r["beta"] for r in rows] == [0.0, 0.1, 1.0]
    # every model at 0.02: worse than persistence (0.0125) and than the AR (0.009) on every seed
    assert all(r["persistence"]["says"] == "worse" and r["linear AR"]["says"] == "worse" for r in rows)
    assert rows[0]["persistence"]["effect"] == pytest.approx(np.log(0.0125 / 0.02))
    assert rows[0]["skill"]["median"] == pytest.approx(1 - 0.02 / 0.0125)


def test_jena_smoke_run_and_its_pieces_of_data(offline):
    r = ex.run_experiment("jena", "smoke")
    d, s = r.data, r.settings
    tuned = {t["beta"]: t for t in d["step_sizes"]}
    assert set(tuned) == set(s["betas"]) and all(t["chosen"] in t["grid"] for t in tuned.values())
    assert d["common_eta"] == min(t["chosen"] for t in tuned.values())
    for protocol in ("tuned", "common"):
        runs = [x for x in d["runs"] if x["protocol"] == protocol]
        assert len(runs) == len(s["betas"]) * len(s["seeds"])
        assert all(x["tuned_eta"] == (tuned[x["beta"]]["chosen"] if protocol == "tuned" else d["common_eta"])
                   for x in runs)
        assert all(x["eta"] == x["tuned_eta"] * 0.5 ** x["rerun"] for x in runs)
    assert all(len(x["train_mse"]) == s["steps"] + 1 and isinstance(x["val_mse"], float) for x in d["runs"]
               if x["status"] != "diverged")
    assert {x["seed"] for x in d["pilots"]["runs"]} == set(s["pilot_seeds"])
    assert set(r.summary()["baselines"]) == {"persistence", "linear_ar", "order_blind"}
    for profile, stride in (("book", 6), ("paper", 1)):          # every window in the paper profile
        p = ex.settings("jena", profile)
        assert p["stride"] == stride and {0.0, 0.1, 1.0} <= set(p["betas"])
