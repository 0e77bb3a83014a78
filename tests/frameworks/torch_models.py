"""Block stacks of the networks convwgrad is for, shared by the GPU tests and tools/step_bench.py."""

import torch
from torch import nn


class InvertedResidual(nn.Module):
    """MobileNetV2: 1x1 expand, depthwise 3x3, 1x1 project, residual."""

    def __init__(self, channels, expand=6):
        super().__init__()
        hidden = channels * expand
        self.body = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x):
        return x + self.body(x)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt: depthwise kxk with bias, LayerNorm, 4x MLP, residual."""

    def __init__(self, channels, kernel=7):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.mlp = nn.Sequential(nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        return x + self.mlp(self.norm(y)).permute(0, 3, 1, 2)


class LargeKernelBlock(nn.Module):
    """RepLKNet: 1x1, depthwise 31x31, 1x1, residual."""

    def __init__(self, channels, kernel=31):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x):
        return x + self.body(x)


class Stack(nn.Module):
    def __init__(self, block, channels, depth, classes=10, **kwargs):
        super().__init__()
        self.blocks = nn.Sequential(*(block(channels, **kwargs) for _ in range(depth)))
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=(2, 3)))


#: name: (block, channels, spatial size, depth, extra block kwargs)
STACKS = {
    "mobilenetv2": (InvertedResidual, 24, 56, 4, {}),
    "convnext": (ConvNeXtBlock, 96, 56, 3, {}),
    "replknet": (LargeKernelBlock, 128, 56, 2, {}),
}


def build(name, seed=0):
    block, channels, size, depth, kwargs = STACKS[name]
    torch.manual_seed(seed)
    return Stack(block, channels, depth, **kwargs), (channels, size)
