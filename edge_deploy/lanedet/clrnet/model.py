"""CLRNet in PyTorch, with the official module names (docs/design.md, "CLRNet").

The layout of the official `Detector` (clrnet/models/nets/detector.py) without what only training uses:
`backbone.model` (ResNet-18/34/101 with torchvision's names, or DLA-34), `neck` (FPN over the last three
feature maps: `lateral_convs.i.conv` 1x1 and `fpn_convs.i.conv` 3x3, 64 channels, no norm or activation,
nearest top-down upsampling) and `heads` (CLRHead: 192 priors, 72 points, 3 refinement stages over the FPN
levels coarsest first, 36 sample points, ROIGather). The forward is the eval-mode head's: the last stage's
predictions [B, 192, 78] (two class logits, start_y, start_x, theta, length, 72 x / (800 - 1)), written
without in-place updates so that it exports to ONNX (GridSample: opset 16+).

Checkpoints: the official `save_model` writes {'net', 'optim', 'scheduler', 'recorder', 'epoch'}, every
`net` key prefixed `module.`; `heads.seg_decoder.*` and `heads.criterion.weight` (training only) are
dropped and listed in `model.dropped_keys`; the rest loads strictly, the `priors` / `priors_on_featmap`
buffers included: the eval forward starts from them, never from regenerated priors.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import CheckpointError
from ..checkpoint import checkpoint_path, fit_problems, refuse_other_family, state_dict_from, torch_load
from ..resnet import resnet_features, stage_channels
from .dla import CHANNELS as DLA_CHANNELS
from .dla import DLA34
from .presets import BACKBONES, PRESETS, CLRNetPreset

NUM_PRIORS, NUM_POINTS, REFINE_LAYERS, SAMPLE_POINTS = 192, 72, 3, 36
FEATURE_CHANNELS = 64  # FPN out_channels, prior_feat_channels and fc_hidden_dim of every official config
ROI_MID_CHANNELS = 48
ROI_GRID = (10, 25)  # FeatureResize: the key/value maps of ROIGather's attention
DDP_PREFIX = "module."
TRAINING_ONLY = ("heads.seg_decoder.", "heads.criterion.")


class ResNetBackbone(nn.Module):
    """`model`: torchvision's ResNet names; returns layer2..layer4's outputs (FPN drops layer1)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.model = resnet_features(name, named=True)

    def forward(self, x: Tensor) -> list[Tensor]:
        m: Any = self.model  # a Sequential of named children
        x = m.layer1(m.maxpool(m.relu(m.bn1(m.conv1(x)))))
        features = []
        for layer in (m.layer2, m.layer3, m.layer4):
            x = layer(x)
            features.append(x)
        return features


class DLABackbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = DLA34()

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.model(x)[1:]  # levels 3..5 (FPN drops level 2)


def neck_in_channels(backbone: str) -> tuple[int, int, int]:
    return DLA_CHANNELS[3:] if backbone == "dla34" else stage_channels(backbone)[1:]


class ConvUnit(nn.Module):
    """mmcv's ConvModule as the official configs use it: `conv`, then `bn` and ReLU when normalised."""

    def __init__(self, in_channels: int, channels: int, kernel: int | tuple[int, int], padding: int | tuple[int, int],
                 norm: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, kernel, padding=padding, bias=not norm)
        self.bn = nn.BatchNorm2d(channels) if norm else None

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        return x if self.bn is None else F.relu(self.bn(x))


class FPN(nn.Module):
    def __init__(self, in_channels: tuple[int, ...]) -> None:
        super().__init__()
        self.lateral_convs = nn.ModuleList(ConvUnit(c, FEATURE_CHANNELS, 1, 0, norm=False) for c in in_channels)
        self.fpn_convs = nn.ModuleList(ConvUnit(FEATURE_CHANNELS, FEATURE_CHANNELS, 3, 1, norm=False)
                                       for _ in in_channels)
        for module in self.modules():  # mmcv's Xavier (uniform) init of the FPN convs
            if isinstance(module, nn.Conv2d):
                nn.init.xavier_uniform_(module.weight)
                assert module.bias is not None  # bias=True (ConvUnit without norm)
                nn.init.zeros_(module.bias)

    def forward(self, features: list[Tensor]) -> list[Tensor]:
        laterals = [conv(f) for conv, f in zip(self.lateral_convs, features)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=laterals[i - 1].shape[2:],
                                                              mode="nearest")
        return [conv(lateral) for conv, lateral in zip(self.fpn_convs, laterals)]


class ROIGather(nn.Module):
    """Each prior's features along its line, fused with the earlier stages' and attended over the feature map."""

    def __init__(self) -> None:
        super().__init__()
        c, n = FEATURE_CHANNELS, NUM_PRIORS
        self.f_key = ConvUnit(c, c, 1, 0, norm=True)
        self.f_query = nn.Sequential(nn.Conv1d(n, n, 1, groups=n), nn.ReLU())
        self.f_value = nn.Conv2d(c, c, 1)
        self.W = nn.Conv1d(n, n, 1, groups=n)
        nn.init.zeros_(self.W.weight)
        assert self.W.bias is not None
        nn.init.zeros_(self.W.bias)
        self.convs = nn.ModuleList(ConvUnit(c, ROI_MID_CHANNELS, (9, 1), (4, 0), norm=True)
                                   for _ in range(REFINE_LAYERS))
        self.catconv = nn.ModuleList(ConvUnit(ROI_MID_CHANNELS * (i + 1), c, (9, 1), (4, 0), norm=True)
                                     for i in range(REFINE_LAYERS))
        self.fc = nn.Linear(SAMPLE_POINTS * c, c)
        self.fc_norm = nn.LayerNorm(c)

    def forward(self, stage_features: list[Tensor], feature_map: Tensor, stage: int) -> Tensor:
        """stage_features: each stage's [B * priors, C, samples, 1] so far -> [B, priors, C]."""
        batch = feature_map.shape[0]
        fused = self.catconv[stage](torch.cat([conv(f) for conv, f in zip(self.convs, stage_features)], dim=1))
        roi = F.relu(self.fc_norm(self.fc(fused.reshape(batch * NUM_PRIORS, SAMPLE_POINTS * FEATURE_CHANNELS))))
        roi = roi.reshape(batch, NUM_PRIORS, FEATURE_CHANNELS)
        value = F.interpolate(self.f_value(feature_map), size=ROI_GRID).flatten(2).permute(0, 2, 1)
        key = F.interpolate(self.f_key(feature_map), size=ROI_GRID).flatten(2)
        attention = F.softmax(torch.matmul(self.f_query(roi), key) * FEATURE_CHANNELS ** -0.5, dim=-1)
        return roi + self.W(torch.matmul(attention, value))


def linear_relu_pairs() -> list[nn.Module]:
    """Two (Linear, ReLU) pairs flattened, as the official `reg_modules` / `cls_modules` hold them."""
    return [m for _ in range(2) for m in (nn.Linear(FEATURE_CHANNELS, FEATURE_CHANNELS), nn.ReLU())]


class CLRHead(nn.Module):
    sample_x_indexs: Tensor  # buffers (register_buffer), declared for the type checker
    prior_feat_ys: Tensor
    prior_ys: Tensor
    priors: Tensor
    priors_on_featmap: Tensor

    def __init__(self, input_height: int, input_width: int, seg_classes: int) -> None:
        super().__init__()
        self.input_height, self.input_width = input_height, input_width
        strips = NUM_POINTS - 1
        sample_index = (torch.linspace(0, 1, SAMPLE_POINTS) * strips).long()
        self.register_buffer("sample_x_indexs", sample_index)
        self.register_buffer("prior_feat_ys", torch.flip(1 - sample_index.float() / strips, dims=[-1]))
        self.register_buffer("prior_ys", torch.linspace(1, 0, NUM_POINTS))
        self.prior_embeddings = nn.Embedding(NUM_PRIORS, 3)  # training only; kept so that checkpoints load by key
        self.register_buffer("priors", torch.zeros(NUM_PRIORS, 6 + NUM_POINTS))
        self.register_buffer("priors_on_featmap", torch.zeros(NUM_PRIORS, SAMPLE_POINTS))
        self.reg_modules = nn.ModuleList(linear_relu_pairs())
        self.cls_modules = nn.ModuleList(linear_relu_pairs())
        self.roi_gather = ROIGather()
        self.reg_layers = nn.Linear(FEATURE_CHANNELS, NUM_POINTS + 4)  # start_y, start_x, theta, length, x offsets
        self.cls_layers = nn.Linear(FEATURE_CHANNELS, 2)
        for layer in (self.cls_layers, self.reg_layers):
            for p in layer.parameters():
                nn.init.normal_(p, 0.0, 1e-3)
        self.seg_classes = seg_classes
        self._init_priors()

    def _init_priors(self) -> None:
        """The official initial prior embeddings (left, bottom and right edges) and the priors they give: the
        values an untrained model starts from; a checkpoint's buffers replace them."""
        n = NUM_PRIORS
        bottom, side = n * 3 // 4, n // 8
        strip, bottom_strip = 0.5 / (side // 2 - 1), 1 / (bottom // 4 + 1)
        rows = []
        for i in range(n):
            if i < side:
                rows.append(((i // 2) * strip, 0.0, 0.16 if i % 2 == 0 else 0.32))
            elif i < side + bottom:
                rows.append((0.0, ((i - side) // 4 + 1) * bottom_strip, 0.2 * (i % 4 + 1)))
            else:
                rows.append((((i - side - bottom) // 2) * strip, 1.0, 0.68 if i % 2 == 0 else 0.84))
        geometry = torch.tensor(rows, dtype=torch.float32)
        with torch.no_grad():
            self.prior_embeddings.weight.copy_(geometry)
            lines = self.lines(geometry.unsqueeze(0))[0]
            self.priors.zero_()
            self.priors[:, 2:5] = geometry
            self.priors[:, 6:] = lines
            self.priors_on_featmap.copy_(lines[:, self.sample_x_indexs])

    def lines(self, geometry: Tensor) -> Tensor:
        """[B, priors, 3] (start_y, start_x, theta) -> the straight line's x / (width - 1) at the 72 rows."""
        start_y, start_x, theta = geometry[..., 0:1], geometry[..., 1:2], geometry[..., 2:3]
        w, h = self.input_width - 1, self.input_height
        return (start_x * w + (1 - self.prior_ys - start_y) * h / torch.tan(theta * math.pi + 1e-5)) / w

    def pool(self, feature_map: Tensor, featmap_xs: Tensor) -> Tensor:
        """Bilinear samples of `feature_map` at each prior's 36 points -> [B * priors, C, 36, 1]."""
        batch = feature_map.shape[0]
        xs = torch.flip(featmap_xs, dims=[2]).unsqueeze(-1) * 2 - 1
        ys = (self.prior_feat_ys * 2 - 1).reshape(1, 1, -1, 1).expand(batch, NUM_PRIORS, SAMPLE_POINTS, 1)
        sampled = F.grid_sample(feature_map, torch.cat([xs, ys], dim=-1), align_corners=True)
        return sampled.permute(0, 2, 1, 3).reshape(batch * NUM_PRIORS, FEATURE_CHANNELS, SAMPLE_POINTS, 1)

    def forward(self, features: list[Tensor]) -> Tensor:
        maps = list(features[-REFINE_LAYERS:])[::-1]  # coarsest first
        batch = maps[0].shape[0]
        geometry = self.priors[:, 2:5].unsqueeze(0).expand(batch, -1, -1)
        featmap_xs = self.priors_on_featmap.unsqueeze(0).expand(batch, -1, -1)
        stage_features: list[Tensor] = []
        predictions = self.priors.unsqueeze(0)
        for stage in range(REFINE_LAYERS):
            stage_features.append(self.pool(maps[stage], featmap_xs))
            fc = self.roi_gather(stage_features, maps[stage], stage).reshape(batch * NUM_PRIORS, FEATURE_CHANNELS)
            cls, reg = fc, fc
            for layer in self.cls_modules:
                cls = layer(cls)
            for layer in self.reg_modules:
                reg = layer(reg)
            logits = self.cls_layers(cls).reshape(batch, NUM_PRIORS, 2)
            # explicit sizes, so that the exported output is [B, 192, 78], not [B, 192, ?]
            delta, length, offsets = torch.split(self.reg_layers(reg).reshape(batch, NUM_PRIORS, NUM_POINTS + 4),
                                                 [3, 1, NUM_POINTS], dim=-1)
            geometry = geometry + delta
            lines = self.lines(geometry)
            predictions = torch.cat([logits, geometry, length, lines + offsets], dim=-1)
            featmap_xs = lines[..., self.sample_x_indexs]  # the next stage starts from the line without offsets
        return predictions


class CLRNet(nn.Module):
    """[B, 3, 320, 800] (BGR / 255 of the frame below the cut) -> predictions [B, 192, 78]."""

    def __init__(self, preset: CLRNetPreset, backbone: str = "resnet18") -> None:
        super().__init__()
        self.preset, self.backbone_name = preset, backbone
        self.dropped_keys: tuple[str, ...] = ()  # checkpoint keys load_checkpoint left out (training only)
        self.backbone = DLABackbone() if backbone == "dla34" else ResNetBackbone(backbone)
        self.neck = FPN(neck_in_channels(backbone))
        self.heads = CLRHead(preset.input_height, preset.input_width, preset.seg_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.heads(self.neck(self.backbone(x)))


def _guess(state: dict[str, Tensor], model: CLRNet) -> list[str]:
    """The options a checkpoint's keys and shapes say it was trained with, where they differ from `model`'s."""
    hints = []
    if any(k.startswith("backbone.model.base_layer.") for k in state):
        backbone = "dla34"
    elif "backbone.model.layer1.0.conv3.weight" in state:
        backbone = "resnet101"
    elif "backbone.model.layer3.5.conv1.weight" in state:
        backbone = "resnet34"
    elif "backbone.model.layer3.1.conv1.weight" in state:
        backbone = "resnet18"
    else:
        backbone = None
    if backbone and backbone != model.backbone_name:
        hints.append(f"--backbone {backbone}")
    return hints


def _dataset_hint(seg: Tensor | None, model: CLRNet) -> str:
    """'--dataset ...' when the seg decoder's classes say the checkpoint is another data set's ("" otherwise)."""
    if seg is None or seg.shape[0] == model.preset.seg_classes:
        return ""
    fits = [name for name, preset in PRESETS.items() if preset.seg_classes == seg.shape[0]]
    return f"--dataset {' or '.join(fits)}" if fits else ""


def load_checkpoint(model: CLRNet, path: Path | str) -> CLRNet:
    """Load an official CLRNet checkpoint ({'net': state_dict, ...}) strictly, after removing `module.` and the
    training-only keys; a checkpoint of another backbone, data set or family is refused in one line naming the
    options that fit."""
    path = checkpoint_path(path, "CLRNet")
    loaded = torch_load(path, "checkpoint",
                        "torch.save({'net': torch.load(path, weights_only=False)['net']}, 'weights.pth')")
    state = loaded.get("net", loaded.get("model", loaded)) if isinstance(loaded, dict) else None
    # keys checked before `module.` is stripped from them (state_dict_from: names to tensors, as the other families)
    if state is None or state_dict_from(state) is None:
        raise CheckpointError(f"checkpoint {path} holds no state_dict of parameter names to tensors (expected "
                              "{'net': state_dict, ...}, as the official CLRNet save_model writes)")
    state = {k[len(DDP_PREFIX):] if k.startswith(DDP_PREFIX) else k: v for k, v in state.items()}
    where = f"checkpoint {path} does not fit CLRNet-{model.backbone_name} for {model.preset.name}"
    refuse_other_family(path, state, "clrnet")
    dataset = _dataset_hint(state.get("heads.seg_decoder.conv.weight"), model)
    model.dropped_keys = tuple(k for k in state if k.startswith(TRAINING_ONLY))
    state = {k: v for k, v in state.items() if not k.startswith(TRAINING_ONLY)}
    problems = fit_problems(model.state_dict(), state)
    hints = _guess(state, model) + ([dataset] if dataset else [])
    if problems or dataset:
        detail = problems or "its training-only seg decoder has another data set's lane classes"
        advice = f"it is a {' '.join(hints)} checkpoint" if hints else \
            "its keys differ from the official CLRNet's (configs/clrnet/clr_*.py) and tell no other option"
        raise CheckpointError(f"{where}: {detail}; {advice}")
    model.load_state_dict(state, strict=True)
    return model


def build_clrnet(dataset: str, backbone: str, checkpoint: Path | None = None, seed: int = 0) -> CLRNet:
    """The eval-mode model of a data set's preset; official weights from `checkpoint`, else seeded random ones."""
    if backbone not in BACKBONES:
        raise ValueError(f"unknown backbone {backbone!r}; choose one of {', '.join(BACKBONES)}")
    torch.manual_seed(seed)
    model = CLRNet(PRESETS[dataset], backbone)
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    return model.eval()
