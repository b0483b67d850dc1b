"""Official-format UFLDv2 checkpoints for the tests: random weights in {'model': state_dict} with DDP's
`module.` prefixes (the layout the official training saves); conftest.py converts one into `ufldv2_artifact`."""
from __future__ import annotations

from pathlib import Path


def write_official_checkpoint(path: Path, dataset: str, backbone: str = "resnet18", seed: int = 0) -> Path:
    """A random-weight UFLDv2 checkpoint in the official format with DDP's `module.` prefixes. The exist
    logits lean towards "exists" (bias +0.4 on class 1) so that lanes are drawn and comparisons are not
    vacuous."""
    import torch

    from edge_deploy.lanedet.ufldv2.model import UFLDv2
    from edge_deploy.lanedet.ufldv2.presets import PRESETS

    torch.manual_seed(seed)
    preset = PRESETS[dataset]
    model = UFLDv2(preset, backbone)
    with torch.no_grad():
        bias = model.cls[3].bias
        start = preset.lanes * (preset.cells_row * preset.rows + preset.cells_col * preset.cols)
        exist = bias[start:]
        row_part = exist[: 2 * preset.rows * preset.lanes].view(2, preset.rows, preset.lanes)
        col_part = exist[2 * preset.rows * preset.lanes:].view(2, preset.cols, preset.lanes)
        row_part[1] += 0.4
        col_part[1] += 0.4
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    torch.save({"model": state, "optimizer": {}}, path)
    return path
