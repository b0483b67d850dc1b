"""DLA-34 (Deep Layer Aggregation), CLRNet's fourth backbone, with the official module names so that official
checkpoints load by key (clrnet/models/backbones/dla34.py: levels 1, 1, 1, 2, 2, 1, channels 16 .. 512).

`base_layer` (7x7 conv, BN, ReLU, stride 1), `level0`/`level1` plain conv levels (conv, BN, ReLU per step),
`level2`..`level5` aggregation trees (`tree1`, `tree2`, `root` at the leaves, `project` when the channels
change, a max-pool `downsample` when strided). The forward returns levels 2..5 (strides 4, 8, 16, 32).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..resnet import BasicBlock

LEVELS = (1, 1, 1, 2, 2, 1)
CHANNELS = (16, 32, 64, 128, 256, 512)


class Block(BasicBlock):
    """ResNet's basic block whose residual the tree gives (the block's input when none is): no downsample."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__(in_channels, channels, stride)
        self.downsample = None

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + (x if residual is None else residual))


class Root(nn.Module):
    """A 1x1 conv + BN + ReLU over the concatenated children."""

    def __init__(self, in_channels: int, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, *children: Tensor) -> Tensor:
        return self.relu(self.bn(self.conv(torch.cat(children, 1))))


class Tree(nn.Module):
    def __init__(self, levels: int, in_channels: int, channels: int, stride: int = 1, level_root: bool = False,
                 root_dim: int = 0) -> None:
        super().__init__()
        root_dim = (root_dim or 2 * channels) + (in_channels if level_root else 0)
        self.levels, self.level_root = levels, level_root
        if levels == 1:
            self.tree1: nn.Module = Block(in_channels, channels, stride)
            self.tree2: nn.Module = Block(channels, channels)
            self.root = Root(root_dim, channels)
        else:
            self.tree1 = Tree(levels - 1, in_channels, channels, stride)
            self.tree2 = Tree(levels - 1, channels, channels, root_dim=root_dim + channels)
        self.downsample = nn.MaxPool2d(stride, stride=stride) if stride > 1 else None
        self.project = None
        if in_channels != channels:
            self.project = nn.Sequential(nn.Conv2d(in_channels, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: Tensor, residual: Tensor | None = None, children: list[Tensor] | None = None) -> Tensor:
        children = [] if children is None else children
        bottom = self.downsample(x) if self.downsample is not None else x
        residual = self.project(bottom) if self.project is not None else bottom
        if self.level_root:
            children.append(bottom)
        x1 = self.tree1(x, residual)
        if self.levels == 1:
            return self.root(self.tree2(x1), x1, *children)
        children.append(x1)
        return self.tree2(x1, children=children)


def _conv_level(in_channels: int, channels: int, convs: int, stride: int = 1) -> nn.Sequential:
    modules: list[nn.Module] = []
    for i in range(convs):
        modules += [nn.Conv2d(in_channels, channels, 3, stride=stride if i == 0 else 1, padding=1, bias=False),
                    nn.BatchNorm2d(channels), nn.ReLU(inplace=True)]
        in_channels = channels
    return nn.Sequential(*modules)


class DLA34(nn.Module):
    """[B, 3, H, W] -> [level2, level3, level4, level5] (64, 128, 256, 512 channels)."""

    def __init__(self) -> None:
        super().__init__()
        c = CHANNELS
        self.base_layer = nn.Sequential(nn.Conv2d(3, c[0], 7, padding=3, bias=False), nn.BatchNorm2d(c[0]),
                                        nn.ReLU(inplace=True))
        self.level0 = _conv_level(c[0], c[0], LEVELS[0])
        self.level1 = _conv_level(c[0], c[1], LEVELS[1], stride=2)
        self.level2 = Tree(LEVELS[2], c[1], c[2], 2, level_root=False)
        self.level3 = Tree(LEVELS[3], c[2], c[3], 2, level_root=True)
        self.level4 = Tree(LEVELS[4], c[3], c[4], 2, level_root=True)
        self.level5 = Tree(LEVELS[5], c[4], c[5], 2, level_root=True)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.level1(self.level0(self.base_layer(x)))
        features = []
        for level in (self.level2, self.level3, self.level4, self.level5):
            x = level(x)
            features.append(x)
        return features
