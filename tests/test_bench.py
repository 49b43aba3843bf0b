"""The benchmark script (benchmarks/gd_speed.py): same models, same losses, a checked result."""

import json
import math
import runpy
from pathlib import Path

import numpy as np
import pytest
import torch

from convres.model import forward

bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "gd_speed.py"))


@pytest.mark.parametrize("size", ["theorem", "simulations"])
def test_the_comparison_models_are_the_model_of_convres(size):
    params, X, Y, cfgs, _ = bench["sweep"](size)
    for p, cfg in zip(params, cfgs):
        assert torch.allclose(bench["PlainTransformer"](cfg, p)(X), forward(p, X, cfg), rtol=1e-12, atol=1e-12)
    stacked = bench["StackedTransformer"](cfgs, params)(X)
    for i, (p, cfg) in enumerate(zip(params, cfgs)):
        assert torch.allclose(stacked[i], forward(p, X, cfg), rtol=1e-12, atol=1e-12)


def test_the_four_ways_give_the_same_losses(monkeypatch):
    """The compiled way with the ``eager`` backend: traced by ``torch.compile`` without compiling."""
    monkeypatch.setitem(bench["way_compiled"].__globals__, "COMPILE_BACKEND", "eager")
    args = (*bench["sweep"]("theorem"), 20)
    losses = {w: f(*args) for w, f in bench["WAYS"].items()}
    for w in ("plain", "stacked", "compiled"):
        np.testing.assert_allclose(losses[w], losses["convres"], rtol=1e-11)
    again = bench["WAYS"]["compiled"](*args)       # the same compiled module, its weights loaded again
    np.testing.assert_array_equal(again, losses["compiled"])
    diff = bench["loss_differences"](losses)
    assert set(diff) == {"plain", "stacked", "compiled"} and all(v["curve"] < 1e-12 for v in diff.values())


def test_a_tiny_run_reports_every_row():
    result = bench["run"]("tiny")
    assert [r["size"] for r in result["rows"]] == ["theorem", "jena"]
    for r in result["rows"]:
        assert set(r["seconds"]) == {"plain", "stacked", "convres"} and set(r["speedup"]) == {"plain", "stacked"}
        assert all(v["curve"] < 1e-10 for v in r["loss_diff"].values())
    assert "vs plain" in bench["format_report"](result)
    with pytest.raises(ValueError, match="profile"):
        bench["run"]("huge")


def test_a_first_call_is_timed_in_a_fresh_process():
    assert bench["_fresh"]("convres", "theorem", "float64", 3, 1, None, {}) > 0


def test_the_committed_result_is_the_full_profile_of_this_script():
    result = bench["committed_result"]()
    assert result["settings"] == json.loads(json.dumps(bench["settings"]("full")))
    rows = {(r["size"], r["dtype"]) for r in result["rows"]}
    assert rows == {(s, d) for s, d, *_ in bench["PROFILES"]["full"]["rows"]}
    for r in result["rows"]:
        assert set(r["first_call"]) == {"plain", "stacked", "compiled", "compiled, cache on disk", "convres"}
        if r["dtype"] == "float64":
            assert all(v["curve"] < 1e-10 for v in r["loss_diff"].values())


@pytest.mark.parametrize("edit", [
    lambda r: r["settings"]["rows"][0].__setitem__(2, 1),                    # other settings
    lambda r: r.__setitem__("profile", "quick"),                               # another profile
    lambda r: r["rows"][0]["seconds"].__setitem__("convres", math.nan),       # a time not finite
    None,                                                                      # not JSON
])
def test_a_committed_result_that_does_not_match_is_refused(tmp_path, edit):
    """The error names the file and the command that writes it again."""
    result = json.loads(bench["RESULT"].read_text())
    if edit:
        edit(result)
    path = tmp_path / "gd_speed.json"
    path.write_text(json.dumps(result) if edit else "{")
    with pytest.raises(ValueError, match=rf"{path}.*python benchmarks/gd_speed.py --profile full"):
        bench["committed_result"](path)


def test_threads_that_are_not_a_number_are_one_line_of_usage(capsys):
    with pytest.raises(SystemExit) as done:
        bench["main"](["--threads", "abc"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err and "--threads" in err.splitlines()[-1]
