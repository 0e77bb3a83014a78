"""Issue 11 prototype: the shifted GEMM on mma.sync (tools/shifted_mma.cu), built at run time, checked
against float64 and timed beside cuDNN and convwgrad's planned family (NCHW, the layout whose channel
planes are contiguous).

Why CUDA C++ and not Gluon: the design reads A as a Hankel view of one staged input row (1-element
shifts) and B as a Toeplitz view of a ring of grad_output rows (a row offset that moves every step).
Gluon's shared sub-views must start at a multiple of their length and at a constexpr (notes/GLUON.md),
so neither view is expressible without gather round trips; in C++ each fragment register is one aligned
32-bit shared load from one of two shifted copies of the row.

Usage (GPU machine, repo root):
  python tools/proto_shifted_mma.py --check            # float64 reference, NaN-poisoned partials, odd shapes
  python tools/proto_shifted_mma.py --bench [--json F] # graph replay + eager vs cuDNN (NCHW, CL) and convwgrad
  python tools/proto_shifted_mma.py --compile-only     # nvcc/NVRTC build only (CPU machine with nvcc)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

SOURCE = pathlib.Path(__file__).with_name("shifted_mma.cu")
KERNELS = {"cta": b"shifted_mma_nchw", "warp": b"shifted_mma_nchw_warp"}
WARPS = 4
TARGET_CTAS = 132 * 8   # ~8 CTAs of 4 warps an SM (22 KB shared, 64 registers): chosen before any measurement


def build_cubin(fp16: bool, arch: str = "sm_90", min_blocks: int = 1) -> bytes:
    """The kernels' cubin: NVRTC where cuda-bindings has it, else nvcc."""
    src = SOURCE.read_text()
    defines = (["-DELEM_IS_FP16"] if fp16 else []) + [f"-DWARP_MIN_BLOCKS={min_blocks}"]
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        nvrtc = None
    if nvrtc is not None:
        err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"shifted_mma.cu", 0, [], [])
        opts = [f"--gpu-architecture={arch}".encode(), *[d.encode() for d in defines]]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            print(f"NVRTC failed ({err}), falling back to nvcc: {log.rstrip(bytes(1)).decode(errors='replace')}")
        else:
            _, size = nvrtc.nvrtcGetCUBINSize(prog)
            cubin = b" " * size
            nvrtc.nvrtcGetCUBIN(prog, cubin)
            return cubin
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.cubin")
        subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-O3", "-Xptxas", "-v", *defines, str(SOURCE), "-o", out],
                       check=True)
        return pathlib.Path(out).read_bytes()


class ShiftedMMA:
    """One loaded kernel (bf16 or fp16) and its launch."""

    def __init__(self, fp16: bool, variant: str = "warp", min_blocks: int = 1):
        import torch
        from cuda.bindings import driver

        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context is current
        self.driver = driver
        self.variant = variant
        err, self.module = driver.cuModuleLoadData(build_cubin(fp16, min_blocks=min_blocks))
        assert err == driver.CUresult.CUDA_SUCCESS, err
        err, self.func = driver.cuModuleGetFunction(self.module, KERNELS[variant])
        assert err == driver.CUresult.CUDA_SUCCESS, err

    def splits_for(self, n: int, c: int) -> tuple[int, int]:
        ctas_per_split = c if self.variant == "cta" else math.ceil(c / WARPS)
        splits = max(1, min(n, math.ceil(TARGET_CTAS / ctas_per_split)))
        per = math.ceil(n / splits)
        return math.ceil(n / per), per

    def launch(self, x, dy, part, k: tuple[int, int], pad: tuple[int, int], per: int):
        n, c, h, w = x.shape
        _, _, oh, ow = dy.shape
        splits = part.shape[0]
        import torch
        stream = torch.cuda.current_stream().cuda_stream
        args = ((x.data_ptr(), dy.data_ptr(), part.data_ptr(), n, c, h, w, oh, ow, k[0], k[1], pad[0], pad[1], per),
                (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 11)
        grid_x = c if self.variant == "cta" else math.ceil(c / WARPS)
        (err,) = self.driver.cuLaunchKernel(self.func, grid_x, splits, 1, 128, 1, 1, 0, stream, args, 0)
        assert err == self.driver.CUresult.CUDA_SUCCESS, err

    def __call__(self, x, dy, k, pad, part=None):
        import torch
        n, c, h, w = x.shape
        assert x.is_contiguous() and dy.is_contiguous(), "NCHW-contiguous only"
        assert k[0] <= 32 and k[1] <= 32 and w <= 64 and dy.shape[3] <= 64 and pad[0] < 33
        splits, per = self.splits_for(n, c)
        if part is None:
            part = torch.empty(splits, c, k[0], k[1], device=x.device, dtype=torch.float32)
        self.launch(x, dy, part, k, pad, per)
        return part.sum(0).to(x.dtype).unsqueeze(1), part


def reference(x, dy, k, pad):
    import torch
    return torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.empty(x.shape[1], 1, *k, device=x.device, dtype=torch.float64),
        None, [1, 1], list(pad), [1, 1], False, [0, 0], x.shape[1], [False, True, False])[1]


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


CHECK_SHAPES = [  # (N, C, H, W, k, pad): odd sizes, filters below and at 32, asymmetric-free "same" and valid padding
    (2, 3, 56, 56, 31, 15), (3, 5, 17, 23, 13, 6), (1, 4, 64, 64, 32, 0), (5, 2, 9, 11, 7, 3),
    (2, 7, 14, 14, 27, 13), (4, 3, 40, 41, 31, 0), (1, 2, 1, 1, 3, 1), (3, 3, 20, 20, 5, 2),
]


def check() -> int:
    import torch
    bad = 0
    for fp16, variant in ((False, "cta"), (True, "cta"), (False, "warp"), (True, "warp")):
        kern = ShiftedMMA(fp16, variant)
        dtype = torch.float16 if fp16 else torch.bfloat16
        for (n, c, h, w, k, p) in CHECK_SHAPES:
            g = torch.Generator(device="cuda").manual_seed(n * 1000 + c * 10 + k)
            x = torch.randn(n, c, h, w, device="cuda", generator=g).to(dtype)
            oh, ow = h + 2 * p - k + 1, w + 2 * p - k + 1
            if oh <= 0 or ow <= 0:
                continue
            dy = torch.randn(n, c, oh, ow, device="cuda", generator=g).to(dtype)
            splits, per = kern.splits_for(n, c)
            part = torch.full((splits, c, k, k), float("nan"), device="cuda")
            dw, _ = kern(x, dy, (k, k), (p, p), part)
            again, _ = kern(x, dy, (k, k), (p, p))
            torch.cuda.synchronize()
            ref = reference(x, dy, (k, k), (p, p))
            unwritten = int(torch.isnan(part).sum())
            err = rel(dw.float(), ref)
            ok = unwritten == 0 and err < 1e-2 and torch.equal(dw, again)
            bad += not ok
            print(f"[{'ok' if ok else 'BAD'}] {variant} {dtype} N={n} C={c} {h}x{w} k={k} p={p}: rel_fro {err:.2e}, "
                  f"unwritten {unwritten}, deterministic {torch.equal(dw, again)}", flush=True)
            if (n, c, h, w, k, p) == CHECK_SHAPES[0]:  # the check is not vacuous: ky flipped is rejected
                flipped = rel(dw.flip(2).float(), ref)
                print(f"  negative control, dW with ky flipped: rel_fro {flipped:.2e} ({'rejected' if flipped >= 1e-2 else 'NOT REJECTED'})")
                bad += flipped < 1e-2
    return bad


BENCH_LAYERS = [  # (name, N, C, H, k): RepLKNet-31B's large filters at batch 32, UniRepLKNet's 13x13, ConvNeXt's 7x7
    ("replk31b-56-c128-k31", 32, 128, 56, 31), ("replk31b-28-c256-k29", 32, 256, 28, 29),
    ("replk31b-14-c512-k27", 32, 512, 14, 27), ("replk31b-7-c1024-k13", 32, 1024, 7, 13),
    ("unirep-14-c320-k13", 32, 320, 14, 13), ("slak-56-c96-k31", 16, 96, 56, 31),
    ("convnext-56-c96-k7", 64, 96, 56, 7), ("convnext-14-c384-k7", 64, 384, 14, 7),
]


def bench(json_path, only=None):
    import torch
    sys.path.insert(0, os.path.dirname(__file__))
    from step_bench import _eager_time_us, _graph_time_us
    import convwgrad
    kernels = {"mma_cta": ShiftedMMA(False, "cta"), "mma_warp": ShiftedMMA(False, "warp"),
               "mma_warp_mb5": ShiftedMMA(False, "warp", min_blocks=5)}
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; bf16, NCHW-contiguous inputs; us: graph replay / eager")
    for name, n, c, h, k in BENCH_LAYERS:
        if only and name not in only:
            continue
        p = k // 2
        g = torch.Generator(device="cuda").manual_seed(c + k)
        x = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
        dy = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
        w = torch.empty(c, 1, k, k, device="cuda", dtype=torch.bfloat16)
        xcl, dycl = x.to(memory_format=torch.channels_last), dy.to(memory_format=torch.channels_last)

        def cudnn(x=x, dy=dy):
            return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [p, p], [1, 1], False, [0, 0], c,
                                                       [False, True, False])[1]

        def cudnn_cl():
            return cudnn(xcl, dycl)


        def planned():
            return convwgrad.conv2d_weight(x, w.shape, dy, stride=1, padding=p, groups=c)

        ref = reference(x, dy, (k, k), (p, p))
        ours = {label: (lambda kern=kern: kern(x, dy, (k, k), (p, p))[0]) for label, kern in kernels.items()}
        err = max(rel(fn().float(), ref) for fn in ours.values())
        fam = convwgrad.plan(convwgrad.ConvProblem.build(
            batch=n, groups=c, in_channels=c, out_channels=c, input_size=(h, h), filter_size=(k, k), stride=(1, 1),
            padding=(p, p), dilation=(1, 1), dtype=torch.bfloat16, layout=convwgrad.provider.layout.layout_of(x))).family
        row = dict(layer=name, N=n, C=c, H=h, k=k, err=err, planned_family=fam)
        for label, fn in (("cudnn_nchw", cudnn), ("cudnn_cl", cudnn_cl), ("convwgrad_planned", planned), *ours.items()):
            row[label] = (_graph_time_us(fn), _eager_time_us(fn))
        flops = 2 * n * c * h * h * k * k
        bytes_ = 2 * (x.numel() + dy.numel())
        floor = max(bytes_ / 4.25e12, flops / 700e12) * 1e6
        row["floor_us"] = floor
        rows.append(row)
        best = min(ours, key=lambda label: row[label][0])
        mma = row[best][0]
        print(f"{name:22s} err {err:.1e} floor {floor:6.1f} | " + " | ".join(
            f"{lab} {row[lab][0]:7.1f}/{row[lab][1]:7.1f}" for lab in ("cudnn_nchw", "cudnn_cl", "convwgrad_planned", *ours))
              + f" | best {best}: {row['cudnn_nchw'][0] / mma:5.1f}x cuDNN-NCHW, {row['cudnn_cl'][0] / mma:5.1f}x cuDNN-CL, "
              f"{row['convwgrad_planned'][0] / mma:5.2f}x {fam}, {mma / floor:5.1f}x floor", flush=True)
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(rows, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--only", action="append", help="bench only this layer (repeatable)")
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()
    if a.compile_only:
        for fp16 in (False, True):
            for min_blocks in (1, 5):
                print(f"fp16={fp16} min_blocks={min_blocks}: cubin {len(build_cubin(fp16, min_blocks=min_blocks))} bytes")
        return 0
    bad = check() if a.check else 0
    if a.bench:
        bench(a.json, a.only)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
