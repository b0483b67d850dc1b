"""The CLRNet artifact the CLRNet tests share: `convert clrnet --dataset culane --backbone resnet18 --checkpoint`
of an official-format checkpoint (tests/support/clrnet_checkpoints.py), every default stage (FP16 copy and its
lane check, simplifier)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def clrnet_artifact(tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint, artifact)."""
    from clrnet_checkpoints import write_official_checkpoint
    from needs import torch_or_skip

    torch_or_skip()
    from edge_deploy.convert import convert
    from edge_deploy.export.source import SourceSpec

    work = tmp_path_factory.mktemp("clrnet")
    checkpoint = write_official_checkpoint(work / "culane_r18.pth", "culane")
    result = convert(SourceSpec(model="clrnet", dataset="culane", backbone="resnet18", checkpoint=checkpoint),
                     work / "art", target="onnx")
    return checkpoint, result.artifact_dir
