"""Host time of each grouped layer's forward inside a real model, stock against patched (GPU
machine): forward pre/post hooks read the host clock around every grouped conv module while
the model trains (one model, patched or not by class swap, alternated step by step). Then the
same pure-Python workload timed on the main thread and inside an autograd backward (the
engine's device thread), to see whether Python code costs more there.

Usage: python tools/module_host.py [--model unireplknet_t:32] [--layout channels_last] [--steps 12]
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))

import convwgrad  # noqa: E402
from layer_host import print_profile, profile_patched_backward  # noqa: E402
from step_bench import _Toggled, make_model, step  # noqa: E402


def workload():
    """~20 us of plain Python: dict and tuple traffic like a launcher's."""
    d = {}
    for i in range(200):
        d[(i, "k")] = (i, i + 1)
    return len(d)


class _Probe(torch.autograd.Function):
    samples = []

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        t = time.perf_counter()
        workload()
        _Probe.samples.append((time.perf_counter() - t) * 1e6)
        return g


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="unireplknet_t:32")
    parser.add_argument("--layout", default="channels_last")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    name, _, batch = args.model.partition(":")
    model, shape, classes = make_model(name)
    fmt = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
    model = model.cuda().to(memory_format=fmt)
    x = torch.randn(int(batch), *shape, device="cuda").contiguous(memory_format=fmt)
    target = torch.randint(0, classes, (int(batch),), device="cuda")
    toggled = _Toggled(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    names = {m: n for n, m in model.named_modules()}
    times = {}
    seen = {}
    started = {}

    def pre(module, inputs):
        started[module] = time.perf_counter()
        if module not in seen:
            t = inputs[0]
            seen[module] = (t.dtype, tuple(t.shape), t.stride(), t.requires_grad)

    def post(module, inputs, output):
        times.setdefault((module, type(module).__module__.startswith("convwgrad")), []).append(
            (time.perf_counter() - started[module]) * 1e6)

    for m, _, _ in toggled.modules:
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)
    arms = {"stock": toggled.arm(model, False), "patched": toggled.arm(model, True)}
    for label, run in arms.items():
        for _ in range(3):
            step(run, optimizer, x, target)
    toggled.set(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        by_name = {n: p.family for n, p in convwgrad.layer_plans(model, x)}
    plans = {m: by_name.get(names[m], "?") for m, _, _ in toggled.modules}
    times.clear()
    for _ in range(args.steps):
        for run in arms.values():
            torch.cuda.synchronize()
            step(run, optimizer, x, target)
    torch.cuda.synchronize()
    rows = []
    for m, _, _ in toggled.modules:
        s = statistics.median(times[(m, False)])
        p = statistics.median(times[(m, True)])
        rows.append((p - s, names[m], plans.get(m, "?"), s, p, seen[m]))
    total_s = sum(r[3] for r in rows)
    total_p = sum(r[4] for r in rows)
    print(f"{args.model} {args.layout}: grouped layers' forward host us a step, stock {total_s:.0f} patched {total_p:.0f}")
    by_family = {}
    for r in rows:
        by_family.setdefault(r[2], []).append(r[0])
    for family, diffs in by_family.items():
        print(f"  {family}: {len(diffs)} layers, patched - stock {sum(diffs):+.0f} us a step "
              f"(median {statistics.median(diffs):+.1f} a layer)")
    for r in sorted(rows, key=lambda r: -r[0])[:8]:
        print(f"  {r[0]:+7.1f} us  stock {r[3]:6.1f} patched {r[4]:6.1f}  {r[2]:<14} {r[1]}  input {r[5]}")
    # the patched layers' backward, profiled where it runs (autograd's device thread)
    print_profile(*profile_patched_backward(lambda: step(arms["patched"], optimizer, x, target), 4),
                  "patched backward in the model, cProfile", top=16)
    # Python on the main thread and in the engine's device thread
    main_samples = []
    for _ in range(300):
        t = time.perf_counter()
        workload()
        main_samples.append((time.perf_counter() - t) * 1e6)
    leaf = torch.randn(64, device="cuda", requires_grad=True)
    for _ in range(300):
        _Probe.apply(leaf * 2).sum().backward()
    torch.cuda.synchronize()
    print(f"  the same Python workload: main thread {statistics.median(main_samples):.1f} us, "
          f"inside a backward {statistics.median(_Probe.samples[20:]):.1f} us (medians of 300)")


if __name__ == "__main__":
    main()
