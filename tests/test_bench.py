"""The benchmark script (benchmarks/gd_speed.py): its comparison models are the same model, its
three ways give the same losses. No test here asserts a wall-clock time."""

import runpy
from pathlib import Path

import numpy as np
import pytest
import torch

from convres.model import forward

bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "gd_speed.py"))


@pytest.mark.parametrize("size", ["theorem", "sst2"])
def test_the_comparison_models_are_the_model_of_convres(size):
    params, X, Y, cfgs, _ = bench["sweep"](size)
    for p, cfg in zip(params, cfgs):
        assert torch.allclose(bench["PlainTransformer"](cfg, p)(X), forward(p, X, cfg), rtol=1e-12, atol=1e-12)
    stacked = bench["StackedTransformer"](cfgs, params)(X)
    for i, (p, cfg) in enumerate(zip(params, cfgs)):
        assert torch.allclose(stacked[i], forward(p, X, cfg), rtol=1e-12, atol=1e-12)


def test_the_three_ways_give_the_same_losses():
    args = (*bench["sweep"]("theorem"), 20)
    losses = {w: f(*args) for w, f in bench["WAYS"].items()}
    for w in ("plain", "stacked"):
        np.testing.assert_allclose(losses[w], losses["convres"], rtol=1e-11)


def test_a_tiny_run_reports_every_row():
    result = bench["run"]("tiny")
    assert [r["size"] for r in result["rows"]] == ["theorem", "jena"]
    for r in result["rows"]:
        assert r["max_loss_diff"] < 1e-10 and set(r["seconds"]) == {"plain", "stacked", "convres"}
    assert "vs plain" in bench["format_report"](result)
    with pytest.raises(ValueError, match="profile"):
        bench["run"]("huge")
