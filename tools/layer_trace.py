"""Where a patched depthwise layer's host time goes, op by op and thread by thread (GPU machine).

For each layer: (1) the host time of its pieces, each called alone on an idle GPU
(``idle_per_call``): cuDNN's dgrad alone, dgrad + wgrad in one call (what stock autograd
makes), convwgrad's dW call, the forward of each way; (2) the forward + backward of each way
of running the layer: ``stock``, ``patched`` (the library as it is) and any candidate in
``WAYS``; (3) a torch.profiler timeline of one stock and one patched forward + backward: every
CPU event of depth <= 2 with its thread, start offset and duration, so a gap, a second thread
or an unexpected copy shows.

Usage: python tools/layer_trace.py [--layers replk-7-c1024-k13] [--calls 150] [--timeline]
"""

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

from convwgrad.frameworks import torch_ops  # noqa: E402
from convwgrad.frameworks.patching import _autocast  # noqa: E402
from host_overhead import idle_per_call  # noqa: E402
from layer_host import depthwise_layer  # noqa: E402

#: name: (N, C, H, k, dilation); depthwise, stride 1, 'same' padding, channels_last, bf16 autocast
LAYERS = {
    "replk-7-c1024-k13": (16, 1024, 7, 13, 1),
    "unirep-14-c320-k13": (32, 320, 14, 13, 1),
    "unirep-28-c160-k13": (32, 160, 28, 13, 1),
    "unirep-14-c320-k7-d2": (32, 320, 14, 7, 2),
}


class _WeightGradNode(torch.autograd.Function):
    """Candidate: identity on the convolution's output whose backward adds dW; dX (and the bias
    gradient) come from torch's native ConvolutionBackward node of a conv on the detached weight."""

    @staticmethod
    def forward(ctx, output, input, weight, stride, padding, dilation, groups):
        ctx.save_for_backward(input)
        ctx.weight = (list(weight.shape), weight.stride())
        ctx.arguments = (stride, padding, dilation, groups)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        shape, strides = ctx.weight
        grad_weight = torch_ops._conv_weight_impl(input, grad_output, shape, *ctx.arguments)
        if grad_weight.stride() != strides:
            grad_weight = grad_weight.as_strided(shape, strides)
        return grad_output, None, grad_weight, None, None, None, None


def native_dgrad(module):
    """The candidate as a forward function for ``module`` (zero padding, its own stride/dilation)."""
    stride, padding, dilation, groups = list(module.stride), list(module.padding), list(module.dilation), module.groups

    def forward(x):
        xb, wb, bb = _autocast(x, module.weight, module.bias)
        y = torch.convolution(xb, wb.detach(), bb, stride, padding, dilation, False, [0] * len(stride), groups)
        return _WeightGradNode.apply(y, xb.detach(), wb, stride, padding, dilation, groups)

    return forward


def timeline(fn, label, depth=2):
    """Print one call's CPU events (depth <= ``depth``) with thread, start offset and duration."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    if not events:
        return
    t0 = min(e.time_range.start for e in events)
    threads = {}

    def level(e):
        d = 0
        while e.cpu_parent is not None:
            e, d = e.cpu_parent, d + 1
        return d

    print(f"  timeline {label}: start(us) dur(us) thread name")
    for e in sorted(events, key=lambda e: e.time_range.start):
        d = level(e)
        if d > depth:
            continue
        thread = threads.setdefault(e.thread, f"T{len(threads)}")
        print(f"    {e.time_range.start - t0:8.1f} {e.time_range.elapsed_us():8.1f} {thread} {'  ' * d}{e.name[:70]}")


def interleaved(ways, calls):
    """Median host us (wall, thread CPU) of each way, the ways called in turn on an idle GPU."""
    import statistics
    import time

    samples = {label: ([], []) for label in ways}
    for i in range(calls + 10):
        for label, fn in ways.items():
            torch.cuda.synchronize()
            w, c = time.perf_counter(), time.thread_time()
            fn()
            if i >= 10:
                samples[label][0].append((time.perf_counter() - w) * 1e6)
                samples[label][1].append((time.thread_time() - c) * 1e6)
    torch.cuda.synchronize()
    return {label: (statistics.median(a), statistics.median(b)) for label, (a, b) in samples.items()}


def forward_profile(name, calls):
    """The patched forward taken apart: its pieces timed in turn, then torch.profiler's host events
    and cProfile's top functions over 30 calls each (a device sync or a copy shows by name)."""
    import cProfile
    import pstats

    from torch.profiler import ProfilerActivity, profile

    n, c, h, k, d = LAYERS[name]
    stock, patched, x, _, _ = depthwise_layer(n, c, h, k, d)
    xb, wb, bb = (t.detach().to(torch.bfloat16) for t in (x, stock.weight, stock.bias))
    wb.requires_grad_()
    resolved = (list(stock.stride), list(stock.padding), list(stock.dilation), c)

    def under_autocast(fn):
        def run():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return fn()
        return run

    ways = {
        "stock module": under_autocast(lambda: stock(x)),
        "patched module": under_autocast(lambda: patched(x)),
        "_autocast casts": under_autocast(lambda: _autocast(x, stock.weight, stock.bias)),
        "torch.convolution": under_autocast(lambda: torch.convolution(xb, wb, bb, *resolved[:3], False, [0, 0], c)),
        "EagerConv.apply": under_autocast(lambda: torch_ops.EagerConv.apply(xb, wb, bb, *resolved)),
        "EagerConv.apply no grad": under_autocast(lambda: torch_ops.EagerConv.apply(xb.detach(), wb.detach(),
                                                                                   bb, *resolved)),
    }
    print(f"{name}: forward pieces, host us (thread cpu us), called in turn, median of {calls}")
    for label, (wall, cpu) in interleaved(ways, calls).items():
        print(f"  {label:<24} {wall:7.1f} ({cpu:6.1f})")
    for label in ("stock module", "patched module"):
        fn = ways[label]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                torch.cuda.synchronize()
                fn()
            torch.cuda.synchronize()
        rows = sorted((e for e in prof.key_averages() if e.self_cpu_time_total), key=lambda e: -e.self_cpu_time_total)
        print(f"  torch.profiler {label}: self CPU us a call, top 12")
        for e in rows[:12]:
            print(f"    {e.self_cpu_time_total / 30:8.1f} x{e.count / 30:4.1f} {e.key[:80]}")
    profiler = cProfile.Profile()
    fn = ways["patched module"]
    for _ in range(30):
        torch.cuda.synchronize()
        profiler.enable()
        fn()
        profiler.disable()
    torch.cuda.synchronize()
    print("  cProfile patched module forward: own us a call, top 12")
    stats = pstats.Stats(profiler).stats
    for (path, line, func), (_, ncalls, own, cum, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:12]:
        print(f"    {own / 30 * 1e6:7.1f} own {cum / 30 * 1e6:7.1f} cum x{ncalls / 30:4.1f} {os.path.basename(path)}:{line}({func})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="replk-7-c1024-k13,unirep-14-c320-k13")
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--timeline", action="store_true")
    parser.add_argument("--forward-profile", action="store_true", help="take the patched forward apart instead")
    args = parser.parse_args()
    if args.forward_profile:
        for name in args.layers.split(","):
            forward_profile(name, args.calls)
        return
    for name in args.layers.split(","):
        n, c, h, k, d = LAYERS[name]
        stock, patched, x, g, family = depthwise_layer(n, c, h, k, d)
        candidate = copy.deepcopy(stock)
        print(f"{name}: dW family {family}; host us (thread cpu us), median of {args.calls}")

        # the pieces, bf16 channels_last as autocast hands them over
        xb = x.detach().to(torch.bfloat16)
        wb = stock.weight.detach().to(torch.bfloat16)
        conv_args = (list(stock.stride), list(stock.padding), list(stock.dilation), False, [0, 0], c)
        aten_bwd = torch.ops.aten.convolution_backward.default
        pieces = {
            "cudnn forward": lambda: torch.convolution(xb, wb, None, *conv_args),
            "cudnn dgrad only": lambda: aten_bwd(g, xb, wb, [c], *conv_args, [True, False, True]),
            "cudnn wgrad only": lambda: aten_bwd(g, xb, wb, None, *conv_args, [False, True, False]),
            "cudnn dgrad+wgrad": lambda: aten_bwd(g, xb, wb, [c], *conv_args, [True, True, True]),
            "convwgrad dW": lambda: torch_ops._conv_weight_impl(xb, g, list(wb.shape), *conv_args[:3], c),
        }
        for label, fn in pieces.items():
            wall, cpu = idle_per_call(fn, args.calls)
            print(f"  piece {label:<20} {wall:7.1f} ({cpu:6.1f})")

        ways = {"stock": stock, "patched": patched, "native_dgrad": native_dgrad(candidate)}
        for label, module in ways.items():
            def forward(module=module):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return module(x)

            def forward_backward(forward=forward):
                forward().backward(g)

            fwd = idle_per_call(forward, args.calls)
            both = idle_per_call(forward_backward, args.calls)
            print(f"  way {label:<13} forward {fwd[0]:7.1f} ({fwd[1]:6.1f})   forward+backward {both[0]:7.1f} "
                  f"({both[1]:6.1f})   backward ~{both[0] - fwd[0]:7.1f}")
        # the candidate's gradients equal the patched layer's (same kernels; a sanity check)
        for module in (patched, candidate):
            module.zero_grad(set_to_none=True)
        x.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            patched(x).backward(g)
        ref_x, ref_w, ref_b = x.grad.clone(), patched.weight.grad.clone(), patched.bias.grad.clone()
        x.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            native_dgrad(candidate)(x).backward(g)
        same = all(torch.equal(a, b) for a, b in ((ref_x, x.grad), (ref_w, candidate.weight.grad),
                                                   (ref_b, candidate.bias.grad)))
        print(f"  native_dgrad gradients identical to patched: {same}")
        if args.timeline:
            for label in ("stock", "patched"):
                module = ways[label]

                def fb(module=module):
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        out = module(x)
                    out.backward(g)

                timeline(fb, f"{name} {label}")


if __name__ == "__main__":
    main()
