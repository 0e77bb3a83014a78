"""The shifted-MMA family's kernel for any strides, this checkout's source beside an older one, in one
process (graph replay and eager us, bf16), with each build's registers: for a change that moved a layer
the wrong way between sessions measured on different machines (session 13: RepLKNet-31B's 27x27 14x14
NCHW layer 77.7 -> 89.0 us after the 16x16 tap tile and the short ring prologue; the old source is git
c52017f's kernels.cu, whose wgrad_shifted_mma_kernel takes the same arguments).

Usage (GPU machine, repo root):
  git show c52017f:convwgrad/plugins/wgrad_shifted_mma/kernels.cu > build/kernels_old.cu
  python tools/mma_old_vs_new.py --old build/kernels_old.cu [--only LAYER ...] [--layouts contiguous]
  # under ncu: --arms old (or new) times that arm alone, so --kernel-name wgrad_shifted_mma_kernel
  # --launch-skip 1 --launch-count 1 profiles that build
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(__file__))

from proto_shifted_mma import BENCH_LAYERS  # noqa: E402  (tools/ is the script's directory)


def _prepare_with_source(launcher, source, problem, spec, target, x, dy):
    """launcher.prepare bound to ``source``'s wgrad_shifted_mma_kernel (the kernel for any strides, tile
    32 x 32 in every old source), the launcher's build caches emptied before and after."""
    saved = launcher.SOURCE, launcher.stage1_kernel_name
    launcher._cubin.cache_clear()
    launcher._function.cache_clear()
    launcher.SOURCE = pathlib.Path(source)
    launcher.stage1_kernel_name = lambda problem, channels=0: "wgrad_shifted_mma_kernel"
    try:
        return launcher.prepare(problem, spec, target, x, dy, None, cooperative_channels=0)
    finally:
        launcher.SOURCE, launcher.stage1_kernel_name = saved
        launcher._cubin.cache_clear()
        launcher._function.cache_clear()


def _registers(launcher, source, name, arch):
    """Registers a thread of kernel ``name`` in ``source``'s NVRTC build."""
    from cuda.bindings import driver

    import torch

    saved = launcher.SOURCE
    launcher._cubin.cache_clear()
    launcher._function.cache_clear()
    launcher.SOURCE = pathlib.Path(source)
    try:
        _, function = launcher._function("bf16", arch, torch.cuda.current_device(), name)
        err, regs = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function)
        return regs
    finally:
        launcher.SOURCE = saved
        launcher._cubin.cache_clear()
        launcher._function.cache_clear()


def bench(old_source, only, layouts, arms):
    import torch

    import convwgrad
    from convwgrad.plugins.wgrad_shifted_mma import launcher
    from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
    from step_bench import _eager_time_us, _graph_time_us

    new_source = launcher.SOURCE
    arch = "".join(map(str, torch.cuda.get_device_capability()))  # the launcher's target.arch spelling
    print(f"{torch.cuda.get_device_name()}; old {old_source} / new {new_source}; us graph replay / eager; "
          f"registers old {_registers(launcher, old_source, 'wgrad_shifted_mma_kernel', arch)}, new 32x32 "
          f"{_registers(launcher, new_source, 'wgrad_shifted_mma_kernel', arch)}, new 16x16 "
          f"{_registers(launcher, new_source, 'wgrad_shifted_mma_t16_kernel', arch)}", flush=True)
    for layout in layouts:
        for name, n, c, h, k in BENCH_LAYERS:
            if only and name not in only:
                continue
            problem = ConvProblem.build(batch=n, groups=c, in_channels=c, input_size=(h, h), filter_size=k,
                                        padding=k // 2, dtype="bf16", layout=layout)
            g = torch.Generator(device="cuda").manual_seed(c + k)
            x = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
            dy = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
            if layout == "channels_last":
                x, dy = x.to(memory_format=torch.channels_last), dy.to(memory_format=torch.channels_last)
            plan = convwgrad.plan(problem, "cuda", family="wgrad_shifted_mma")
            workspace = torch.empty(plan.workspace_nbytes, dtype=torch.uint8, device="cuda")
            bound = {"old": _prepare_with_source(launcher, old_source, problem, plan.spec, plan.target, x, dy),
                     "new": launcher.prepare(problem, plan.spec, plan.target, x, dy, None, cooperative_channels=0)}
            ref = reference_weight_grad(problem, x, dy, device=x.device) if n * c * h * h <= 2 ** 24 else None
            cells = []
            for label in arms:
                fn = lambda b=bound[label]: b.run(x, dy, None, workspace)  # noqa: E731
                err = relative_error(fn(), ref) if ref is not None else float("nan")
                cells.append(f"{label} ({bound[label].kernels[0]}) {_graph_time_us(fn):7.1f}/{_eager_time_us(fn):7.1f}"
                             f" err {err:.1e}")
            print(f"{layout[:4]} {name:24s} " + " | ".join(cells), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the older kernels.cu")
    ap.add_argument("--only", action="append", help="this layer only (repeatable)")
    ap.add_argument("--layouts", nargs="+", default=["contiguous"], choices=["contiguous", "channels_last"])
    ap.add_argument("--arms", nargs="+", default=["old", "new"], choices=["old", "new"])
    a = ap.parse_args()
    bench(a.old, a.only, tuple(a.layouts), tuple(a.arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
