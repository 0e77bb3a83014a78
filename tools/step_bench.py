"""Time one training step (forward, backward, SGD) of block stacks, stock torch against
``convwgrad.patch``, side by side in one process (CUDA events, warm-up, median; ABAB order).

Usage (GPU machine, repo root): python tools/step_bench.py [--batch 32] [--steps 20]
    [--layouts channels_last,contiguous] [--stacks mobilenetv2,convnext,replknet] [--compile]
"""

import argparse
import copy
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "frameworks"))

import convwgrad  # noqa: E402
from torch_models import STACKS, build  # noqa: E402


def step_times(model, optimizer, x, target, steps):
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def bench(name, layout, batch, steps, compiled):
    stock, (channels, size) = build(name)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    stock = stock.cuda().to(memory_format=fmt)
    patched = convwgrad.patch(copy.deepcopy(stock))
    x = torch.randn(batch, channels, size, size, device="cuda").contiguous(memory_format=fmt)
    target = torch.randint(0, 10, (batch,), device="cuda")
    runs = {}
    for label, model in (("stock", stock), ("patched", patched)):
        run = torch.compile(model) if compiled else model
        runs[label] = (run, torch.optim.SGD(model.parameters(), lr=1e-3))
        step_times(*runs[label], x, target, 3)  # warm-up: compile, cuDNN autotune, Triton JIT
    samples = {"stock": [], "patched": []}
    for _ in range(2):  # ABAB, so drift hits both
        for label in ("stock", "patched"):
            samples[label] += step_times(*runs[label], x, target, steps)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        families = [p.family for _, p in convwgrad.layer_plans(patched, x)]
    return {label: statistics.median(v) for label, v in samples.items()}, families


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layouts", default="channels_last,contiguous")
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (inductor)")
    args = parser.parse_args(argv)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 autocast, batch {args.batch}, "
          f"{'compiled' if args.compile else 'eager'}; median step ms over {2 * args.steps} steps")
    print(f"{'stack':<12} {'layout':<14} {'stock ms':>9} {'patched ms':>11} {'speedup':>8}  dW plan per grouped layer (aten: stock torch)")
    for name in args.stacks.split(","):
        for layout in args.layouts.split(","):
            medians, families = bench(name, layout, args.batch, args.steps, args.compile)
            print(f"{name:<12} {layout:<14} {medians['stock']:>9.2f} {medians['patched']:>11.2f} "
                  f"{medians['stock'] / medians['patched']:>7.2f}x  {','.join(families)}", flush=True)


if __name__ == "__main__":
    main()
