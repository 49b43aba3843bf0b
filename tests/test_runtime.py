"""Devices, threads and the cost policy (convres.runtime)."""

import pytest
import torch

from convres import ModelConfig, gradient_descent, init_params
from convres.runtime import CostRefused, check_device, check_memory, max_threads, torch_threads


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_check_device_reads_the_cpu():
    cpu = torch.device("cpu")
    assert check_device("cpu") == check_device(None) == check_device(cpu) == cpu


@pytest.mark.parametrize("n", [0, max_threads() + 1, 100000, 1.5, True])
def test_a_bad_thread_count_is_a_clear_error(n, clear_error):
    def enter():
        with torch_threads(n):
            pass
    clear_error(enter, "threads")


NO_CUDA = [] if torch.cuda.is_available() else ["cuda"]


@pytest.mark.parametrize("device", ["gpu", 0.5, "meta", "cpu:1", *NO_CUDA])
def test_a_bad_device_is_a_clear_error_naming_it(device, clear_error):
    """An unknown or unsupported device, a CPU with a number (not served as the CPU), CUDA without it."""
    clear_error(lambda: check_device(device), device if isinstance(device, str) else "device")


def test_cost_is_refused_before_allocating_with_the_estimate_and_what_to_change():
    with pytest.raises(CostRefused, match=r"this thing.*use less"):
        check_memory(2**43, "this thing", "use less")
    cfg = ModelConfig(d=4, d_qk=4, m=4)
    X = torch.zeros(1, 60_000, 4, dtype=torch.float64)   # attention: n^2 = 3.6e9 entries per block
    with pytest.raises(CostRefused, match=r"n=60000"):
        gradient_descent(init_params(cfg), X, X[..., :1], cfg, 0.01, 1)
