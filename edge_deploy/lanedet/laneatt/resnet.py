"""ResNet-18/34 feature extractors (torchvision has no CPU build here, so the project has its own).

The layout matches `torchvision.models.resnet*` without avgpool/fc, so official LaneATT
checkpoints load by key: Sequential children 0 conv1, 1 bn1, 2 relu, 3 maxpool, 4..7 layer1..4;
blocks named conv1, bn1, conv2, bn2 and downsample.0 (1x1 conv) / downsample.1 (BN).
"""
from __future__ import annotations

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


def resnet_features(name: str) -> nn.Sequential:
    """ResNet-18/34 without avgpool/fc: [B, 3, H, W] -> [B, 512, ceil(H/32), ceil(W/32)]."""
    if name not in BLOCKS_PER_STAGE:
        raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(BLOCKS_PER_STAGE)}")
    counts = BLOCKS_PER_STAGE[name]
    net = nn.Sequential(
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
        _stage(64, 64, counts[0], 1),
        _stage(64, 128, counts[1], 2),
        _stage(128, 256, counts[2], 2),
        _stage(256, OUT_CHANNELS, counts[3], 2),
    )
    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return net
