"""The MLA slow path's one-time copy warning, for tests/python/test_mla_cpu.py and test_mla_gpu.py."""
import contextlib
import warnings

import pytest

from fa4jit import mla


@pytest.fixture(autouse=True)
def fresh_copy_warning(monkeypatch):
    """Every test starts as if no call had warned yet (the warning is once per process)."""
    monkeypatch.setattr(mla, "_copy_warned", False)


@contextlib.contextmanager
def copy_warning(expected: bool):
    """Expects the slow path's one warning, or makes any warning an error (no copy, no warning)."""
    if expected:
        with pytest.warns(UserWarning, match="separate tensors, so every call copies both whole caches"):
            yield
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
