"""ResNet-18/34 (and ResNet-101, CLRNet's) feature extractors shared by the lane families (torchvision has
no CPU build here, so the project has its own).

The layout matches `torchvision.models.resnet*` without avgpool/fc, so official checkpoints load by
key: Sequential children 0 conv1, 1 bn1, 2 relu, 3 maxpool, 4..7 layer1..4 (LaneATT), or the same
children by those names (`named=True`, UFLDv2); blocks named conv1, bn1, conv2, bn2 and
downsample.0 (1x1 conv) / downsample.1 (BN); ResNet-101's bottleneck blocks add conv3 and bn3
(torchvision's v1.5: the stride on the 3x3 conv).
"""
from __future__ import annotations

from collections import OrderedDict

from torch import Tensor, nn

BLOCKS_PER_STAGE = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
BOTTLENECK_BLOCKS_PER_STAGE = {"resnet101": (3, 4, 23, 3)}
OUT_CHANNELS = 512
STAGE_WIDTHS = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module | None:
    """downsample: a 1x1 conv + BN when a block changes the shape, else None (the identity)."""
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(out_channels))


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (a 1x1 conv + BN when the shape changes)."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = _shortcut(in_channels, channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 (reduce), 3x3 (the stride), 1x1 (expand x4) convs with a residual connection (a 1x1 conv + BN when
    the shape changes)."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = channels * BOTTLENECK_EXPANSION
        self.conv1 = nn.Conv2d(in_channels, channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out_channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _stage(in_channels: int, channels: int, n_blocks: int, stride: int, block: type[nn.Module] = BasicBlock,
           ) -> nn.Sequential:
    out_channels = channels * (BOTTLENECK_EXPANSION if block is Bottleneck else 1)
    blocks = [block(in_channels, channels, stride)]
    blocks += [block(out_channels, channels) for _ in range(n_blocks - 1)]
    return nn.Sequential(*blocks)


def stage_channels(name: str) -> tuple[int, int, int, int]:
    """The channels of layer1..layer4's outputs of backbone `name`."""
    expansion = BOTTLENECK_EXPANSION if name in BOTTLENECK_BLOCKS_PER_STAGE else 1
    return tuple(width * expansion for width in STAGE_WIDTHS)  # type: ignore[return-value]


def resnet_features(name: str, *, named: bool = False) -> nn.Sequential:
    """ResNet-18/34/101 without avgpool/fc: [B, 3, H, W] -> [B, 512 (2048 for ResNet-101), ceil(H/32), ceil(W/32)];
    children numbered 0..7, or named conv1, bn1, relu, maxpool, layer1..layer4 with `named`."""
    known = {**BLOCKS_PER_STAGE, **BOTTLENECK_BLOCKS_PER_STAGE}
    if name not in known:
        raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(known)}")
    counts = known[name]
    block = Bottleneck if name in BOTTLENECK_BLOCKS_PER_STAGE else BasicBlock
    c1, c2, c3, _ = stage_channels(name)
    children = OrderedDict([
        ("conv1", nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)),
        ("bn1", nn.BatchNorm2d(64)),
        ("relu", nn.ReLU(inplace=True)),
        ("maxpool", nn.MaxPool2d(3, stride=2, padding=1)),
        ("layer1", _stage(64, STAGE_WIDTHS[0], counts[0], 1, block)),
        ("layer2", _stage(c1, STAGE_WIDTHS[1], counts[1], 2, block)),
        ("layer3", _stage(c2, STAGE_WIDTHS[2], counts[2], 2, block)),
        ("layer4", _stage(c3, STAGE_WIDTHS[3], counts[3], 2, block)),
    ])
    net = nn.Sequential(children) if named else nn.Sequential(*children.values())
    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return net
