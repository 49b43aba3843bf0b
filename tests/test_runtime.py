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
