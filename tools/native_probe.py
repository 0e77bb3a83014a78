"""Probe: does a patched, routed layer take the native backward on this GPU? (prints each step's grad_fn,
the route's memo state and the native counters)."""
import copy

import torch
from torch import nn

import convwgrad
from convwgrad.frameworks import torch_ops
from convwgrad.provider import dispatch, native
from convwgrad.provider.plan import plan as real_plan


def main():
    torch_ops.native_backward = True  # opt-in (CONVWGRAD_NATIVE_BACKWARD=1); this probe is about it
    print("load:", native.load(), native.status())
    for family in ("wgrad_staged", "wgrad_splitk"):
        pin = lambda problem, target=None, **pins: real_plan(problem, target, family=family)  # noqa: E731
        torch_ops.plan = dispatch.make_plan = pin
        dispatch.clear_prepared_calls()
        stock = nn.Conv2d(144, 144, 3, padding=1, groups=144).cuda().to(memory_format=torch.channels_last)
        patched = convwgrad.patch(copy.deepcopy(stock))
        for step in range(3):
            x = torch.randn(32, 144, 56, 56, device="cuda").to(memory_format=torch.channels_last).requires_grad_()
            with torch.autocast("cuda", torch.bfloat16):
                y = patched(x)
            route = patched.__dict__.get("_convwgrad_route")
            memo = route[-1] if route else None
            print(family, step, type(y.grad_fn).__name__, "route:", None if route is None else route[3:5],
                  "memo.native:", None if memo is None else memo.native, "flag:", torch_ops.native_backward,
                  "conv:", native.conv is not None)
            y.float().square().mean().backward()
            print("   stats", native.backward_stats())


if __name__ == "__main__":
    main()
