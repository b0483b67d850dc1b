"""ResNet-18/34 feature extractors shared by the lane families (torchvision has no CPU build here, so
the project has its own).

The layout matches `torchvision.models.resnet*` without avgpool/fc, so official checkpoints load by
key: Sequential children 0 conv1, 1 bn1, 2 relu, 3 maxpool, 4..7 layer1..4 (LaneATT), or the same
children by those names (`named=True`, UFLDv2); blocks named conv1, bn1, conv2, bn2 and
downsample.0 (1x1 conv) / downsample.1 (BN).
"""
from __future__ import annotations

from collections import OrderedDict

from torch import Tensor, nn

BLOCKS_PER_STAGE = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
OUT_CHANNELS = 512


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (a 1x1 conv + BN when the shape changes)."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def _stage(in_channels: int, channels: int, n_blocks: int, stride: int) -> nn.Sequential:
    blocks = [BasicBlock(in_channels, channels, stride)]
    blocks += [BasicBlock(channels, channels) for _ in range(n_blocks - 1)]
    return nn.Sequential(*blocks)


def resnet_features(name: str, *, named: bool = False) -> nn.Sequential:
    """ResNet-18/34 without avgpool/fc: [B, 3, H, W] -> [B, 512, ceil(H/32), ceil(W/32)]; children
    numbered 0..7, or named conv1, bn1, relu, maxpool, layer1..layer4 with `named`."""
    if name not in BLOCKS_PER_STAGE:
        raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(BLOCKS_PER_STAGE)}")
    counts = BLOCKS_PER_STAGE[name]
    children = OrderedDict([
        ("conv1", nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)),
        ("bn1", nn.BatchNorm2d(64)),
        ("relu", nn.ReLU(inplace=True)),
        ("maxpool", nn.MaxPool2d(3, stride=2, padding=1)),
        ("layer1", _stage(64, 64, counts[0], 1)),
        ("layer2", _stage(64, 128, counts[1], 2)),
        ("layer3", _stage(128, 256, counts[2], 2)),
        ("layer4", _stage(256, OUT_CHANNELS, counts[3], 2)),
    ])
    net = nn.Sequential(children) if named else nn.Sequential(*children.values())
    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return net
