"""The rank-collapse counterexamples and sweeps (convres.collapse)."""

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import collapse
from convres.collapse import attention_output, dqk_sweep, gaussian_instance, sigma_min_table, spiked_instance
from convres.gd import sweep
from convres.instances import collapse_instance
from convres.model import ModelConfig, forward_trace, init_params
from convres.rank import sigma_nn, weyl_lower_bounds


def common_argmax(S):
    """The token every row of S puts its largest weight on, or None when the rows disagree."""
    picks = torch.argmax(S, dim=-1)
    return int(picks[0]) if bool((picks == picks[0]).all()) else None


def test_attention_output_matches_the_model():
    cfg = ModelConfig(d=6, d_qk=3, m=4, beta=0.7)
    params = init_params(cfg, seed=2)
    X = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    W = {k.split(".")[1]: v for k, v in params.items() if k.startswith("layer1.")}
    S, A, Z = attention_output(X, W["W_Q"], W["W_K"], W["W_V"], 1 / np.sqrt(3), 0.7)
    tr = forward_trace(params, X, cfg)
    assert torch.allclose(S, tr.S[0]) and torch.allclose(Z, tr.Z[0])
    assert torch.allclose(Z - 0.7 * X, A)


def test_collapse_measures_are_those_of_convres_rank_per_matrix_of_a_batch():
    """The measures of tests/test_rank.py (floats for a matrix), and the relative rank-one residual."""
    rank_one = torch.ones(5, 1, dtype=torch.float64) @ torch.randn(1, 7, dtype=torch.float64)
    m = collapse.collapse_measures(rank_one)
    assert isinstance(m["sigma_min"], float) and m["sigma_min"] < 1e-12 and m["rank_one_residual"] < 1e-12
    B = torch.randn(3, 2, 4, 6, dtype=torch.float64)
    mb, one = collapse.collapse_measures(B), collapse.collapse_measures(B[1, 0])
    assert mb["sigma_min"].shape == (3, 2) and set(mb) == set(one)
    assert all(mb[k][1, 0] == pytest.approx(one[k]) for k in one)


def test_gaussian_instance_is_nested_in_d_qk_and_n_and_deterministic():
    """A smaller d_QK keeps the first columns of W_Q, W_K; more tokens add rows to X; the rest is kept."""
    a, b, c = (gaussian_instance(n, 8, d_qk, seed=3) for n, d_qk in ((4, 16), (4, 5), (7, 16)))
    assert torch.equal(a["W_Q"][:, :5], b["W_Q"]) and torch.equal(a["W_K"][:, :5], b["W_K"])
    assert torch.equal(a["X"], b["X"]) and torch.equal(a["W_V"], b["W_V"]) and torch.equal(a["X"], c["X"][:4])
    assert all(torch.equal(a[w], c[w]) for w in ("W_Q", "W_K", "W_V"))
    assert not torch.equal(a["X"], gaussian_instance(4, 8, 16, seed=4)["X"])


def test_uniform_collapse_as_d_qk_grows():
    d_qks = [16, 256, 4096, 65536]
    sw = collapse.dqk_sweep_seeds(d_qks, [1.0], seeds=range(8), n=6, d=12)
    med = np.median(sw["dist_uniform"], axis=0)
    slope = np.polyfit(np.log(d_qks), np.log(med), 1)[0]
    assert -0.6 < slope < -0.4                       # logits ~ d_qk^(-1/2)
    res = np.median(sw["attn_rank_one_residual"], axis=0)
    assert res[-1] < res[0] / 10
    assert np.median(sw["attn_sigma_min"][:, -1]) < 0.05 * np.median(sw["Z_sigma_min"][:, -1, 0])
    assert sw["Z_sigma_min"].min() > 0.3             # the residual keeps sigma_min away from zero
    # the usual 1/sqrt(d_qk) scale does not collapse
    sq = dqk_sweep(d_qks, [1.0], n=6, d=12, scale="1/sqrt(d_qk)")
    assert sq["dist_uniform"].min() > 0.3


def test_saturated_collapse_picks_one_token():
    inst = spiked_instance(6, 10, 8, seed=1, token=2)
    ss = collapse.scale_sweep([1e-3, 1.0, 100.0], [1.0], instance=inst)
    S = attention_output(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], 100.0)[0]
    assert common_argmax(S) == 2
    assert ss["dist_one_hot"][-1] < 1e-10 and ss["dist_uniform"][0] < 0.05
    assert ss["attn_sigma_min"][-1] < 1e-12 and ss["Z_sigma_min"][-1, 0] > 0.1
    for seed in (17, 49, *range(8)):   # every row's largest logit on the token (or an error), at any scale
        inst = spiked_instance(8, 16, 16, seed=seed)
        S = attention_output(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], 1e-3)[0]
        assert common_argmax(S) == 0


def test_spike_adds_exactly_strength_squared():
    inst, plain = spiked_instance(5, 9, 6, seed=3, strength=4.0), gaussian_instance(5, 9, 6, seed=3)
    X = inst["X"]
    L = (X @ inst["W_Q"]) @ (X @ inst["W_K"]).T
    L_rest = (X @ inst["W_Q"][:, 1:]) @ (X @ inst["W_K"][:, 1:]).T
    spike = torch.zeros(5, 5, dtype=torch.float64)
    spike[:, 0] = 16.0
    assert torch.allclose(L - L_rest, spike)
    assert torch.equal(inst["W_Q"][:, 1:], plain["W_Q"][:, 1:])


def test_weyl_bounds_hold_on_random_instances():
    for seed in range(20):
        g = gaussian_instance(5, 9, 4, seed=seed)
        for beta in (0.1, 1.0, 5.0):
            _, A, Z = attention_output(g["X"], g["W_Q"], g["W_K"], g["W_V"], 0.5, beta)
            sv_Z = torch.linalg.svdvals(Z).numpy()
            b = weyl_lower_bounds(g["X"], A, beta).numpy()      # sigma_{n-k}(Z) >= b_k
            assert np.all(sv_Z[::-1] >= b - 1e-12)


def test_uniform_attention_bound_holds():
    # lemma rc-lem-uniform: sigma_2(Attn) <= ||S - U|| ||X|| ||W_V|| <= ||sL||_F/2 ||X|| ||W_V||
    for scale in ("1/d_qk", "1/sqrt(d_qk)", "1"):
        sw = collapse.dqk_sweep_seeds([1, 8, 64, 512], [1.0], seeds=range(6), n=5, d=9, scale=scale)
        assert np.all(sw["attn_sv"][..., 1] <= sw["uniform_bound"] * (1 + 1e-10))
        assert np.all(sw["uniform_bound"] <= sw["logit_bound"] * (1 + 1e-10))


def test_value_counterexample_loses_rank_despite_residual():
    for seed in range(5):
        ce = collapse.value_counterexample(n=5, d=7, beta=0.8, seed=seed)
        sv = torch.linalg.svdvals(ce["Z"])
        assert float(torch.linalg.svdvals(ce["X"])[-1]) > 1e-3
        assert float(sv[-1]) < 1e-12 * float(sv[0])
        assert torch.allclose(ce["Z"], 0.8 * (torch.eye(5, dtype=torch.float64) - ce["S"]) @ ce["X"])
    for beta in (1.0, 0.5):   # S -> I and W_V = -beta I: Z = (I - S) X beta -> 0 for any beta
        ce = collapse.value_counterexample(n=5, d=7, beta=beta, seed=0, scale=30.0, identity_attention=True)
        assert float(torch.linalg.matrix_norm(ce["Z"], 2)) < 1e-12 and sigma_nn(ce["X"]) > 0.3


def test_sigma_min_table():
    rows = sigma_min_table(1.0, d_qks=(4, 4096), seeds=3)
    assert [r["d_qk"] for r in rows] == [4, 4096] and rows[0]["instances"] == 3
    assert all(r["sigma_min_residual"] > 10 * r["sigma_min_attn"] for r in rows[1:])
    assert all(r["sigma_min_attn_q10"] <= r["sigma_min_attn"] <= r["sigma_min_attn_q90"] for r in rows)
    # the median over seeds 0..2 is the median of the three one-seed tables
    one = [sigma_min_table(1.0, d_qks=(4, 4096), seed=s, seeds=1) for s in range(3)]
    assert rows[1]["sigma_min_attn"] == pytest.approx(np.median([t[1]["sigma_min_attn"] for t in one]))


def test_sigma_min_table_default_shows_the_collapse():
    # the command's default: median over 16 instances falls at every step of d_QK (one instance does not)
    rows = sigma_min_table(1.0)
    attn = np.array([r["sigma_min_attn"] for r in rows])
    res = np.array([r["sigma_min_residual"] for r in rows])
    assert np.all(np.diff(attn) < 0) and attn[-1] < attn[0] / 10
    assert np.all(res > 1.0) and res.max() / res.min() < 1.1


G = gaussian_instance(3, 4, 2)
#: Every public function of convres.collapse with a valid call: the arguments its policy checks.
CALLS = {
    collapse.attention_output: dict(X=G["X"], W_Q=G["W_Q"], W_K=G["W_K"], W_V=G["W_V"], s=0.5, beta=1.0),
    collapse.collapse_measures: dict(M=G["X"]),
    collapse.gaussian_instance: dict(n=3, d=4, d_qk=2, seed=0),
    collapse.logit_margins: dict(X=G["X"], W_Q=G["W_Q"], W_K=G["W_K"], token=0),
    collapse.spiked_instance: dict(n=3, d=4, d_qk=2, seed=0, strength=6.0, token=0),
    collapse.dqk_sweep: dict(d_qks=[1, 2], betas=[0.5], n=3, d=4, seed=0, scale="1/d_qk"),
    collapse.dqk_sweep_seeds: dict(d_qks=[1, 2], betas=[0.5], seeds=[0, 1]),
    collapse.scale_sweep: dict(scales=[0.5], betas=[0.5], instance=G),
    collapse.value_counterexample: dict(n=3, d=4, beta=1.0, seed=0, scale=1.0),
    collapse.rank_one_floor: dict(Y=torch.ones(2, 3, 1, dtype=torch.float64)),
    collapse.gd_attention_stats: dict(beta=0.0, mu=0.002, N=2, n=3, d=4, m=4, d_qk=4, seed=0),
    collapse.sigma_min_table: dict(beta=1.0, d_qks=[1, 2], n=3, d=4, seed=0, seeds=2),
}
JUNK = st.sampled_from([None, "x", True, [], {}])


def wrong_like(valid):
    """Values of the wrong kind, or out of range, for an argument of which ``valid`` is a value."""
    if isinstance(valid, torch.Tensor):
        return JUNK | st.sampled_from([valid.flatten(), valid.long()])
    if isinstance(valid, list):
        return JUNK | wrong_like(valid[0]).map(lambda x: [*valid, x])
    if isinstance(valid, str):
        return JUNK | st.sampled_from(["", "1/d", "sqrt(d_qk)"])
    if isinstance(valid, dict):
        return JUNK
    negative = st.floats(max_value=0.0, exclude_max=True) | st.just(math.nan)
    return JUNK | negative | (st.integers(max_value=-1) | st.floats() if isinstance(valid, int) else negative)


@settings(max_examples=300)
@given(data=st.data())
def test_a_bad_argument_of_a_public_function_is_a_clear_error_naming_it(data, clear_error):
    """One policy at every entry point: a wrong kind, an empty list or a value out of range."""
    assert {f.__name__ for f in CALLS} == set(collapse.__all__) - {"TABLE_D_QKS"}
    f, name = data.draw(st.sampled_from([(f, name) for f, kwargs in CALLS.items() for name in kwargs]))
    bad = data.draw(wrong_like(CALLS[f][name]))
    err = clear_error(lambda: f(**{**CALLS[f], name: bad}), name)
    assert re.search(rf"(^|\W){name}(\W|$)", str(err)), err


BAD_RELATIONS = {   # what is wrong -> (the call, a name its error must say)
    "n > d": (lambda: gaussian_instance(8, 4, 2), "n <= d"),
    "a token past n": (lambda: spiked_instance(3, 5, 2, token=3), "token"),
    "a weak spike": (lambda: [spiked_instance(8, 16, 16, seed=s, strength=0.5) for s in range(20)], "logit"),
}


@pytest.mark.parametrize("case", list(BAD_RELATIONS))
def test_arguments_that_do_not_fit_together_are_a_clear_error(case, clear_error):
    clear_error(*BAD_RELATIONS[case])


def test_gd_runs_switch_the_two_residuals_separately():
    residuals = [0.0, (1.0, 0.0), (0.0, 1.0), 1.0]
    params, X, Y, cfg = collapse_instance(N=2, n=3, d=6, m=5, d_qk=4)
    out = sweep([params] * 4, X, Y, [cfg.with_residual(b) for b in residuals], 0.002, 3, record_every=1)
    runs = dict(zip(residuals, (r.history for r in out)))
    z = {k: h.sigma_min_Z[0] for k, h in runs.items()}
    assert z[0.0] == pytest.approx(z[(0.0, 1.0)]) and z[1.0] == pytest.approx(z[(1.0, 0.0)])
    assert runs[1.0].loss[0] != pytest.approx(runs[(1.0, 0.0)].loss[0])


def test_gd_attention_stats_logit_step_scales_like_one_over_d_qk():
    small = [collapse.gd_attention_stats(0.0, d_qk=16, N=2, n=3, d=8, m=8, seed=s) for s in range(6)]
    large = [collapse.gd_attention_stats(0.0, d_qk=1024, N=2, n=3, d=8, m=8, seed=s) for s in range(6)]
    assert small[0]["dist_uniform"].shape == (2,)
    ratio = np.median([r["logit_step"] for r in small]) / np.median([r["logit_step"] for r in large])
    assert 64 / 4 < ratio < 64 * 4                    # 1024 / 16 = 64, up to instance factors
    dist = [np.median([r["dist_uniform"].mean() for r in runs]) for runs in (large, small)]
    assert dist[0] < dist[1]

