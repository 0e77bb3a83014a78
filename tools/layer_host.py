"""Host time of one depthwise layer's forward and backward, stock against patched (GPU machine),
each timed alone on an idle GPU (the patched layer with its native backward and with EagerConv's
Python one), and a cProfile of the Python backward inside autograd's engine thread: where a patched layer's extra host time goes (issue 9: a host-bound UniRepLKNet-T step
at batch 32 is slower patched although its dW kernels are 1.85x faster).

Usage: python tools/layer_host.py [--layers replk-7-c1024-k13,unirep-14-c320-k13] [--calls 200]
                                  [--plugin tools/route_experiments.py:NAME]  (an experiment's routing first)
"""

import argparse
import copy
import cProfile
import os
import pstats

import torch

import convwgrad
from convwgrad.frameworks import torch_ops
from convwgrad.provider import native
from host_overhead import idle_per_call  # noqa: E402  (tools/ is the script's directory)

#: name: (N, C, H, k); depthwise, stride 1, 'same' padding, channels_last, bf16 autocast
LAYERS = {
    "replk-7-c1024-k13": (16, 1024, 7, 13),
    "unirep-14-c320-k13": (32, 320, 14, 13),
    "unirep-28-c160-k13": (32, 160, 28, 13),
    # MobileNetV2 N=128's 3x3 layers (the staged family's graph-launch class; session 21's eager experiment)
    "mbv2-14-c384-k3": (128, 384, 14, 3),
    "mbv2-56-c144-k3": (128, 144, 56, 3),
}


def depthwise_layer(n, c, h, k, dilation=1):
    """(stock, patched, x, grad_output, the family convwgrad ran) for one depthwise layer: stride 1,
    'same' padding, channels_last, an fp32 input and bf16 grad_output as autocast hands them over."""
    stock = torch.nn.Conv2d(c, c, k, padding=dilation * (k // 2), dilation=dilation, groups=c).cuda()
    stock = stock.to(memory_format=torch.channels_last)
    patched = convwgrad.patch(copy.deepcopy(stock))
    x = torch.randn(n, c, h, h, device="cuda").contiguous(memory_format=torch.channels_last).requires_grad_()
    g = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with convwgrad.record_launches() as log:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            patched(x).backward(g)
    return stock, patched, x, g, log[-1].family if log else "aten"


def profile_patched_backward(run, repeats):
    """cProfile of every patched layer's backward (``EagerConv.backward``, in the thread autograd
    runs it in) over ``repeats`` calls of ``run``: (pstats' stats, backward calls)."""
    profile, original, calls = cProfile.Profile(), torch_ops.EagerConv.backward, [0]

    def profiled(ctx, grad_output):
        calls[0] += 1
        profile.enable()
        try:
            return original(ctx, grad_output)
        finally:
            profile.disable()

    torch_ops.EagerConv.backward = staticmethod(profiled)
    try:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    finally:
        torch_ops.EagerConv.backward = staticmethod(original)
    return pstats.Stats(profile).stats, calls[0]


def print_profile(stats, calls, title, top=14):
    """Own time a call in total, then the ``top`` functions by own time, per backward call."""
    if not calls:
        return
    print(f"  {title} ({calls} calls): {sum(v[2] for v in stats.values()) / calls * 1e6:.1f} us own time a call; top:")
    for (path, line, func), (_, ncalls, own, cum, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"    {own / calls * 1e6:7.1f} us own {cum / calls * 1e6:7.1f} cum  x{ncalls / calls:4.1f}  "
              f"{os.path.basename(path)}:{line}({func})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py:NAME",
                        help="register this object as a convwgrad plugin first (tools/step_bench.py's --plugin)")
    args = parser.parse_args()
    # loaded before the first layer: its build or load otherwise runs in the background on first use,
    # and the layers timed before it lands would run EagerConv where the native backward was meant
    print(f"native warm path: {native.load() is not None} ({native.status()})")
    if args.plugin:
        from step_bench import register_plugin  # tools/ is the script's directory

        for entry in args.plugin:
            register_plugin(entry)
    for name in args.layers.split(","):
        stock, patched, x, g, family = depthwise_layer(*LAYERS[name])
        print(f"{name}: dW family {family}; host us (thread cpu us), median of {args.calls}")
        for label, module, native_backward in (("stock", stock, True), ("patched", patched, True),
                                               ("patched-python-backward", patched, False)):
            torch_ops.native_backward = native_backward  # the routed layer's backward: C++, or EagerConv's

            def forward():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return module(x)

            def forward_backward():
                forward().backward(g)

            fwd = idle_per_call(forward, args.calls)
            both = idle_per_call(forward_backward, args.calls)
            print(f"  {label:<24} forward {fwd[0]:7.1f} ({fwd[1]:6.1f})   forward+backward {both[0]:7.1f} ({both[1]:6.1f})"
                  f"   backward ~{both[0] - fwd[0]:7.1f}")
        # the patched backward's own profile, taken in the engine thread that runs it
        def patched_step():
            torch.cuda.synchronize()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                patched(x).backward(g)

        torch_ops.native_backward = False  # EagerConv's Python backward: the one cProfile can see
        print_profile(*profile_patched_backward(patched_step, 100), "patched Python backward, cProfile in the engine thread")
        torch_ops.native_backward = True
        print(f"  native backward: (native, fallback, driver) = {native.backward_stats()}")


if __name__ == "__main__":
    main()
