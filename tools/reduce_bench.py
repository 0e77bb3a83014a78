"""The shared stage 2 (sum of split-K partials) beside its predecessor and torch.sum, on the dW sizes
and split degrees the families plan for real layers (CUDA-graph replay, same process).

    python tools/reduce_bench.py [--json FILE]

The predecessor, kept here as the baseline: one program per 1024 dW elements looping over the
splits one row at a time (session 7's stage 2).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import triton
import triton.language as tl

from convwgrad.bench import _time_ms
from convwgrad.provider import ConvProblem
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks.jit import _splitk_reduce_kernel
from convwgrad.provider.spec import KernelSpec


@triton.jit
def _sequential_reduce_kernel(WS, OUT, TOTAL, SPLIT_K, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < TOTAL
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    partials = WS + offs
    for _ in range(0, SPLIT_K):
        acc += tl.load(partials, mask=mask, other=0.0)
        partials += TOTAL
    tl.store(OUT + offs, acc.to(OUT.dtype.element_ty), mask=mask)


# (label, channels, filter, split_k): splits as the staged / shifted / direct families plan them
CASES = [
    ("convnext-56-c96-k7 staged", 96, 7, 598),
    ("convnext-28-c192-k7 staged", 192, 7, 256),
    ("convnext-14-c384-k7 staged", 384, 7, 128),
    ("convnext-7-c768-k7 staged", 768, 7, 64),
    ("mbv2-112-c32-k3 staged", 32, 3, 1024),
    ("mbv2-56-c144-k3 staged", 144, 3, 448),
    ("mbv2-7-c960-k3 staged", 960, 3, 64),
    ("replknet-31-c1024", 1024, 31, 16),
    ("unirep-13-c640", 640, 13, 64),
]


def depthwise(channels, k):
    return ConvProblem(batch=1, groups=channels, in_channels=channels, out_channels=channels, input_size=(k, k),
                       filter_size=(k, k), padding=((k // 2, k // 2),) * 2, stride=(1, 1), dilation=(1, 1),
                       dtype="bf16", layout="channels_last")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"{'case':28s} {'dW':>8s} {'split':>5s} {'MB':>6s}  {'sequential':>10s} {'tiled':>8s} {'torch.sum':>9s}"
          f"  block x rows  tiled GB/s")
    for label, channels, k, split_k in CASES:
        problem = depthwise(channels, k)
        total = math.prod(problem.weight_size)
        partials = torch.randn(split_k, total, device="cuda", dtype=torch.float32)
        out = torch.empty(problem.weight_size, device="cuda", dtype=torch.bfloat16)
        spec = KernelSpec(family="wgrad_splitk", dtype="bf16", split_k=split_k)
        stage2 = shared.stage2_args(problem, spec, partials, out)
        constexprs = {n: v.value for n, v in stage2 if isinstance(v, shared.Constexpr)}
        values = [v for _, v in stage2 if not isinstance(v, shared.Constexpr)]
        grid = shared.reduce_grid(problem)
        tiled = lambda: _splitk_reduce_kernel[grid](*values, **constexprs, num_warps=shared.REDUCE_WARPS)  # noqa: E731
        old = lambda: _sequential_reduce_kernel[(triton.cdiv(total, 1024),)](partials, out, total, split_k,  # noqa: E731
                                                                           BLOCK=1024, num_warps=8)
        summed = lambda: torch.sum(partials, 0, out=out.view(-1).float())  # noqa: E731
        expected = partials.double().sum(0).reshape(out.shape)
        tiled()
        err = ((out.double() - expected).norm() / expected.norm()).item()
        times = {name: _time_ms(fn, on_gpu=True, warmup_ms=25, rep_ms=100) * 1e3
                 for name, fn in (("sequential", old), ("tiled", tiled), ("torch_sum", summed))}
        mb = split_k * total * 4 / 1e6
        row = dict(case=label, total=total, split_k=split_k, mb=mb, err=err, block=constexprs["BLOCK"],
                   rows=constexprs["SPLIT_BLOCK"], **{f"{k}_us": v for k, v in times.items()})
        rows.append(row)
        print(f"{label:28s} {total:8d} {split_k:5d} {mb:6.2f}  {times['sequential']:8.1f}us {times['tiled']:6.1f}us "
              f"{times['torch_sum']:7.1f}us  {row['block']:5d} x {row['rows']:4d}  {mb * 1e3 / times['tiled']:8.0f}"
              f"  err {err:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
