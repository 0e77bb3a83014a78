"""Time kernel-family variants of one layer against cuDNN, side by side in one process (GPU machine).

For each shape and layout: cuDNN (``aten.convolution_backward`` with a real weight in the input's
layout, as autograd calls it; on NCHW input that is torch's default path), the planned config, the
merged family, and every labelled variant of each ``--variants`` module (``variants(problem) ->
[(label, plan pins)]``). Each config is checked first against the float64 reference on fresh random
inputs, into a NaN-poisoned dW (every element must be written); then timed by CUDA-graph replay
(kernel time) and as an eager loop (what a user sees). The floor is max(bytes / 4.25 TB/s,
flops / 694 TFLOP/s), bytes = input + grad_output + dW once.

Usage (GPU machine, repo root):
  python tools/family_bench.py --variants tools/variants_shifted.py:variants \\
      --shape N=32,C=128,H=56,W=56,k=31,g=128 [--shape ...] [--csv FILE] \\
      [--layouts channels_last,contiguous] [--json OUT.json]
"""

import argparse
import importlib.util
import json
import math
import sys
import time

import torch

import convwgrad
from convwgrad.bench import make_inputs, tolerance
from convwgrad.provider.layout import TORCH_DTYPES
from convwgrad.provider.reference import reference_weight_grad, relative_error
from convwgrad.shapes import parse_shape, read_csv
from step_bench import _eager_time_us, _graph_time_us  # noqa: E402  (tools/ is the script's directory)

BANDWIDTH = 4.25e12  # H200 HBM3e, bytes/s
MATRIX_FLOPS = 694e12  # H200 dense bf16 at the clocks seen, flop/s (CALIBRATION.md)


def floor_us(problem) -> float:
    size = TORCH_DTYPES[problem.dtype].itemsize
    moved = (math.prod(problem.input_shape) + math.prod(problem.grad_output_shape)
             + math.prod(problem.weight_size)) * size
    return max(moved / BANDWIDTH, problem.flops / MATRIX_FLOPS) * 1e6


def load_variants(spec: str):
    path, _, attr = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location(f"variants_{len(sys.modules)}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, attr or "variants")


def cudnn_call(problem, x, dy):
    weight = torch.empty(problem.weight_size, dtype=x.dtype, device=x.device)
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        weight = weight.contiguous(memory_format=torch.channels_last)
    symmetric = problem.symmetric_padding
    if symmetric is None:
        return None
    args = (list(problem.stride), list(symmetric), list(problem.dilation), False, [0] * problem.spatial_dims,
            problem.groups, [False, True, False])
    return lambda: torch.ops.aten.convolution_backward.default(dy, x, weight, None, *args)[1]


def configs(problem, variant_fns):
    """(label, plan or the reason there is none) for the baselines and every variant."""
    out = []
    pins = [("planned", {}), ("merged", {"family": "wgrad_merged"})]
    for fn in variant_fns:
        pins += fn(problem)
    for label, pin in pins:
        try:
            out.append((label, convwgrad.plan(problem, **pin)))
        except ValueError as exc:
            out.append((label, f"refused: {str(exc).splitlines()[0][:160]}"))
    return out


def timings(fn, device):
    """(graph replay us, eager us); on a CPU (a dry run of this script) one call's wall time twice."""
    if device == "cuda":
        return _graph_time_us(fn), _eager_time_us(fn)
    start = time.perf_counter()
    fn()
    once = (time.perf_counter() - start) * 1e6
    return once, once


def measure(label, problem, variant_fns, device):
    x, dy = make_inputs(problem, device)
    reference = reference_weight_grad(problem, x, dy, device=device)
    floor = floor_us(problem)
    rows = []
    cudnn = cudnn_call(problem, x, dy)
    if cudnn is not None:
        err = relative_error(cudnn(), reference)
        graph_us, eager_us = timings(cudnn, device)
        rows.append({"config": "cudnn", "family": "aten", "kernel": "aten.convolution_backward", "error": err,
                     "graph_us": graph_us, "eager_us": eager_us})
    for name, chosen in configs(problem, variant_fns):
        if isinstance(chosen, str):
            rows.append({"config": name, "refused": chosen})
            continue
        try:
            out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device=device)
            with convwgrad.record_launches() as log:
                convwgrad.dispatch_conv_grouped(problem, x, dy, plan=chosen, out=out)
            if device == "cuda":
                torch.cuda.synchronize()
            unwritten = int(torch.isnan(out).sum())
            err = relative_error(out, reference)
            ran = log[-1].family if log else "?"
            row = {"config": name, "family": chosen.family, "ran": ran, "kernel": chosen.kernel_name,
                   "split_k": chosen.split_k, "error": err, "unwritten": unwritten}
            if unwritten or not err <= tolerance(chosen.spec) or ran != chosen.family:
                row["failed"] = True
            else:
                fn = lambda: convwgrad.dispatch_conv_grouped(problem, x, dy, plan=chosen)  # noqa: E731
                row["graph_us"], row["eager_us"] = timings(fn, device)
        except Exception as exc:  # one config's failure must not cost the others' numbers
            row = {"config": name, "failed": True, "exception": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
    return {"shape": label, "problem": problem.describe(), "layout": problem.layout, "floor_us": floor,
            "rows": rows}


def print_result(result):
    rows = result["rows"]
    base = next((r for r in rows if r["config"] == "cudnn" and "graph_us" in r), None)
    print(f"\n{result['shape']} [{result['layout']}]  floor {result['floor_us']:.1f} us", flush=True)
    for r in rows:
        if "refused" in r:
            print(f"  {r['config']:<34} {r['refused'][:120]}")
            continue
        if r.get("failed"):
            print(f"  {r['config']:<34} FAILED error={r.get('error')} unwritten={r.get('unwritten')} "
                  f"ran={r.get('ran')} {r.get('exception', '')}")
            continue
        vs = f"{base['graph_us'] / r['graph_us']:6.2f}x cuDNN" if base else ""
        eager_vs = f"{base['eager_us'] / r['eager_us']:6.2f}x" if base else ""
        print(f"  {r['config']:<34} graph {r['graph_us']:9.1f} us {vs}  eager {r['eager_us']:9.1f} us "
              f"{eager_vs}  {r['graph_us'] / result['floor_us']:6.1f}x floor  err {r['error']:.1e}  "
              f"{r.get('kernel', '')} spk={r.get('split_k', '-')}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", action="append", default=[], help="FILE.py[:ATTR] giving variants(problem)")
    parser.add_argument("--shape", action="append", default=[])
    parser.add_argument("--csv")
    parser.add_argument("--layouts", default="channels_last,contiguous")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting new shapes after this long")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run through the interpreter (tiny shapes)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    variant_fns = [load_variants(spec) for spec in args.variants]
    shapes = []
    for layout in args.layouts.split(","):
        shapes += [parse_shape(text, dtype=args.dtype, layout=layout) for text in args.shape]
        if args.csv:
            shapes += read_csv(args.csv, dtype=args.dtype, layout=layout)
    where = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"{where}, torch {torch.__version__}; {len(shapes)} shape-layouts", flush=True)
    start, results = time.perf_counter(), []
    for label, problem in shapes:
        if time.perf_counter() - start > args.budget_s:
            print(f"budget spent: {label} [{problem.layout}] and later shapes skipped", flush=True)
            continue
        result = measure(label, problem, variant_fns, args.device)
        print_result(result)
        results.append(result)
        if args.json:  # after every shape: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
