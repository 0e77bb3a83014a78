"""Host time of each part of a Triton-routed dW call, timed without a profiler (GPU machine).

A cProfile of the call (tools/backward_host.py) names the slow functions but doubles Python's
cost. Here every part is timed by itself, the same way, on the main thread and inside autograd's
backward (the engine's device thread, where a patched layer's dW is asked for): the median host
microseconds of one call started on an idle GPU (synchronised before, its kernels not waited for).

Parts, per layer:
- ``empty_ws`` / ``kept_ws``: a fresh uint8 workspace (torch.empty) / the dispatcher's kept one;
- ``empty_out``: dW's own allocation;
- ``launch_tensors`` / ``launch_ints`` / ``launch_c``: the stage-1 kernel launched through Triton's
  launcher object with tensors (the pre-session-10 direct launch), with int pointers, and through
  the launcher's compiled C function with int pointers (``KernelLaunch`` now, where Triton allows);
- ``prepared_fresh_ws`` / ``prepared``: the whole prepared call, with a workspace per call / kept;
- ``conv_weight``: the op's path (key, lookup, prepared call; match_layouts), ``conv2d_weight``;
- ``aten_dw`` / ``aten_dx`` / ``aten_both``: aten.convolution_backward for dW alone, dX alone, both
  (stock's call);
- ``stock_fwd/bwd``, ``patched_fwd/bwd``, ``patched_no_memo_fwd/bwd`` (main thread only; a backward
  returns once the engine thread has launched everything): a module's forward and its backward,
  stock, patched, and patched without the backward's remembered prepared call.
Run it with an older checkout first on PYTHONPATH to time that version (parts it lacks are skipped).

Usage: python tools/host_parts.py [--plugin FILE.py:NAME] [--calls 200] [LAYER ...]
(layer names from tools/host_overhead.py LAYERS, or N:C:H:K:stride, channels_last bf16 depthwise).
"""

import argparse
import copy
import gc
import statistics
import sys
import time

import torch

import convwgrad
from convwgrad.provider import dispatch
from convwgrad.provider.blocks import launch as launch_blocks
from host_overhead import LAYERS, tensors  # noqa: E402  (tools/ is the script's directory)

DEFAULT_LAYERS = ("mbv2-14-c384-k3", "32:672:14:5:2", "64:96:56:7:1")


def layer_tensors(name):
    if name in LAYERS:
        return tensors(*LAYERS[name])
    n, c, h, k, stride = map(int, name.split(":"))
    return tensors(n, c, h, h, k, stride, "channels_last")


def idle_median(fn, calls):
    """Median wall us of ``fn`` started on an idle GPU."""
    wall = []
    for i in range(calls + 10):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if i >= 10:
            wall.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(wall)


def in_engine(fn, calls):
    """The same, each call made inside an autograd backward (the engine's device thread)."""
    seed = torch.zeros((), device="cuda", requires_grad=True)
    times = []

    class Timed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e6)
            return g

    for i in range(calls + 10):
        out = Timed.apply(seed)
        torch.cuda.synchronize()
        out.backward()
    torch.cuda.synchronize()
    return statistics.median(times[10:])


def kernel_launches(prepared):
    """The KernelLaunch objects a prepared call's run closes over (stage 1 first)."""
    found, seen, todo = [], set(), [prepared.run]
    while todo:
        fn = todo.pop(0)
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            if isinstance(value, launch_blocks.KernelLaunch):
                found.append(value)
            elif callable(value):
                todo.append(value)
    return found


def launch_parts(kernel_launch, tensors_):
    """Three ways to launch one armed KernelLaunch's binary."""
    compiled, grid, tail = kernel_launch.compiled, kernel_launch.grid, kernel_launch.tail
    index = kernel_launch.device_index

    def with_tensors():
        stream = torch._C._cuda_getCurrentRawStream(index)
        compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, None, None,
                     None, *tensors_, *tail)

    def with_ints():
        stream = torch._C._cuda_getCurrentRawStream(index)
        compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, None, None,
                     None, *[t.data_ptr() for t in tensors_], *tail)

    parts = {"launch_tensors": with_tensors, "launch_ints": with_ints}
    c_launch = launch_blocks._c_launch(compiled) if hasattr(launch_blocks, "_c_launch") else None
    if c_launch is not None:
        launch, cooperative, pdl = c_launch

        def c():
            stream = torch._C._cuda_getCurrentRawStream(index)
            launch(grid[0], grid[1], grid[2], stream, compiled.function, cooperative, pdl, None, None,
                   compiled.packed_metadata, None, None, None, *[t.data_ptr() for t in tensors_], *tail)

        parts["launch_c"] = c
    return parts


def measure(name, calls):
    x, weight, dy, stride, padding, dilation = layer_tensors(name)
    groups, rank = x.shape[1], x.dim() - 2
    args = (stride, padding, dilation, groups)
    with convwgrad.record_launches() as log:
        convwgrad.conv2d_weight(x, weight.shape, dy, *args)
    family = log[-1].family
    key = (dispatch._tensor_key(x), dispatch._tensor_key(dy), *map(dispatch._exact_ints, (
        list(weight.shape), stride, padding, dilation, groups)), False)
    prepared = dispatch._prepared.get(key)
    nbytes = prepared.workspace_nbytes
    parts = {
        "empty_out": lambda: torch.empty(weight.shape, dtype=x.dtype, device="cuda"),
        "conv2d_weight": lambda: convwgrad.conv2d_weight(x, weight.shape, dy, *args),
        "conv_weight": lambda: dispatch.conv_weight(x, list(weight.shape), dy, *args, match_layouts=True),
        "prepared": lambda: prepared(x, dy),
        "aten_dw": lambda: torch.ops.aten.convolution_backward.default(
            dy, x, weight, None, stride, padding, dilation, False, [0] * rank, groups, [False, True, False]),
        "aten_dx": lambda: torch.ops.aten.convolution_backward.default(
            dy, x, weight, None, stride, padding, dilation, False, [0] * rank, groups, [True, False, False]),
        "aten_both": lambda: torch.ops.aten.convolution_backward.default(
            dy, x, weight, None, stride, padding, dilation, False, [0] * rank, groups, [True, True, False]),
    }
    if nbytes:
        parts["empty_ws"] = lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        if hasattr(dispatch, "_workspace"):  # a version before session 10 has none
            parts["kept_ws"] = lambda: dispatch._workspace(nbytes, x.device)
        parts["prepared_fresh_ws"] = lambda: prepared(x, dy, None, torch.empty(nbytes, dtype=torch.uint8,
                                                                               device="cuda"))
        partials = torch.empty(nbytes, dtype=torch.uint8, device="cuda").view(torch.float32)
        launches = [k for k in kernel_launches(prepared) if k.compiled is not None]
        if launches:
            parts.update(launch_parts(launches[0], (x, dy, partials)))
    rows = {}
    for part, fn in parts.items():
        rows[part] = (idle_median(fn, calls), in_engine(fn, calls))
    stock = torch.nn.Conv2d(groups, groups, weight.shape[2:], stride, padding, dilation, groups, bias=False,
                            device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    patched = convwgrad.patch(torch.nn.Conv2d(groups, groups, weight.shape[2:], stride, padding, dilation, groups,
                                              bias=False, device="cuda", dtype=torch.bfloat16)
                              .to(memory_format=torch.channels_last))
    plain = convwgrad.patch(copy.deepcopy(patched))
    x_grad = x.detach().clone().requires_grad_()
    plain(x_grad).backward(dy)
    route = plain.__dict__.get("_convwgrad_route")
    if route is not None and len(route) > 5:
        route[5] = None  # no remembered prepared call: every backward through the dispatcher's lookup
    layers = (("stock", stock), ("patched", patched), ("patched_no_memo", plain))
    for label, layer in layers:
        # forward alone, and backward alone (it returns once the engine thread has launched all)
        rows[f"{label}_fwd"] = (idle_median(lambda: layer(x_grad), calls), float("nan"))
        outputs = []

        def backward():
            outputs.pop().backward(dy)

        def timed_backward():
            outputs.append(layer(x_grad))
            torch.cuda.synchronize()
            start = time.perf_counter()
            backward()
            return (time.perf_counter() - start) * 1e6

        samples = [timed_backward() for _ in range(calls + 10)][10:]
        rows[f"{label}_bwd"] = (statistics.median(samples), float("nan"))
    print(f"{name}: family {family}, workspace {nbytes} bytes; host us a call, median of {calls} "
          f"(main thread / engine thread)")
    for part, (main, engine) in rows.items():
        print(f"  {part:18s} {main:7.1f} {engine:7.1f}")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", nargs="*", default=list(DEFAULT_LAYERS))
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    if options.plugin:
        from step_bench import register_plugin

        for plugin in options.plugin:
            register_plugin(plugin)
    gc.freeze()
    for name in options.layers:
        measure(name, options.calls)


if __name__ == "__main__":
    sys.exit(main())
