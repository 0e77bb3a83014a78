"""Host cost of a dW call: convwgrad's entry points against the kernels they launch.

Per layer, each way of asking for dW is called in a loop; host us/call is the time to
enqueue the loop (no synchronisation inside it), eager us/call the loop plus the final
synchronisation. Ways: ``aten`` (``aten.convolution_backward`` with a real weight, as
autograd calls it), ``conv2d_weight``, ``dispatch`` (``dispatch_conv_grouped`` with the
problem built once), ``op`` (``torch.ops.convwgrad.conv_weight``), ``stock_layer`` and
``patched_layer`` (a 2-D layer's forward and backward, stock and patched: what a model pays per
layer), and ``bound`` (the
prepared call's launch alone: the raw kernels, where this version has it) and ``bound_jit`` (the
same through Triton's JIT launch on every call).
The layers are small, so the GPU keeps up with the host and the host cost shows.

Usage (GPU machine): python tools/host_overhead.py [--calls 200] [--json FILE]
       python tools/host_overhead.py --paired [--rounds 100 --block 20]  (thread CPU, ways interleaved)
Run it with another checkout first on PYTHONPATH to measure that version the same way.
"""

import argparse
import copy
import json
import statistics
import time

import torch

import convwgrad

#: name: (N, C, H, W, k, stride, layout[, dilation]); small layers where cuDNN takes < 50 us, and
#: four planned for a Triton family on CUDA (a 13x13, a 1-D k=31 filter, two dilated UniRepLKNet branches)
LAYERS = {
    "mbv2-112-c32-k3": (32, 32, 112, 112, 3, 1, "channels_last"),
    "mbv2-14-c384-k3": (32, 384, 14, 14, 3, 1, "channels_last"),
    "mbv2-7-c960-k3": (32, 960, 7, 7, 3, 1, "channels_last"),
    "convnext-7-c768-k7": (64, 768, 7, 7, 7, 1, "channels_last"),
    "mbv2-14-c384-k3-nchw": (32, 384, 14, 14, 3, 1, "contiguous"),
    "replk-7-c1024-k13": (16, 1024, 7, 7, 13, 1, "channels_last"),
    "conformer-1d-c256-k31": (32, 256, None, 256, 31, 1, "channels_last"),
    "unirep-7-c640-k3-d5": (32, 640, 7, 7, 3, 1, "channels_last", 5),
    "unirep-14-c320-k7-d2": (32, 320, 14, 14, 7, 1, "channels_last", 2),
}


def tensors(n, c, h, w, k, stride, layout, dilation=1):
    shape = (n, c, w) if h is None else (n, c, h, w)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn((c, 1, k) if h is None else (c, 1, k, k), device="cuda", dtype=torch.bfloat16)
    pad = dilation * (k - 1) // 2
    out_size = [(s + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for s in shape[2:]]
    dy = torch.randn((n, c, *out_size), device="cuda", dtype=torch.bfloat16)
    if layout == "channels_last":
        if h is None:
            x, dy = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (x, dy))
        else:
            x, dy, weight = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy, weight))
    rank = len(shape) - 2
    return x, weight, dy, [stride] * rank, [pad] * rank, [dilation] * rank


def per_call(fn, calls):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    host, eager = [], []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        host.append((enqueued - start) * 1e6 / calls)
        eager.append((done - start) * 1e6 / calls)
    return statistics.median(host), statistics.median(eager)


def idle_per_call(fn, calls):
    """Median wall and thread-CPU us of ``fn``, each call started on an idle GPU (synchronised
    before it; its own kernels not waited for): the host cost of one call, free of back-pressure."""
    wall, cpu = [], []
    for i in range(calls + 10):
        torch.cuda.synchronize()
        w, c = time.perf_counter(), time.thread_time()
        fn()
        if i >= 10:
            cpu.append((time.thread_time() - c) * 1e6)
            wall.append((time.perf_counter() - w) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(wall), statistics.median(cpu)


def paired_per_call(ways, rounds, block):
    """Per way, median thread-CPU and wall us a call over ``rounds`` rounds in which every way runs a
    block of ``block`` calls in turn (the GPU idle at each block's start, its end synchronised): the
    ways see the same host state, so a drift or a noisy neighbour moves them together. Also, per way,
    the median over rounds of its difference from ``aten`` in the same round (thread CPU): the
    overhead figure. Thread CPU time leaves out the time the thread was not running (preemption)."""
    for fn in ways.values():
        for _ in range(10):
            fn()
    torch.cuda.synchronize()
    cpu = {way: [] for way in ways}
    wall = {way: [] for way in ways}
    for _ in range(rounds):
        for way, fn in ways.items():
            torch.cuda.synchronize()
            w, c = time.perf_counter(), time.thread_time()
            for _ in range(block):
                fn()
            c = time.thread_time() - c
            torch.cuda.synchronize()
            cpu[way].append(c * 1e6 / block)
            wall[way].append((time.perf_counter() - w) * 1e6 / block)
    row = {}
    for way in ways:
        over = [a - b for a, b in zip(cpu[way], cpu["aten"])]
        over_bound = [a - b for a, b in zip(cpu[way], cpu.get("bound", cpu["aten"]))]
        row[way] = (statistics.median(cpu[way]), statistics.median(wall[way]), statistics.median(over),
                    statistics.median(over_bound))
    return row


def base_ways(x, weight, dy, stride, padding, dilation):
    """The ways every method times: aten's dW call as autograd makes it, conv*d_weight and the op."""
    groups, rank = x.shape[1], x.dim() - 2
    nd_weight = {1: convwgrad.conv1d_weight, 2: convwgrad.conv2d_weight}[rank]
    return {
        "aten": lambda: torch.ops.aten.convolution_backward.default(
            dy, x, weight, None, stride, padding, dilation, False, [0] * rank, groups, [False, True, False]),
        "conv2d_weight": lambda: nd_weight(x, weight.shape, dy, stride, padding, dilation, groups),
        "op": lambda: torch.ops.convwgrad.conv_weight.default(x, dy, list(weight.shape), stride, padding,
                                                              dilation, groups),
    }


def layer_ways(layer):
    """The paired method's ways of one layer (the bound launch with a workspace allocated once), and the
    family its prepared call runs."""
    x, weight, dy, stride, padding, dilation = tensors(*layer)
    from convwgrad.provider.dispatch import _prepare_conv_weight

    prepared, _ = _prepare_conv_weight(x, weight.shape, dy, stride, padding, dilation, x.shape[1], False)
    workspace = (torch.empty(prepared.workspace_nbytes, dtype=torch.uint8, device="cuda")
                 if prepared.workspace_nbytes else None)
    ways = base_ways(x, weight, dy, stride, padding, dilation)
    problem = convwgrad.ConvProblem.from_tensors(x, weight.shape, dy, stride, padding, dilation, x.shape[1])
    ways = {"aten": ways["aten"], "bound": lambda: prepared.run(x, dy, None, workspace),
            "conv2d_weight": ways["conv2d_weight"], "op": ways["op"],
            "dispatch": lambda: convwgrad.dispatch_conv_grouped(problem, x, dy),
            "conv2d_weight_py": python_warm_path(ways["conv2d_weight"]), "op_py": python_warm_path(ways["op"])}
    return ways, prepared.family


def python_warm_path(fn):
    """``fn`` with the native warm path set aside for the call (two attribute writes, ~0.1 us): the
    Python warm path that sessions 5-14 measured, beside the native one in the same rounds."""
    from convwgrad.provider import native

    def call():
        kept, native.call = native.call, None
        try:
            fn()
        finally:
            native.call = kept

    return call


def measure_paired(rounds, block):
    rows = []
    for name, layer in LAYERS.items():
        ways, family = layer_ways(layer)
        row = {"layer": name, "family": family}
        row.update(paired_per_call(ways, rounds, block))
        rows.append(row)
    return rows


def print_paired(rows, rounds, block):
    from convwgrad.provider import native

    print(f"native warm path: {native.status()}")
    print(f"convwgrad from {convwgrad.__file__}; {torch.cuda.get_device_name()}; paired method: {rounds} rounds of "
          f"{block} calls a way, thread-CPU us a call (wall us a call, block synchronised); "
          "over aten = median of same-round differences in thread CPU")
    ways = ("aten", "bound", "conv2d_weight", "conv2d_weight_py", "dispatch", "op", "op_py")
    print(f"{'layer':<24} {'family':<13} " + " ".join(f"{w:>16}" for w in ways)
          + "   over aten: bound / conv2d_weight / conv2d_weight_py / dispatch / op / op_py;  conv2d_weight, _py over bound")
    for r in rows:
        cells = " ".join(f"{r[w][0]:>6.1f} ({r[w][1]:>6.1f})" for w in ways)
        overs = " / ".join(f"{r[w][2]:+6.1f}" for w in ("bound", "conv2d_weight", "conv2d_weight_py", "dispatch", "op",
                                                        "op_py"))
        print(f"{r['layer']:<24} {r['family']:<13} {cells}   {overs};  "
              f"{r['conv2d_weight'][3]:+6.1f}, {r['conv2d_weight_py'][3]:+6.1f}")
    for way in ("conv2d_weight", "conv2d_weight_py", "dispatch", "op", "op_py"):
        overs = sorted(r[way][3] for r in rows)
        print(f"{way} over the bound launch, thread CPU, across layers: median {statistics.median(overs):+.1f} us, "
              f"range {overs[0]:+.1f} to {overs[-1]:+.1f}")
        overs = sorted(r[way][2] for r in rows)
        print(f"{way} over aten, thread CPU, across layers: median {statistics.median(overs):+.1f} us, "
              f"range {overs[0]:+.1f} to {overs[-1]:+.1f}")


def measure(calls):
    rows = []
    for name, layer in LAYERS.items():
        x, weight, dy, stride, padding, dilation = tensors(*layer)
        groups, rank = x.shape[1], x.dim() - 2
        problem = convwgrad.ConvProblem.from_tensors(x, weight.shape, dy, stride, padding, dilation, groups)
        ways = base_ways(x, weight, dy, stride, padding, dilation)
        ways["dispatch"] = lambda: convwgrad.dispatch_conv_grouped(problem, x, dy)
        try:  # the prepared call's launch alone (this version's warm path has one)
            from convwgrad.provider.dispatch import _prepare_conv_weight

            prepared, _ = _prepare_conv_weight(x, weight.shape, dy, stride, padding, dilation, groups, False)
            ways["bound"] = lambda: prepared.run(x, dy, None, None if not prepared.workspace_nbytes else
                                                 torch.empty(prepared.workspace_nbytes, dtype=torch.uint8,
                                                             device="cuda"))
        except ImportError:
            pass
        try:  # the same launch through Triton's JIT on every call, for the direct launch's gain
            try:  # the shared launch blocks; older versions kept them in the split-K family
                from convwgrad.provider.blocks import launch as launcher
            except ImportError:
                from convwgrad.plugins.wgrad_splitk import launcher

            supported, launcher.direct_launch_supported = launcher.direct_launch_supported, lambda: False
            try:
                jit_prepared, _ = _prepare_conv_weight(x, weight.shape, dy, stride, padding, dilation, groups, False)
            finally:
                launcher.direct_launch_supported = supported
            ways["bound_jit"] = lambda: jit_prepared.run(
                x, dy, None, None if not jit_prepared.workspace_nbytes else
                torch.empty(jit_prepared.workspace_nbytes, dtype=torch.uint8, device="cuda"))
        except (ImportError, AttributeError):
            pass
        if rank == 2:  # what a patched model pays per layer: forward + backward of the module, dX and dW
            stock_layer = torch.nn.Conv2d(groups, groups, weight.shape[2:], stride, padding, dilation, groups,
                                          bias=False, device="cuda", dtype=torch.bfloat16)
            stock_layer = stock_layer.to(memory_format=torch.channels_last) if x.is_contiguous(
                memory_format=torch.channels_last) else stock_layer
            patched_layer = convwgrad.patch(copy.deepcopy(stock_layer))
            x_grad = x.detach().clone().requires_grad_()
            ways["stock_layer"] = lambda: stock_layer(x_grad).backward(dy)
            ways["patched_layer"] = lambda: patched_layer(x_grad).backward(dy)
        ways["again"] = ways["conv2d_weight"]  # last: a drift over the run shows as a difference
        with convwgrad.record_launches() as log:
            ways["conv2d_weight"]()
        row = {"layer": name, "family": log[-1].family if log else "?"}
        for way, fn in ways.items():
            row[way] = per_call(fn, calls)
        rows.append(row)
    return rows


def profile_layer(name, calls):
    import cProfile
    import pstats

    x, weight, dy, stride, padding, dilation = tensors(*LAYERS[name])
    nd_weight = {3: convwgrad.conv1d_weight, 4: convwgrad.conv2d_weight}[x.dim()]
    ways = {  # the direct call, and the op that patched models call
        "conv*d_weight": lambda: nd_weight(x, weight.shape, dy, stride, padding, dilation, x.shape[1]),
        "op": lambda: torch.ops.convwgrad.conv_weight.default(x, dy, list(weight.shape), stride, padding,
                                                              dilation, x.shape[1]),
    }
    for way, call in ways.items():
        per_call(call, calls)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        profiler.disable()
        print(f"cProfile of {calls} {way} calls of {name}:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json")
    parser.add_argument("--profile", help="a layer name: cProfile its conv*d_weight and op calls, print the top")
    parser.add_argument("--paired", action="store_true",
                        help="the paired method: ways interleaved in rounds of --block calls, thread CPU time")
    parser.add_argument("--rounds", type=int, default=100, help="--paired: rounds")
    parser.add_argument("--block", type=int, default=20, help="--paired: calls a way and round")
    args = parser.parse_args(argv)
    from convwgrad.provider import native

    native.load()  # built and loaded before anything is timed (a first call would start it in the background)
    if args.paired:
        rows = measure_paired(args.rounds, args.block)
        print_paired(rows, args.rounds, args.block)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if args.profile:
        profile_layer(args.profile, args.calls)
    rows = measure(args.calls)
    print(f"convwgrad from {convwgrad.__file__}; {torch.cuda.get_device_name()}; host us/call (eager us/call)")
    ways = [w for w in ("aten", "bound_jit", "bound", "conv2d_weight", "dispatch", "op", "again", "stock_layer",
                        "patched_layer") if any(w in r for r in rows)]
    print(f"{'layer':<24} {'family':<13} " + " ".join(f"{w:>17}" for w in ways)
          + "   over aten: conv2d_weight / op (host)")
    for r in rows:
        cells = " ".join(f"{r[w][0]:>7.1f} ({r[w][1]:>6.1f})" if w in r else f"{'-':>17}" for w in ways)
        print(f"{r['layer']:<24} {r['family']:<13} {cells}   "
              f"{r['conv2d_weight'][0] - r['aten'][0]:+6.1f} / {r['op'][0] - r['aten'][0]:+6.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
