"""Where a patched layer's backward spends host time (GPU machine): the same dW call made from the
main thread and from inside an autograd backward (which runs on the engine's device thread).

Usage: python tools/backward_host.py [LAYER]   (a name from tools/host_overhead.py LAYERS)
"""

import sys

import torch

import convwgrad
from host_overhead import LAYERS, per_call, tensors  # noqa: E402  (tools/ is the script's directory)


def main(name):
    x, weight, dy, stride, padding, dilation = tensors(*LAYERS[name])
    groups = x.shape[1]
    seed = torch.zeros((), device="cuda", requires_grad=True)

    def dw():
        return convwgrad.conv2d_weight(x, weight.shape, dy, stride, padding, dilation, groups)

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            return g

    class WithDw(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            dw()
            return g

    rows = {
        "dW from the main thread": dw,
        "identity Function fwd+bwd": lambda: Identity.apply(seed).backward(),
        "Function whose backward computes dW": lambda: WithDw.apply(seed).backward(),
        "clone + backward (no Python node)": lambda: seed.clone().backward(),
    }
    with convwgrad.record_launches() as log:
        dw()
    print(f"{name}: family {log[-1].family}; host us per call")
    for label, fn in rows.items():
        print(f"  {label:<40} {per_call(fn, 200)[0]:8.1f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "unirep-14-c320-k7-d2")
