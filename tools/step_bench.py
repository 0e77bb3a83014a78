"""Training steps of real models, stock torch against ``convwgrad.patch``, side by side in one
process, and each grouped layer's dW inside them.

Step: forward, backward and SGD under bf16 autocast, timed with CUDA events (so host time that
starves the GPU counts, as a user sees it), warm-up first, then stock and patched alternated
step by step (ABAB...) so drift hits both; the median of each. Models: any timm name
(``timm.create_model(name, pretrained=False)``), the block stacks of tests/frameworks, and the
large-kernel networks timm lacks (replknet31b, unireplknet_t), each with its batch size.

Layers (``--layers``): one backward of the patched model records every grouped layer's input
and grad_output with the strides autograd really hands over; then each layer's dW is timed
alone: stock (``aten.convolution_backward`` with the module's weight, as autograd calls it) and
convwgrad (``convwgrad::conv_weight``, as the patched layer calls it), both as kernel time (CUDA
graph replay) and eager wall time per call.

Usage (GPU machine, repo root):
    python tools/step_bench.py --models convnext_tiny:64,mobilenetv2_100:128 --layouts channels_last,contiguous
        [--steps 10] [--rounds 3] [--compile] [--layers] [--profile] [--json FILE]
"""

import argparse
import copy
import functools
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "frameworks"))

import convwgrad  # noqa: E402
from convwgrad.frameworks.patching import _STOCK_CLASS  # noqa: E402
from convwgrad.provider.layout import layout_of  # noqa: E402
from torch_models import NETWORKS, STACKS, build  # noqa: E402

#: the models of issue 9's table, with the batch sizes it was measured at
DEFAULT_MODELS = ("convnext_tiny:64,mobilenetv2_100:128,efficientnet_b0:128,regnety_016:128,"
                  "replknet31b:16,unireplknet_t:32")


def make_model(name):
    """(model, input shape without the batch, classes)."""
    if name in STACKS:
        model, (channels, size) = build(name)
        return model, (channels, size, size), 10
    if name in NETWORKS:
        torch.manual_seed(0)
        return NETWORKS[name](), (3, 224, 224), 1000
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False), (3, 224, 224), 1000


#: set when the models are compiled with CUDA graphs (``--compile reduce-overhead``)
_MARK_CUDAGRAPH_STEPS = False


def step(model, optimizer, x, target, phases=None):
    """One training step; ``phases`` (a list) gets the host ms of the forward, the backward
    (``backward()`` returns once autograd's threads have launched everything) and the optimizer."""
    t0 = time.perf_counter()
    if _MARK_CUDAGRAPH_STEPS:
        torch.compiler.cudagraph_mark_step_begin()  # two compiled models share the CUDA-graph pool
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), target)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if phases is not None:
        phases.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (time.perf_counter() - t2) * 1e3))


def step_times(model, optimizer, x, target, steps, cpu_ms=None, phases=None):
    """CUDA-event ms of each step; the main thread's CPU ms of each appended to ``cpu_ms``, the host
    ms of its phases to ``phases``."""
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cpu = time.thread_time()
        start.record()
        step(model, optimizer, x, target, phases)
        end.record()
        if cpu_ms is not None:
            cpu_ms.append((time.thread_time() - cpu) * 1e3)
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


class _Toggled:
    """One model timed as stock and as patched by swapping the patched modules' classes before
    each step (the per-module route cache is kept): the arms share parameters, memory and
    optimizer, so what differs between them is convwgrad alone (an A/A arm on two copies of a
    model differed by up to 6% on the H200 machine)."""

    def __init__(self, model):
        convwgrad.patch(model)
        self.modules = [(m, type(m), _STOCK_CLASS[type(m)]) for m in model.modules() if type(m) in _STOCK_CLASS]

    def set(self, patched):
        for m, patched_class, stock_class in self.modules:
            m.__class__ = patched_class if patched else stock_class

    def arm(self, model, patched):
        def run(*args, **kwargs):
            self.set(patched)
            return model(*args, **kwargs)

        run.parameters = model.parameters
        return run


def grouped_convs(model):
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)) and m.groups > 1]


def bench_steps(name, batch, layout, steps, rounds, compiled, profile, control=False, with_control=False,
                same_model=False, gc_freeze=False):
    """``control``: the 'patched' model is a second stock copy (an A/A run: what the method
    reports when nothing differs). ``with_control``: a second stock copy runs as a third arm in
    the same rotation, so each result carries its own A/A ratio (``control_ratio``).
    ``same_model``: all arms are one model, patched or not by class swap (:class:`_Toggled`);
    the control arm is that model stock once more."""
    stock, shape, classes = make_model(name)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    stock = stock.cuda().to(memory_format=fmt)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(batch, *shape, device="cuda", generator=g).contiguous(memory_format=fmt)
    target = torch.randint(0, classes, (batch,), device="cuda", generator=g)
    if same_model:
        if compiled:
            raise ValueError("--same-model swaps classes between eager steps; it cannot time compiled models")
        toggled = _Toggled(stock)
        optimizer = torch.optim.SGD(stock.parameters(), lr=1e-3)
        patched = stock
        arms = [("stock", toggled.arm(stock, False)), ("patched", toggled.arm(stock, True))]
        if with_control:
            arms.append(("control", toggled.arm(stock, False)))
    else:
        patched = copy.deepcopy(stock) if control else convwgrad.patch(copy.deepcopy(stock))
        arms = [("stock", stock), ("patched", patched)]
        if with_control:
            arms.append(("control", copy.deepcopy(stock)))
    runs = {}
    for label, model in arms:
        run = torch.compile(model, mode=None if compiled is True else compiled) if compiled else model
        runs[label] = (run, optimizer if same_model else torch.optim.SGD(model.parameters(), lr=1e-3))
        step_times(*runs[label], x, target, 3)  # warm-up: compile, cuDNN heuristics, Triton JIT
    samples = {label: [] for label in runs}
    cpu = {label: [] for label in runs}
    phases = {label: [] for label in runs}
    order = list(runs)
    if gc_freeze:
        gc.collect()
        gc.freeze()  # the models' objects out of the collector's reach: a full collection is then cheap
    for i in range(rounds * steps):  # one step each in turn (host-bound eager steps drift by several %),
        for label in order[i % len(order):] + order[:i % len(order)]:  # each arm first equally often
            samples[label] += step_times(*runs[label], x, target, 1, cpu[label], phases[label])
    if gc_freeze:
        gc.unfreeze()
    if same_model:
        toggled.set(True)  # the plans below and the per-layer breakdown read the patched model
    graphs = isinstance(compiled, str) and "reduce-overhead" in compiled
    with torch.autocast("cuda", dtype=torch.bfloat16):
        families = [p.family for _, p in convwgrad.layer_plans(patched, x, launch="graph" if graphs else "eager")]
    result = {"model": name, "batch": batch, "layout": layout, "compiled": compiled,
              "stock_ms": statistics.median(samples["stock"]), "patched_ms": statistics.median(samples["patched"]),
              "stock_spread_ms": [min(samples["stock"]), max(samples["stock"])],
              "patched_spread_ms": [min(samples["patched"]), max(samples["patched"])],
              "ratio_of_pairs_median": statistics.median(a / b for a, b in zip(samples["stock"], samples["patched"])),
              "stock_cpu_ms": statistics.median(cpu["stock"]), "patched_cpu_ms": statistics.median(cpu["patched"]),
              "same_model": same_model, "gc_freeze": gc_freeze,
              "host_phases_ms": {label: [statistics.median(p[i] for p in phases[label]) for i in range(3)]
                                 for label in phases},
              "grouped_layers": len(families), "families": {f: families.count(f) for f in sorted(set(families))}}
    for label in samples:  # beside the median: the steps no host interruption reached (session 20's noisy host)
        result[f"{label}_fastest_quarter_ms"] = fastest_quarter_mean(samples[label])
    if with_control:
        result["control_ms"] = statistics.median(samples["control"])
        result["control_ratio"] = result["stock_ms"] / result["control_ms"]
        result["control_cpu_ms"] = statistics.median(cpu["control"])
    if profile:
        result["profile"] = {label: kernel_profile(*runs[label], x, target) for label in ("stock", "patched")}
        if same_model:
            toggled.set(True)
    return result, (stock, patched, x, target)


def fastest_quarter_mean(times):
    """Mean of the fastest quarter of ``times`` (at least one). On a shared host the slow tail of an eager
    step's times is other processes' work: the A/A arm moved 1-6% between runs by the median (H100 host,
    session 20) while the fastest steps of stock and patched RegNetY-016 agreed to 0.1%."""
    fastest = sorted(times)[:max(1, len(times) // 4)]
    return sum(fastest) / len(fastest)


def kernel_profile(model, optimizer, x, target, steps=3):
    """CUDA time per kernel name over ``steps`` steps, and the host time, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(model, optimizer, x, target)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / steps * 1e3
    after = torch.cuda.memory_stats()
    # cudaMalloc / cudaFree the caching allocator made in the profiled steps (each can synchronise)
    allocator = {key: (after.get(key, 0) - before.get(key, 0)) / steps
                 for key in ("num_device_alloc", "num_device_free", "num_alloc_retries")}
    kernels, host_ops = {}, {}
    for event in prof.key_averages():
        if event.self_cpu_time_total:
            host_ops[event.key] = (event.self_cpu_time_total / steps / 1e3, event.count // steps)
        cuda_us = getattr(event, "self_device_time_total", None)
        if cuda_us is None:
            cuda_us = getattr(event, "self_cuda_time_total", 0)
        if cuda_us and event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.key] = (kernels.get(event.key, (0, 0))[0] + cuda_us / steps / 1e3,
                                  kernels.get(event.key, (0, 0))[1] + event.count // steps)
    return {"wall_ms_profiled": wall, "cuda_ms": sum(v[0] for v in kernels.values()), "kernels": kernels,
            "host_ms": sum(v[0] for v in host_ops.values()), "host_ops": host_ops, "allocator": allocator}


# ----------------------------------------------------------------- per-layer breakdown
def capture_layers(model, x, target):
    """(name, module, input as the backward sees it, grad_output as autograd hands it) per grouped layer."""
    captured, handles = {}, []
    for name, module in grouped_convs(model):
        def forward_hook(module, inputs, output, name=name):
            inp = inputs[0]
            if torch.is_autocast_enabled("cuda"):
                inp = inp.to(torch.get_autocast_dtype("cuda"))
            captured[name] = [module, inp.detach(), None]
            output.register_hook(lambda grad, name=name: captured[name].__setitem__(2, grad.detach()))
        handles.append(module.register_forward_hook(forward_hook))
    try:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), target)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return [(name, *captured[name]) for name, _ in grouped_convs(model) if name in captured]


#: Time one way of a layer gets at most (ms): a 31x31 layer in cuDNN takes ~16 ms a call.
LAYER_BUDGET_MS = 60


def _calls_within_budget(fn, most):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once_ms = (time.perf_counter() - start) * 1e3
    return max(1, min(most, int(LAYER_BUDGET_MS / 7 / max(once_ms, 1e-3))))


#: bytes written between two calls of a layer with --cold-l2 (the H200's L2 is 50 MB): a layer timed
#: in a replay loop otherwise finds its operands in L2 when they fit, which a training step does not
L2_FLUSH_BYTES = 256 << 20
_COLD_L2 = False


def _graph_time_us(fn, replays=20):
    """Kernel time per call: ``fn`` captured in a CUDA graph, replayed, median over repeats. With
    --cold-l2 each call follows an L2 flush, and the flush's own time (timed alike) is subtracted."""
    if _COLD_L2:
        scratch = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        flush = functools.partial(scratch.fill_, 1)
        both = _graph_time_us_warm(lambda: (flush(), fn()), replays)
        return both - _graph_time_us_warm(flush, replays)
    return _graph_time_us_warm(fn, replays)


def _graph_time_us_warm(fn, replays=20):
    replays = _calls_within_budget(fn, replays)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(replays):
            fn()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / replays)
    return statistics.median(times)


def _eager_time_us(fn, calls=50):
    """Wall time per call of an eager loop (host and device together), median over repeats."""
    calls = _calls_within_budget(fn, calls)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(times)


def layer_breakdown(patched, x, target):
    rows = []
    for name, module, inp, grad in capture_layers(patched, x, target):
        weight = module.weight.detach().to(inp.dtype)
        rank = inp.dim() - 2
        padding = module.padding if not isinstance(module.padding, str) else None
        if padding is None or module.padding_mode != "zeros":
            continue  # 'same'/'valid' or padded modes: the patched layer pads first; not reproduced here
        args = (list(module.stride), list(padding), list(module.dilation), module.groups)

        def stock():
            return torch.ops.aten.convolution_backward.default(
                grad, inp, weight, None, args[0], args[1], args[2], False, [0] * rank, args[3], [False, True, False])

        def ours():
            return torch.ops.convwgrad.conv_weight.default(inp, grad, list(weight.shape), *args)

        with convwgrad.record_launches() as log:
            ours()
        problem = convwgrad.ConvProblem.from_tensors(inp, weight.shape, grad, *args)
        stock_graph_us = _graph_time_us(stock)
        with convwgrad.record_launches() as graph_log:  # a graph capture plans for graph launches
            ours_graph_us = _graph_time_us(ours)
        rows.append({
            "layer": name, "problem": problem.describe(), "input_layout": layout_of(inp),
            "grad_output_layout": layout_of(grad), "grad_output_strides": list(grad.stride()),
            "family": log[-1].family if log else "?", "kernel": log[-1].kernel_name if log else "?",
            "graph_family": graph_log[-1].family if graph_log else "?",
            "stock_graph_us": stock_graph_us, "convwgrad_graph_us": ours_graph_us,
            "stock_eager_us": _eager_time_us(stock), "convwgrad_eager_us": _eager_time_us(ours),
        })
    return rows


def print_layers(rows):
    print(f"  {'layer':<34} {'problem':<58} {'x/dy layout':<16} {'family (graph)':<27} "
          f"{'stock us':>9} {'ours us':>9} {'ratio':>6} {'eager st':>9} {'eager us':>9}")
    for r in rows:
        layouts = f"{r['input_layout'][:4]}/{r['grad_output_layout'][:4]}"
        families = r["family"] if r.get("graph_family", r["family"]) == r["family"] else f"{r['family']} ({r['graph_family']})"
        print(f"  {r['layer'][:34]:<34} {r['problem'][:58]:<58} {layouts:<16} {families:<27} "
              f"{r['stock_graph_us']:>9.1f} {r['convwgrad_graph_us']:>9.1f} "
              f"{r['stock_graph_us'] / r['convwgrad_graph_us']:>5.2f}x {r['stock_eager_us']:>9.1f} "
              f"{r['convwgrad_eager_us']:>9.1f}")
    stock = sum(r["stock_graph_us"] for r in rows)
    ours = sum(r["convwgrad_graph_us"] for r in rows)
    if rows:
        print(f"  all {len(rows)} grouped layers, kernel time: stock {stock / 1e3:.2f} ms, convwgrad "
              f"{ours / 1e3:.2f} ms ({stock / ours:.2f}x)")


def print_profile(profile, top=8):
    stock, patched = profile["stock"], profile["patched"]
    print(f"  profile per step: stock {stock['cuda_ms']:.2f} ms CUDA, {stock['host_ms']:.2f} ms host ops "
          f"({stock['wall_ms_profiled']:.2f} wall); patched {patched['cuda_ms']:.2f} ms CUDA, "
          f"{patched['host_ms']:.2f} ms host ops ({patched['wall_ms_profiled']:.2f} wall)")
    print(f"  caching allocator per step (cudaMalloc, cudaFree, retries): stock "
          f"{tuple(stock['allocator'].values())}, patched {tuple(patched['allocator'].values())}")
    for what in ("kernels", "host_ops"):
        names = set(stock[what]) | set(patched[what])
        diffs = sorted(names, key=lambda k: -abs(patched[what].get(k, (0, 0))[0] - stock[what].get(k, (0, 0))[0]))
        for k in diffs[:top]:
            s, p = stock[what].get(k, (0, 0)), patched[what].get(k, (0, 0))
            print(f"    {what[:4]} {p[0] - s[0]:+8.3f} ms  stock {s[0]:7.3f} ms x{s[1]:<4} patched {p[0]:7.3f} ms "
                  f"x{p[1]:<4} {k[:80]}")


def register_plugin(entry: str) -> None:
    """Register ``FILE.py:NAME`` (or ``module:NAME``) with convwgrad's plugin manager; plans made
    before it are dropped."""
    import importlib
    import importlib.util

    from convwgrad.provider import get_plugin_manager
    from convwgrad.provider.plan import clear_plan_cache

    path, _, name = entry.rpartition(":")
    if path.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(path)
    get_plugin_manager().register(getattr(module, name), name=entry)
    clear_plan_cache()
    print(f"plugin registered: {entry}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS, help="name:batch,... (timm names, stacks, networks)")
    parser.add_argument("--steps", type=int, default=10, help="steps per round and model")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --steps steps, stock and patched alternated")
    parser.add_argument("--layouts", default="channels_last,contiguous")
    parser.add_argument("--compile", nargs="?", const=True, default=False, metavar="MODE",
                        help="torch.compile both models (inductor); MODE: a torch.compile mode, such as "
                             "reduce-overhead (CUDA graphs)")
    parser.add_argument("--layers", action="store_true", help="per grouped layer: dW time inside the model")
    parser.add_argument("--cold-l2", action="store_true",
                        help="with --layers: flush L2 before each timed call (operands come from HBM, as in a step)")
    parser.add_argument("--profile", action="store_true", help="kernel-time differences from torch.profiler")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--control", action="store_true",
                        help="A/A: time a second stock copy in place of the patched model")
    parser.add_argument("--with-control", action="store_true",
                        help="a second stock copy as a third arm: each row shows its own A/A ratio")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py:NAME",
                        help="register this object as a convwgrad plugin first (an experiment's selector, "
                             "e.g. tools/route_experiments.py:dilated_to_shifted); repeatable")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() before timing (is Python's cyclic collector part of a difference?)")
    parser.add_argument("--same-model", action="store_true",
                        help="one model for every arm, patched or not by class swap before each step")
    args = parser.parse_args(argv)
    for entry in args.plugin:
        register_plugin(entry)
    from convwgrad.provider import native

    # loaded before the first step: otherwise its build or load lands in the background midway through
    # the rounds, and the steps before it run the Python paths (the warm path, EagerConv's backward)
    print(f"native warm path loaded: {native.load() is not None} ({native.status()})")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 autocast, "
          f"{'compiled' if args.compile else 'eager'}; median step ms over {args.rounds} x {args.steps} steps "
          f"each, stock and patched alternated")
    print(f"{'model':<18} {'batch':>5} {'layout':<14} {'stock ms':>9} {'patched ms':>11} {'speedup':>8}  dW plans")
    results = []
    global _MARK_CUDAGRAPH_STEPS, _COLD_L2
    _MARK_CUDAGRAPH_STEPS = isinstance(args.compile, str) and "reduce-overhead" in args.compile
    _COLD_L2 = args.cold_l2
    for entry in args.models.split(","):
        name, _, batch = entry.partition(":")
        batch = int(batch or 32)
        for layout in args.layouts.split(","):
            try:
                result, (stock, patched, x, target) = bench_steps(
                    name, batch, layout, args.steps, args.rounds, args.compile, args.profile, args.control, args.with_control,
                    args.same_model, args.gc_freeze)
            except Exception as exc:  # one model's failure must not cost the others' numbers
                import traceback

                traceback.print_exc()
                print(f"{name:<18} {batch:>5} {layout:<14} FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            plans = ", ".join(f"{n} {f}" for f, n in result["families"].items())
            print(f"{name:<18} {batch:>5} {layout:<14} {result['stock_ms']:>9.2f} {result['patched_ms']:>11.2f} "
                  f"{result['stock_ms'] / result['patched_ms']:>7.3f}x  {plans}"
                  + (f"  (A/A {result['control_ratio']:.3f}x)" if args.with_control else "")
                  + f"  host CPU ms/step stock {result['stock_cpu_ms']:.2f} patched {result['patched_cpu_ms']:.2f}"
                  + (f" control {result['control_cpu_ms']:.2f}" if args.with_control else ""), flush=True)
            print(f"  fastest quarter of the steps: stock {result['stock_fastest_quarter_ms']:.2f} ms, patched "
                  f"{result['patched_fastest_quarter_ms']:.2f} ms, "
                  f"{result['stock_fastest_quarter_ms'] / result['patched_fastest_quarter_ms']:.3f}x"
                  + (f" (A/A {result['stock_fastest_quarter_ms'] / result['control_fastest_quarter_ms']:.3f}x)"
                     if args.with_control else ""))
            print("  host ms forward/backward/optimizer: " + "; ".join(
                f"{label} " + "/".join(f"{v:.2f}" for v in values) for label, values in result["host_phases_ms"].items()))
            if args.profile:
                print_profile(result["profile"])
            if args.layers:
                try:
                    result["layers"] = layer_breakdown(patched, x, target)
                    print_layers(result["layers"])
                except Exception as exc:
                    import traceback

                    traceback.print_exc()
                    print(f"  layers FAILED: {type(exc).__name__}: {exc}", flush=True)
            results.append(result)
            del stock, patched, x, target
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
