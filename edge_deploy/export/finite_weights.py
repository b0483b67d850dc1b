"""Weights that hold NaN or inf: refused before the export, naming the tensor (not blamed on the export's parity)."""
from __future__ import annotations

from typing import Any

from ..errors import CheckpointError


def check_finite_weights(module: Any, checkpoint: Any) -> None:
    """CheckpointError naming the first tensor of `module` (parameters and buffers) that holds NaN or inf.

    checkpoint: what the manifest's source records (a mapping with its "path", a path, or None)."""
    import torch

    if isinstance(checkpoint, dict):
        checkpoint = checkpoint.get("path")

    for name, tensor in module.state_dict().items():
        if not torch.is_floating_point(tensor):
            continue
        bad = ~torch.isfinite(tensor)
        if bool(bad.any()):
            nan, count = int(torch.isnan(tensor).sum()), int(bad.sum())
            what = "NaN" if nan == count else "inf" if nan == 0 else "NaN and inf"
            where = f"checkpoint {checkpoint} holds" if checkpoint else "the model's weights hold"
            raise CheckpointError(
                f"{where} {what} in {name} ({count} of {tensor.numel()} values): the weights are damaged "
                "(a training run that diverged, or a broken file); use another checkpoint."
            )
