"""Skips for what a test environment may lack, each with the reason a reader of the skip list needs."""
from __future__ import annotations

from types import ModuleType

import pytest

NO_TORCH = ("needs torch, which is not installed: the Python 3.10 CI run (scripts/test_py310.sh) has none, "
            "because the only local torch is a CPU build for Python 3.11 and PyPI's is the CUDA build; "
            "the Python 3.11 suite (scripts/test.sh) runs this")


def torch_or_skip() -> ModuleType:
    """The torch module, or skip the calling test (module) with NO_TORCH."""
    return pytest.importorskip("torch", reason=NO_TORCH)
