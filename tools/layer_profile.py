"""Host and kernel profile of one depthwise layer's forward + backward, stock against patched
(GPU machine): where a patched layer's extra host time goes.

Usage: python tools/layer_profile.py [LAYER ...]   (names from tools/host_overhead.py LAYERS)
"""

import copy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import convwgrad
from host_overhead import LAYERS, tensors  # noqa: E402  (tools/ is the script's directory)


def layer_pair(name):
    x, weight, dy, stride, padding, dilation = tensors(*LAYERS[name])
    groups = x.shape[1]
    stock = torch.nn.Conv2d(groups, groups, weight.shape[2:], stride, padding, dilation, groups, bias=False,
                            device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    patched = convwgrad.patch(copy.deepcopy(stock))
    return stock, patched, x.detach().clone().requires_grad_(), dy


def main(names):
    for name in names:
        stock, patched, x, dy = layer_pair(name)
        for label, layer in (("stock", stock), ("patched", patched)):
            for _ in range(5):
                layer(x).backward(dy)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    layer(x).backward(dy)
                torch.cuda.synchronize()
            print(f"== {name} {label}: 20 forward+backward calls")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main(sys.argv[1:] or ["unirep-14-c320-k7-d2", "replk-7-c1024-k13"])
