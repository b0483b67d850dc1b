"""Weights that hold NaN or inf: refused before the export, naming the tensor (not blamed on the export's parity)."""
from __future__ import annotations

from typing import Any

from ..errors import CheckpointError
from ..lanedet.model_source import SourceFile


def check_finite_weights(module: Any, checkpoint: SourceFile | None) -> None:
    """CheckpointError naming the first tensor of `module` (parameters and buffers) that holds NaN or inf.

    checkpoint: the file the weights came from, as the manifest's source records it (None: seeded weights)."""
    import torch

    path = checkpoint.path if checkpoint is not None else None

    for name, tensor in module.state_dict().items():
        if not torch.is_floating_point(tensor):
            continue
        bad = ~torch.isfinite(tensor)
        if bool(bad.any()):
            nan, count = int(torch.isnan(tensor).sum()), int(bad.sum())
            what = "NaN" if nan == count else "inf" if nan == 0 else "NaN and inf"
            where = f"checkpoint {path} holds" if path else "the model's weights hold"
            raise CheckpointError(
                f"{where} {what} in {name} ({count} of {tensor.numel()} values): the weights are damaged "
                "(a training run that diverged, or a broken file); use another checkpoint."
            )
