"""Rank-collapse measures on matrices whose answers are known."""

import pytest
import torch

from convres.rank import condition_number, effective_rank, rank_one_residual, stable_rank


def test_identity_has_full_effective_and_stable_rank():
    eye = torch.eye(5, dtype=torch.float64)
    assert float(effective_rank(eye)) == pytest.approx(5.0)
    assert float(stable_rank(eye)) == pytest.approx(5.0)
    assert float(condition_number(eye)) == pytest.approx(1.0)


def test_identical_rows_have_zero_rank_one_residual():
    x = torch.randn(1, 4, dtype=torch.float64)
    M = x.repeat(6, 1)
    assert float(rank_one_residual(M)) < 1e-12
    assert float(effective_rank(M)) == pytest.approx(1.0, abs=1e-6)
    M2 = M + torch.randn(6, 4, dtype=torch.float64)
    assert float(rank_one_residual(M2)) > 0
    assert 0 < float(rank_one_residual(M2, relative=True)) <= 1


def test_rank_one_residual_is_the_minimum_over_x():
    M = torch.randn(5, 3, dtype=torch.float64)
    best = float(rank_one_residual(M))
    for _ in range(20):
        x = torch.randn(1, 3, dtype=torch.float64)
        assert float(torch.linalg.matrix_norm(M - x)) >= best - 1e-12


def test_batches_and_bad_input():
    B = torch.randn(7, 4, 3, dtype=torch.float64)
    assert effective_rank(B).shape == (7,)
    with pytest.raises(ValueError, match="matrix"):
        stable_rank(torch.ones(3))
