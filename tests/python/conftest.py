"""Shared fixtures for the Python package tests. CPU tests need only the installed package (and torch
for the torch-layer ones); GPU tests skip, with the reason, where torch sees no CUDA device."""
import os
import tempfile

import pytest

# Kernels compiled by the tests go to a scratch cache unless the caller chose one.
if "FA4JIT_CACHE_DIR" not in os.environ and "FA4JIT_CACHE_PATH" not in os.environ:
    os.environ["FA4JIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="fa4jit-pytest-")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")


@pytest.fixture
def torch():
    return torch_or_skip()


@pytest.fixture
def cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch (GPU tests run on the lent GPU machine)")
    return torch.device("cuda", torch.cuda.current_device())
