"""Devices, threads and the cost policy (convres.runtime)."""

import pytest
import torch

from convres.runtime import CostRefused, check_device, check_memory, max_threads, torch_threads


def test_torch_threads_restores_the_setting_and_refuses_a_bad_count(clear_error):
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    for n in (0, max_threads() + 1, 1.5):
        clear_error(torch_threads(n).__enter__, "threads")


@pytest.mark.parametrize("device", ["gpu", "cpu:1", *([] if torch.cuda.is_available() else ["cuda"])])
def test_the_cpu_is_a_device_and_a_bad_one_is_a_clear_error_naming_it(device, clear_error):
    """An unknown device, a CPU with a number (not served as the CPU), CUDA without it."""
    cpu = torch.device("cpu")
    assert check_device("cpu") == check_device(None) == check_device(cpu) == cpu
    clear_error(lambda: check_device(device), device)


def test_cost_is_refused_with_the_estimate_and_what_to_change():
    """With this machine's memory (the policy at each entry point: tests/test_model.py)."""
    with pytest.raises(CostRefused, match=r"this thing.*use less"):
        check_memory(2**43, "this thing", "use less")
