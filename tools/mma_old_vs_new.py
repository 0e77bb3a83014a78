"""The shifted-MMA family's kernel for any strides, this checkout's source beside an older one, in one
process (graph replay and eager us, bf16), with each build's registers: for a change that moved a layer
the wrong way between sessions measured on different machines (session 13: RepLKNet-31B's 27x27 14x14
NCHW layer 77.7 -> 89.0 us after the 16x16 tap tile and the short ring prologue; the old source is git
c52017f's kernels.cu, whose wgrad_shifted_mma_kernel takes the same arguments).

Usage (GPU machine, repo root):
  git show c52017f:convwgrad/plugins/wgrad_shifted_mma/kernels.cu > build/kernels_old.cu
  python tools/mma_old_vs_new.py --old build/kernels_old.cu [--only LAYER ...] [--layouts contiguous]
  # stage 1 alone, each source's kernel launched with the arguments that source declares (session 14's
  # kernels take the dilation too); under ncu: --arms old (or new) times that arm alone, so --kernel-name
  # regex:wgrad_shifted_mma --launch-skip 1 --launch-count 1 profiles that build
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(__file__))

from proto_shifted_mma import BENCH_LAYERS  # noqa: E402  (tools/ is the script's directory)


def _build(source: pathlib.Path, name: str, arch: str):
    """Kernel ``name`` of ``source`` (bf16) built by the launcher's NVRTC build and loaded: (function, registers)."""
    from cuda.bindings import driver

    from convwgrad.plugins.wgrad_shifted_mma import launcher

    err, module = driver.cuModuleLoadData(launcher.build_cubin(source.read_bytes(), "bf16", arch, source.name))
    err, function = driver.cuModuleGetFunction(module, name.encode())
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuModuleGetFunction({name}) of {source}: {err}")
    _, regs = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function)
    _FUNCTIONS.append((module, function))
    return function, regs


_FUNCTIONS = []  # loaded modules stay referenced


def _stage1(source, name, problem, spec, x, dy, partials, arch):
    """A stage-1 launch of ``source``'s kernel ``name`` writing fp32 partials [split, C, KH, KW]: the
    arguments as that source declares them (sources before session 14 take no dilation)."""
    import ctypes

    import torch
    from cuda.bindings import driver

    from convwgrad.plugins.wgrad_shifted_mma import launcher

    function, regs = _build(pathlib.Path(source), name, arch)
    takes_dilation = b"int DH, int DW" in pathlib.Path(source).read_bytes()
    (fy, fx), (h, w), (oh, ow) = problem.filter_size, problem.input_size, problem.output_size
    ints = (problem.batch, problem.out_channels, h, w, oh, ow, fy, fx, problem.padding[0][0], problem.padding[1][0],
            *(problem.dilation if takes_dilation else ()), launcher.images_per_split(problem, spec))
    strides = (*x.stride(), *dy.stride())
    types = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * len(ints) + (ctypes.c_longlong,) * 8
    grid = launcher.grids(problem, spec)[0]

    def run():
        stream = torch.cuda.current_stream().cuda_stream
        args = ((x.data_ptr(), dy.data_ptr(), partials.data_ptr(), *ints, *strides), types)
        (err,) = driver.cuLaunchKernel(function, *grid, 32 * launcher.WARPS, 1, 1, 0, stream, args, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{name}: cuLaunchKernel: {err}")
        return partials

    return run, regs


def bench(old_source, only, layouts, arms, extra_sources=()):
    import torch

    import convwgrad
    from convwgrad.plugins.wgrad_shifted_mma import launcher
    from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
    from step_bench import _eager_time_us, _graph_time_us

    arch = "".join(map(str, torch.cuda.get_device_capability()))  # the launcher's target.arch spelling
    sources = {"old": old_source, "new": str(launcher.SOURCE), **dict(extra_sources)}
    arms = arms or tuple(sources)
    print(f"{torch.cuda.get_device_name()}; stage 1 alone (the any-strides kernel), old {old_source} / new "
          f"{launcher.SOURCE}; us graph replay / eager; registers a thread", flush=True)
    for layout in layouts:
        for name, n, c, h, k in BENCH_LAYERS[:8]:
            if only and name not in only:
                continue
            problem = ConvProblem.build(batch=n, groups=c, in_channels=c, input_size=(h, h), filter_size=k,
                                        padding=k // 2, dtype="bf16", layout=layout)
            g = torch.Generator(device="cuda").manual_seed(c + k)
            x = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
            dy = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
            if layout == "channels_last":
                x, dy = x.to(memory_format=torch.channels_last), dy.to(memory_format=torch.channels_last)
            spec = convwgrad.plan(problem, "cuda", family="wgrad_shifted_mma").spec
            partials = torch.empty(spec.split_k, c, k, k, device="cuda", dtype=torch.float32)
            ref = reference_weight_grad(problem, x, dy, device=x.device) if n * c * h * h <= 2 ** 24 else None
            cells = []
            for label in arms:  # the old source has one any-strides kernel (32 x 32); the new one picks by filter
                kernel = "wgrad_shifted_mma_kernel" if label == "old" else launcher.stage1_kernel_name(problem)
                if label not in ("old", "new") and kernel not in pathlib.Path(sources[label]).read_text():
                    continue
                run, regs = _stage1(sources[label], kernel, problem, spec, x, dy, partials, arch)
                partials.fill_(float("nan"))
                dw = run().sum(0).view(problem.weight_size).to(torch.bfloat16)
                err = relative_error(dw, ref) if ref is not None else float("nan")
                cells.append(f"{label} {kernel} ({regs} regs) {_graph_time_us(run):7.1f}/{_eager_time_us(run):7.1f}"
                             f" err {err:.1e}")
            print(f"{layout[:4]} {name:24s} " + " | ".join(cells), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the older kernels.cu")
    ap.add_argument("--only", action="append", help="this layer only (repeatable)")
    ap.add_argument("--layouts", nargs="+", default=["contiguous"], choices=["contiguous", "channels_last"])
    ap.add_argument("--source", action="append", default=[], metavar="LABEL=PATH",
                    help="another kernels.cu (a variant of this one) timed as arm LABEL")
    ap.add_argument("--arms", nargs="+", help="these arms only (default: old, new and every --source)")
    a = ap.parse_args()
    extra = [tuple(item.split("=", 1)) for item in a.source]
    bench(a.old, a.only, tuple(a.layouts), tuple(a.arms or ()), extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
