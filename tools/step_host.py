"""Where a patched model's step spends host time that the stock model's does not.

For each model: a stock copy, a second stock copy (the A/A control) and a patched copy, warmed
up; then, per copy, the host time of a step (perf_counter around forward + backward + SGD, the
GPU synchronised before and after, so queue back-pressure does not hide host work: at a small
batch the GPU is idle most of the step) and a cProfile of the same steps. The profile's
functions are listed by own-time difference patched - stock, so the extra work shows by name.

Usage (GPU machine, repo root):
    python tools/step_host.py --models efficientnet_b0:8,convnext_tiny:8 [--layout channels_last]
        [--steps 30] [--top 25]
"""

import argparse
import copy
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import convwgrad  # noqa: E402
from step_bench import make_model, step  # noqa: E402


def host_times(model, optimizer, x, target, steps, clock=time.perf_counter):
    """Host ms per step (the GPU drained before each step; the final sync not counted), by
    ``clock``: wall time, or ``time.thread_time`` (this thread's CPU time: blind to the
    scheduler's noise and to the autograd engine thread, which runs the backward)."""
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = clock()
        step(model, optimizer, x, target)
        times.append((clock() - start) * 1e3)
    torch.cuda.synchronize()
    return times


def own_times(model, optimizer, x, target, steps):
    """{function: own seconds per step} from cProfile over ``steps`` steps."""
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step(model, optimizer, x, target)
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats
    return {f"{os.path.basename(k[0])}:{k[1]}({k[2]})": (v[2] / steps, v[1] / steps) for k, v in stats.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="efficientnet_b0:8,convnext_tiny:8")
    parser.add_argument("--layout", default="channels_last")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    fmt = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layout}, bf16 autocast, eager")
    for item in args.models.split(","):
        name, batch = item.split(":")
        stock, shape, classes = make_model(name)
        stock = stock.cuda().to(memory_format=fmt)
        copies = {"stock": stock, "control": copy.deepcopy(stock), "patched": convwgrad.patch(copy.deepcopy(stock))}
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(int(batch), *shape, device="cuda", generator=g).contiguous(memory_format=fmt)
        target = torch.randint(0, classes, (int(batch),), device="cuda", generator=g)
        runs = {k: (m, torch.optim.SGD(m.parameters(), lr=1e-3)) for k, m in copies.items()}
        for run in runs.values():
            host_times(*run, x, target, 3)
        print()
        for clock_name, clock in (("wall", time.perf_counter), ("main-thread CPU", time.thread_time)):
            samples = {k: [] for k in runs}
            for i in range(args.steps):
                order = list(runs) if i % 2 else list(reversed(runs))
                for k in order:
                    samples[k] += host_times(*runs[k], x, target, 1, clock)
            med = {k: statistics.median(v) for k, v in samples.items()}
            print(f"{name} batch {batch}: host ms per step by {clock_name} (median of {args.steps}): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
                  + f"; patched - stock {1e3 * (med['patched'] - med['stock']):+.0f} us, control - stock "
                  f"{1e3 * (med['control'] - med['stock']):+.0f} us")
        profiles = {k: own_times(*runs[k], x, target, 10) for k in ("stock", "patched")}
        keys = set(profiles["stock"]) | set(profiles["patched"])
        diff = sorted(keys, key=lambda k: -(profiles["patched"].get(k, (0, 0))[0] - profiles["stock"].get(k, (0, 0))[0]))
        print(f"  own time per step, patched - stock (cProfile; top {args.top}):")
        for k in diff[:args.top]:
            p, s = profiles["patched"].get(k, (0, 0)), profiles["stock"].get(k, (0, 0))
            print(f"  {1e6 * (p[0] - s[0]):+9.1f} us  calls {s[1]:>6.0f} -> {p[1]:>6.0f}  {k}")
        total = {k: sum(v[0] for v in prof.values()) for k, prof in profiles.items()}
        print(f"  profiled own time per step: stock {1e3 * total['stock']:.2f} ms, patched {1e3 * total['patched']:.2f} ms")


if __name__ == "__main__":
    main()
