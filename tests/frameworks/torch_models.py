"""Block stacks of the networks convwgrad is for, shared by the GPU tests and tools/step_bench.py."""

import torch
from torch import nn

from convwgrad.plugins.wgrad_shifted_mma import launcher as shifted_mma_launcher

#: The family the router gives the replknet stack's 31x31 depthwise layers on CUDA, in either layout
#: (selectors/routing.py): the shifted-MMA family, measured fastest there, where cuda-bindings is
#: installed (it is built by NVRTC), else the Triton shifted family. What the GPU framework tests
#: expect those layers to launch.
LARGE_FILTER_FAMILY = "wgrad_shifted" if shifted_mma_launcher._bindings()[1] else "wgrad_shifted_mma"


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


# ----------------------------------------------------------------- whole large-kernel networks
# timm has neither RepLKNet nor UniRepLKNet; these follow the papers' training-time layout (stage
# widths, depths, kernel sizes, the parallel small-kernel / dilated branches that are only
# re-parameterised away after training) closely enough that their grouped layers are the real ones.


def _bn_conv(cin, cout, kernel, stride=1, groups=1, dilation=1):
    pad = dilation * (kernel - 1) // 2
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, pad, dilation, groups, bias=False), nn.BatchNorm2d(cout))


class _ReparamLargeKernel(nn.Module):
    """RepLKNet's large depthwise kernel with its parallel 5x5 branch (training form)."""

    def __init__(self, channels, kernel, small=5):
        super().__init__()
        self.large = _bn_conv(channels, channels, kernel, groups=channels)
        self.small = _bn_conv(channels, channels, small, groups=channels)

    def forward(self, x):
        return self.large(x) + self.small(x)


class _RepLKBlock(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(channels), _bn_conv(channels, channels, 1), nn.ReLU(),
                                  _ReparamLargeKernel(channels, kernel), nn.ReLU(), _bn_conv(channels, channels, 1))
        self.ffn = nn.Sequential(nn.BatchNorm2d(channels), _bn_conv(channels, 4 * channels, 1), nn.GELU(),
                                 _bn_conv(4 * channels, channels, 1))

    def forward(self, x):
        x = x + self.body(x)
        return x + self.ffn(x)


class RepLKNet(nn.Module):
    """RepLKNet-31B: widths 128-1024, depths 2/2/18/2, kernels 31/29/27/13 (Ding et al., 2022)."""

    def __init__(self, widths=(128, 256, 512, 1024), depths=(2, 2, 18, 2), kernels=(31, 29, 27, 13), classes=1000):
        super().__init__()
        w = widths[0]
        self.stem = nn.Sequential(_bn_conv(3, w, 3, 2), nn.ReLU(), _bn_conv(w, w, 3, 1, groups=w), nn.ReLU(),
                                  _bn_conv(w, w, 1), nn.ReLU(), _bn_conv(w, w, 3, 2, groups=w), nn.ReLU())
        stages = []
        for i, (width, depth, kernel) in enumerate(zip(widths, depths, kernels)):
            blocks = [_RepLKBlock(width, kernel) for _ in range(depth)]
            if i + 1 < len(widths):
                nxt = widths[i + 1]
                blocks += [_bn_conv(width, nxt, 1), nn.ReLU(), _bn_conv(nxt, nxt, 3, 2, groups=nxt), nn.ReLU()]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))


class _DilatedReparam(nn.Module):
    """UniRepLKNet's DilatedReparamBlock (training form): a kxk depthwise kernel plus parallel
    dilated depthwise branches."""

    BRANCHES = {13: ((5, 1), (7, 2), (3, 3), (3, 4), (3, 5)), 3: ()}

    def __init__(self, channels, kernel):
        super().__init__()
        self.origin = _bn_conv(channels, channels, kernel, groups=channels)
        self.branches = nn.ModuleList(_bn_conv(channels, channels, k, groups=channels, dilation=d)
                                      for k, d in self.BRANCHES[kernel])

    def forward(self, x):
        out = self.origin(x)
        for branch in self.branches:
            out = out + branch(x)
        return out


class _UniRepLKBlock(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.dw = _DilatedReparam(channels, kernel)
        self.norm = nn.BatchNorm2d(channels)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, channels // 4, 1), nn.ReLU(),
                                nn.Conv2d(channels // 4, channels, 1), nn.Sigmoid())
        self.ffn = nn.Sequential(nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels))

    def forward(self, x):
        y = self.norm(self.dw(x))
        y = y * self.se(y)
        return x + self.ffn(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class UniRepLKNet(nn.Module):
    """UniRepLKNet-T: widths 80-640, depths 3/3/18/3, kernels 3 (stage 1), 13 (2, 4), 13 and 3
    alternating (3) (Ding et al., 2024)."""

    def __init__(self, widths=(80, 160, 320, 640), depths=(3, 3, 18, 3), classes=1000):
        super().__init__()
        kernels = ((3,) * depths[0], (13,) * depths[1], (13, 3) * (depths[2] // 2), (13,) * depths[3])
        self.downsample = nn.ModuleList([nn.Sequential(_bn_conv(3, widths[0] // 2, 3, 2), nn.GELU(),
                                                       _bn_conv(widths[0] // 2, widths[0], 3, 2))])
        self.downsample.extend(_bn_conv(widths[i], widths[i + 1], 3, 2) for i in range(3))
        self.stages = nn.ModuleList(nn.Sequential(*(_UniRepLKBlock(w, k) for k in ks)) for w, ks in zip(widths, kernels))
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x):
        for down, stage in zip(self.downsample, self.stages):
            x = stage(down(x))
        return self.head(x.mean(dim=(2, 3)))


#: whole networks timm does not have, by the name the step bench takes; input 224x224, 3 channels
NETWORKS = {"replknet31b": RepLKNet, "unireplknet_t": UniRepLKNet}
