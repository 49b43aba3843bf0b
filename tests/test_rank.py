"""Singular values and rank-collapse measures on matrices whose answers are known."""

import pytest
import torch

from convres import rank
from convres.rank import rank_one_residual, sigma_k, sigma_nn, singular_values, stacked


def measures(M):
    return rank.singular_value_measures(singular_values(M))


def test_the_measures_of_the_identity_and_of_identical_rows():
    m = measures(torch.eye(5, dtype=torch.float64))
    assert [float(m[k]) for k in ("effective_rank", "stable_rank", "condition")] == pytest.approx([5, 5, 1])
    M = torch.randn(1, 4, dtype=torch.float64).repeat(6, 1)
    assert float(rank_one_residual(M)) < 1e-12
    assert float(measures(M)["effective_rank"]) == pytest.approx(1.0, abs=1e-6)


def test_rank_one_residual_is_the_minimum_over_x():
    M = torch.randn(5, 3, dtype=torch.float64)
    best = float(rank_one_residual(M))
    assert 0 < float(rank_one_residual(M, relative=True)) <= 1
    for _ in range(20):
        x = torch.randn(1, 3, dtype=torch.float64)
        assert float(torch.linalg.matrix_norm(M - x)) >= best - 1e-12


def test_stacked_and_sigma_nn():
    M = torch.randn(2, 3, 8, dtype=torch.float64)
    S = stacked(M)
    assert S.shape == (6, 8) and torch.equal(S[3], M[1, 0])
    assert sigma_nn(M) == pytest.approx(float(torch.linalg.svdvals(S)[5]), rel=1e-14)
    assert sigma_nn(torch.randn(3, 4, 2, dtype=torch.float64)) == 0.0        # N n > d
    ext = rank.extreme_singular_values(torch.randn(5, 2, 3, 8, dtype=torch.float64))   # 5 configurations
    assert ext.shape == (5, 2) and bool((ext[:, 0] <= ext[:, 1]).all())


def test_batches_and_bad_input(clear_error):
    B = torch.randn(7, 4, 3, dtype=torch.float64)
    assert measures(B)["effective_rank"].shape == (7,)
    clear_error(lambda: singular_values(torch.ones(3), "Z"), "matrix")   # (it does not name Z)
    clear_error(lambda: sigma_k(torch.full((300, 500), float("nan"))), "NaN")    # the Gram route too
    assert isinstance(clear_error(lambda: singular_values(torch.full((3, 3), float("inf")), "Z"), "Z"),
                      rank.NonFiniteError)
