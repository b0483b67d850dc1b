"""Official-format CLRNet checkpoints for the tests: random weights saved as the official `save_model` writes
them ({'net', 'optim', 'scheduler', 'recorder', 'epoch'}, every `net` key prefixed `module.` by DDP), with the
training-only `heads.seg_decoder.conv` (num_classes x 192 1x1 conv) and `heads.criterion.weight` (NLLLoss
weights) that the exported model leaves out. Like the family's untrained weights they are made checkable
(`make_checkable`: one score above the threshold, lanes with length), so that lane comparisons are not vacuous."""
from __future__ import annotations

from pathlib import Path


def write_official_checkpoint(path: Path, dataset: str = "culane", backbone: str = "resnet18", seed: int = 0,
                              **edits: object) -> Path:
    """The checkpoint; `edits` replace tensors of the state (keys without `module.`) before saving."""
    import torch

    from edge_deploy.lanedet.clrnet import make_checkable
    from edge_deploy.lanedet.clrnet.model import CLRNet
    from edge_deploy.lanedet.clrnet.presets import PRESETS

    torch.manual_seed(seed)
    preset = PRESETS[dataset]
    model = CLRNet(preset, backbone)
    make_checkable(model)
    state = dict(model.state_dict())
    classes = preset.seg_classes
    state["heads.seg_decoder.conv.weight"] = torch.randn(classes, 64 * 3, 1, 1) * 0.01
    state["heads.seg_decoder.conv.bias"] = torch.zeros(classes)
    state["heads.criterion.weight"] = torch.cat([torch.tensor([0.4]), torch.ones(classes - 1)])  # bg_weight 0.4
    state.update({key: value for key, value in edits.items()})  # type: ignore[misc]
    net = {f"module.{key}": value for key, value in state.items()}
    torch.save({"net": net, "optim": {"state": {}, "param_groups": []}, "scheduler": {"last_epoch": 14},
                "recorder": {"step": 1, "epoch": 14}, "epoch": 14}, path)
    return path
