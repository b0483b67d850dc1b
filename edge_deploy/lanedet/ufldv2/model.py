"""UFLDv2 (Ultra-Fast-Lane-Detection v2) in PyTorch, with the official module names (docs/design.md, "UFLDv2").

The layout of the official `parsingNet` (model/model_culane.py, model_tusimple.py) without its
training-only auxiliary head: `model` (ResNet-18/34, torchvision names), `pool` (1x1 conv 512 -> 8),
`cls` ([LayerNorm if fc_norm] or Identity, Linear(in, 2048), ReLU, Linear(2048, total)). Official
checkpoints ({'model': state_dict}, keys prefixed `module.` when trained with DDP) load strictly.
The forward returns the four outputs as a tuple in the official order.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ...errors import CheckpointError
from ..checkpoint import backbone_hint, checkpoint_path, fit_problems, refuse_other_family, state_dict_from, torch_load
from ..resnet import BLOCKS_PER_STAGE, OUT_CHANNELS, resnet_features
from .presets import PRESETS, UFLDv2Preset

BACKBONES = tuple(BLOCKS_PER_STAGE)
POOL_CHANNELS = 8
MLP_WIDTH = 2048
DDP_PREFIX = "module."
AUX_PREFIX = "seg_head."  # the official parsingNet's training-only auxiliary segmentation head (use_aux=True)


class UFLDv2(nn.Module):
    """[B, 3, H, W] (the preset's input) -> (loc_row, loc_col, exist_row, exist_col)."""

    def __init__(self, preset: UFLDv2Preset, backbone: str = "resnet18") -> None:
        super().__init__()
        self.preset, self.backbone = preset, backbone
        self.dropped_keys: tuple[str, ...] = ()  # checkpoint keys load_checkpoint left out (seg_head.*)
        self.model = resnet_features(backbone, named=True)
        self.pool = nn.Conv2d(OUT_CHANNELS, POOL_CHANNELS, 1)
        features = preset.feature_size
        self.cls = nn.Sequential(
            nn.LayerNorm(features) if preset.fc_norm else nn.Identity(),
            nn.Linear(features, MLP_WIDTH),
            nn.ReLU(),
            nn.Linear(MLP_WIDTH, preset.total_dim),
        )
        for module in self.cls.modules():  # the official initialisation of the head
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        p = self.preset
        out = self.cls(self.pool(self.model(x)).flatten(1))
        shapes = [(p.cells_row, p.rows, p.lanes), (p.cells_col, p.cols, p.lanes), (2, p.rows, p.lanes),
                  (2, p.cols, p.lanes)]
        parts = torch.split(out, [a * b * c for a, b, c in shapes], dim=1)
        return tuple(part.reshape(-1, *shape) for part, shape in zip(parts, shapes))  # type: ignore[return-value]


def _guess(state: dict[str, Tensor], model: UFLDv2) -> str:
    """The --dataset / --backbone a checkpoint's shapes say it was trained with, other than `model`'s own
    (the options already given): "" when they say nothing new."""
    hints = [hint for hint in [backbone_hint(state, "model.layer3")] if hint and hint != f"--backbone {model.backbone}"]
    head = state.get("cls.3.weight")
    fits = [name for name, preset in PRESETS.items()
            if isinstance(head, Tensor) and head.shape[0] == preset.total_dim]
    if fits and fits[0] != model.preset.name:
        hints.append(f"--dataset {fits[0]}")
    return " and ".join(hints)


def load_checkpoint(model: UFLDv2, path: Path | str, *, assign: bool = False) -> UFLDv2:
    """Load an official UFLDv2 checkpoint strictly (after removing DDP's `module.` prefixes).

    The official demo loads with strict=False, which silently accepts a checkpoint of another data set or
    backbone; this refuses it in one line naming the keys and, when the shapes tell, the options that fit.
    The keys of the training-only auxiliary head (`seg_head.*`, use_aux=True) are dropped, and listed in
    `model.dropped_keys`. assign=True: the checkpoint's tensors become the model's (cast to its dtypes), so
    `model` may be built on the meta device.
    """
    path = checkpoint_path(path, "UFLDv2")
    state = state_dict_from(torch_load(
        path, "checkpoint", "torch.save({'model': torch.load(path, weights_only=False)['model']}, 'weights.pth')"))
    if state is None:
        raise CheckpointError(f"checkpoint {path} holds no state_dict (expected {{'model': state_dict}}, as the "
                              "official UFLDv2 checkpoints have)")
    state = {k[len(DDP_PREFIX):] if k.startswith(DDP_PREFIX) else k: v for k, v in state.items()}
    model.dropped_keys = tuple(k for k in state if k.startswith(AUX_PREFIX))
    state = {k: v for k, v in state.items() if not k.startswith(AUX_PREFIX)}
    problems = fit_problems(model.state_dict(), state)
    if problems:
        refuse_other_family(path, state, "ufldv2")
        guess = _guess(state, model)
        advice = (f"it looks trained with {guess}: pass those options" if guess else
                  f"its shapes give no other --dataset/--backbone than {model.preset.name}/{model.backbone}: "
                  "the keys above differ from the official parsingNet's")
        raise CheckpointError(f"checkpoint {path} does not fit UFLDv2-{model.backbone} for {model.preset.name}: "
                              f"{problems}; {advice}")
    if assign:
        expected = model.state_dict()
        state = {k: v.to(expected[k].dtype) if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=assign)
    return model


def build_ufldv2(dataset: str, backbone: str, checkpoint: Path | None = None, seed: int = 0) -> UFLDv2:
    """The eval-mode model of a data set's preset; official weights from `checkpoint`, else seeded random ones."""
    if checkpoint is None:
        torch.manual_seed(seed)
        return UFLDv2(PRESETS[dataset], backbone).eval()
    # Built without storage: every weight comes from the checkpoint, so the random initialisation of up to 206 M
    # parameters (~1.7 s for CULane) is skipped, and a bad checkpoint is refused before any of it.
    with torch.device("meta"):
        model = UFLDv2(PRESETS[dataset], backbone)
    return load_checkpoint(model, checkpoint, assign=True).eval()
