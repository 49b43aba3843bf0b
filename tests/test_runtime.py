"""Devices and threads (convres.runtime)."""

import pytest
import torch

from convres.runtime import check_device, max_threads, torch_threads


def test_torch_threads_restores_the_setting_and_is_bounded():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    for bad in (0, max_threads() + 1, 100000, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an integer in 1"), torch_threads(bad):
            pass


def test_check_device():
    assert check_device("cpu") == torch.device("cpu") and check_device(None) == torch.device("cpu")
    assert check_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu'.*'cuda'"):
        check_device("gpu")
    with pytest.raises(TypeError, match="device must be a str"):
        check_device(0.5)
    with pytest.raises(ValueError, match="not supported by convres"):
        check_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda'.*(no CUDA support|no CUDA device)"):
            check_device("cuda")


def test_a_cpu_with_a_number_is_refused_not_served_as_the_cpu():
    with pytest.raises(ValueError, match="cpu:1"):
        check_device("cpu:1")


def test_cost_is_refused_before_allocating_with_the_estimate_and_what_to_change():
    from convres import ModelConfig, gradient_descent, init_params
    from convres.runtime import CostRefused, check_memory

    with pytest.raises(CostRefused, match=r"GiB.*use less"):
        check_memory(2**43, "this thing", "use less")
    cfg = ModelConfig(d=4, d_qk=4, m=4)
    X = torch.zeros(1, 60_000, 4, dtype=torch.float64)   # attention: n^2 = 3.6e9 entries per block
    with pytest.raises(CostRefused, match=r"n=60000.*GiB"):
        gradient_descent(init_params(cfg), X, torch.zeros(1, 60_000, 1, dtype=torch.float64), cfg, 0.01, 1)
