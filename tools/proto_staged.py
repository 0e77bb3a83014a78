"""Prototype of the next small-filter direct kernel for issue 10: input rows staged in a shared-memory
ring by asynchronous copies (Gluon), instead of held in registers (tools/proto_rolling.py).

Why (notes/PERF.md, session 7): the rolling-window kernel is latency-bound at the occupancy its
registers allow (0.65 instructions issued a cycle, 2 of 6.6 cycles between a warp's instructions
waiting on global loads), ptxas sinks any source-level prefetch to the end of the loop body, and
plain Triton does not pipeline loads that do not feed a dot (no ``cp.async`` with ``num_stages``).
Here a program (NW warps, one channel a thread, CB = 32 * NW channels) owns a strip of BW output
columns of one image and walks down a chunk of its output rows. The K input rows a step needs and
its grad_output row sit in shared-memory rings filled by ``cp.async`` D steps ahead; a step reads
its K x (BW + K - 1) inputs and BW grad_output values from shared memory (a warp reads 64
contiguous bytes: no bank conflict) and runs K * K * BW FMAs into K * K fp32 accumulators a
thread. Padding and tails are zero-filled by the masked copies, so the compute has no mask at all,
and no input row is held in registers from one step to the next.

Square filters, stride 1 or 2, undilated, channels_last, depthwise; bf16/fp16/fp32. One fp32 partial a
program ([split, C, K, K]), summed by torch afterwards. Since session 7 the kernel is the library's
(``convwgrad/plugins/wgrad_staged/kernels.py``, the opt-in family ``wgrad_staged``); this tool keeps
the bench against cuDNN, the float64 checks and the configs the family's Tile cannot express (row
chunks that are not powers of two, programs a SM). Gluon has no interpreter: correctness is checked
on the GPU (``--check``, against float64, into NaN-poisoned partials) before any timing, and
``--offline`` compiles for sm_90 on a CPU.

Usage:
  python tools/proto_staged.py --offline                 # CPU: registers, spills, SASS of the loop
  python tools/proto_staged.py --check --bench [--json F] # GPU: float64 check, then beside cuDNN
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import triton

#: the prototype's dtype names -> the family's (its kernel is the library's, since session 7:
#: convwgrad/plugins/wgrad_staged/kernels.py; this tool keeps the bench, the checks and configs
#: the family's Tile cannot express: row chunks that are not powers of two, programs a SM)
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def staged_kernel(k, bw, nw, depth, st=1, dtype="bfloat16"):
    from convwgrad.plugins.wgrad_staged.kernels import staged_kernel as family_kernel

    return family_kernel(k, k, st, bw, nw, depth, DTYPES[dtype])


def plan(x_shape, k, pad, *, bw, nw=1, depth=2, row_chunk=None, per_sm=16, sms=132, stride=1):
    n, c, h, w = x_shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    strips = triton.cdiv(ow, bw)
    cblocks = triton.cdiv(c, 32 * nw)
    target = sms * per_sm
    if row_chunk is None:
        wanted = triton.cdiv(target, cblocks * n * strips)
        row_chunk = max(min(oh, 2 * k), triton.cdiv(oh, wanted))
    chunks = triton.cdiv(oh, row_chunk)
    units = n * chunks * strips
    split = max(1, min(units, triton.cdiv(target, cblocks)))
    per = triton.cdiv(units, split)
    split = triton.cdiv(units, per)
    return dict(oh=oh, ow=ow, strips=strips, row_chunk=row_chunk, chunks=chunks, units=units, split=split, per=per,
                bw=bw, nw=nw, depth=depth, cblocks=cblocks, per_sm=per_sm, stride=stride)


def unsupported(x, dy, k, pad, stride) -> list[str]:
    """Why the prototype cannot run these operands ([] when it can), each naming the field."""
    import torch

    names = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
    reasons = []
    if x.dim() != 4 or x.dtype not in names or dy.dtype != x.dtype:
        return [f"input {tuple(x.shape)} {x.dtype} / grad_output {dy.dtype}: 2-D bf16/fp16/fp32, one dtype"]
    c = x.shape[1]
    oh, ow = (x.shape[2] + 2 * pad - k) // stride + 1, (x.shape[3] + 2 * pad - k) // stride + 1
    if tuple(dy.shape) != (x.shape[0], c, oh, ow):
        reasons.append(f"grad_output shape {tuple(dy.shape)}: expected {(x.shape[0], c, oh, ow)}")
    for name, t in (("input", x), ("grad_output", dy)):
        if t.stride(1) != 1 or t.stride(3) != c:
            reasons.append(f"{name} strides {t.stride()}: channels_last with dense channels only")
        elif t.stride(3) * t.element_size() % 16 or t.stride(0) % 16 or t.stride(2) % 16:
            reasons.append(f"{name} strides {t.stride()}: 16-byte copies need the column stride a multiple of 16 "
                           f"bytes and the row and image strides of 16 elements (what Triton specialises on)")
        if t.data_ptr() % 16:
            reasons.append(f"{name} data pointer not 16-byte aligned")
    return reasons


def run(x, dy, k, pad, cfg, out=None):
    import torch

    n, c, h, w = x.shape
    reasons = unsupported(x, dy, k, pad, cfg["stride"])
    if reasons:
        raise ValueError("proto_staged: " + "; ".join(reasons))
    if out is None:
        out = torch.empty((cfg["split"], c, k, k), device=x.device, dtype=torch.float32)
    dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[x.dtype]
    kern = staged_kernel(k, cfg["bw"], cfg["nw"], cfg["depth"], cfg["stride"], dtype)
    kern[(cfg["cblocks"], cfg["split"])](
        x, dy, out, h, w, cfg["oh"], cfg["ow"], pad, pad, c, cfg["row_chunk"], cfg["chunks"], cfg["strips"],
        cfg["units"], cfg["per"], x.stride(0), x.stride(2), x.stride(3), dy.stride(0), dy.stride(2), dy.stride(3),
        *out.stride(), num_warps=cfg["nw"])
    return out


def reference(x, dy, k, pad, stride=1):
    import torch

    return torch.nn.grad.conv2d_weight(x.double(), (x.shape[1], 1, k, k), dy.double(), stride=stride, padding=pad,
                                       groups=x.shape[1])


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


#: GPU check cases (shape, k, pad, stride, dtype): borders, a strip tail (OW % BW), a channel tail
#: (48 = 32 + 16), stride 2, fp16 and fp32; row strides W * C * element size are multiples of 16 bytes
CHECKS = [((2, 48, 16, 13), 7, 3, 1, "bfloat16"), ((2, 48, 12, 11), 3, 1, 1, "bfloat16"),
          ((2, 48, 17, 15), 3, 1, 2, "bfloat16"), ((1, 48, 13, 11), 5, 2, 1, "float16"),
          ((1, 40, 12, 10), 7, 3, 1, "float32"), ((1, 32, 15, 14), 5, 2, 2, "float32")]
#: (name, shape, k, stride, dtype): ConvNeXt-T (N=64), MobileNetV2 / EfficientNet-B0 (N=32)
LAYERS = [("convnext-56-c96-k7", (64, 96, 56, 56), 7, 1, "bfloat16"),
          ("convnext-28-c192-k7", (64, 192, 28, 28), 7, 1, "bfloat16"),
          ("convnext-14-c384-k7", (64, 384, 14, 14), 7, 1, "bfloat16"),
          ("convnext-7-c768-k7", (64, 768, 7, 7), 7, 1, "bfloat16"),
          ("mbv2-56-c144-k3", (32, 144, 56, 56), 3, 1, "bfloat16"),
          ("mbv2-112-c96-k3-s2", (32, 96, 112, 112), 3, 2, "bfloat16"),
          ("effb0-28-c240-k5", (32, 240, 28, 28), 5, 1, "bfloat16"),
          ("effb0-14-c672-k5", (32, 672, 14, 14), 5, 1, "bfloat16"),
          ("convnext-28-c192-k7-fp32", (64, 192, 28, 28), 7, 1, "float32")]


def configs_for(k):
    """(columns a thread, warps, steps ahead, row chunk, programs a SM). Session 7's first run
    (ConvNeXt 56x56 7x7, MobileNetV2 56x56 3x3): BW 8 and one warp won both; one step ahead on 7x7
    (9 KB of rings: ~21 programs a SM), two on 3x3; BW 10 and two warps lost. Shared memory bounds
    residency: 7x7 two steps ahead holds 18 KB (16 ring rows of 1 KB: allocations are powers of two)."""
    return [dict(bw=8, nw=1, depth=1, row_chunk=14, per_sm=19), dict(bw=8, nw=1, depth=2, row_chunk=14, per_sm=19),
            dict(bw=8, nw=1, depth=1, row_chunk=28, per_sm=12), dict(bw=8, nw=1, depth=1, row_chunk=7, per_sm=19)]


#: --sweep: session 8's grid for the 7x7 layers of 28x28 and below, where the family's default tile
#: (BW 8, 16-row units) lost to cuDNN inside ConvNeXt-T (0.5-0.86x): strips that divide the width
#: (7, 14), shorter and longer units, fewer or more programs a SM, two warps (half the partials)
SWEEP = [dict(bw=8, nw=1, depth=1, row_chunk=14, per_sm=19), dict(bw=7, nw=1, depth=1, row_chunk=14, per_sm=19),
         dict(bw=14, nw=1, depth=1, row_chunk=14, per_sm=19), dict(bw=7, nw=1, depth=1, row_chunk=7, per_sm=19),
         dict(bw=7, nw=1, depth=1, row_chunk=28, per_sm=12), dict(bw=4, nw=1, depth=1, row_chunk=14, per_sm=19),
         dict(bw=7, nw=1, depth=1, row_chunk=14, per_sm=32), dict(bw=7, nw=1, depth=1, row_chunk=14, per_sm=8),
         dict(bw=7, nw=2, depth=1, row_chunk=14, per_sm=19), dict(bw=14, nw=1, depth=1, row_chunk=7, per_sm=19),
         dict(bw=7, nw=1, depth=2, row_chunk=14, per_sm=19), dict(bw=14, nw=2, depth=1, row_chunk=14, per_sm=12)]

#: --sweep fewer: the first grid's lesson (fewer programs won on all three layers: per_sm 8 beat 19
#: and 32; a whole 14-column row a thread won 14x14), pushed further
SWEEP_FEWER = [dict(bw=14, nw=1, depth=1, row_chunk=14, per_sm=8), dict(bw=14, nw=1, depth=1, row_chunk=14, per_sm=4),
               dict(bw=14, nw=1, depth=1, row_chunk=28, per_sm=4), dict(bw=7, nw=1, depth=1, row_chunk=28, per_sm=4),
               dict(bw=7, nw=1, depth=1, row_chunk=14, per_sm=4), dict(bw=7, nw=1, depth=1, row_chunk=14, per_sm=2),
               dict(bw=7, nw=1, depth=1, row_chunk=7, per_sm=4), dict(bw=14, nw=1, depth=1, row_chunk=14, per_sm=2)]
SWEEPS = {"grid": SWEEP, "fewer": SWEEP_FEWER}


def _operands(shape, k, pad, stride, dtype, device="cuda"):
    import torch

    dt = getattr(torch, dtype)
    x = torch.randn(shape, device=device, dtype=dt).contiguous(memory_format=torch.channels_last)
    oh, ow = (shape[2] + 2 * pad - k) // stride + 1, (shape[3] + 2 * pad - k) // stride + 1
    dy = torch.randn(shape[0], shape[1], oh, ow, device=device, dtype=dt).contiguous(memory_format=torch.channels_last)
    return x, dy


def check():
    import torch

    torch.manual_seed(0)
    failures = 0
    for shape, k, pad, stride, dtype in CHECKS:
        x, dy = _operands(shape, k, pad, stride, dtype)
        ref = reference(x, dy, k, pad, stride)
        for cfg_args in configs_for(k) + [dict(bw=8, nw=1, depth=2, row_chunk=3, per_sm=1),
                                          dict(bw=10, nw=1, depth=1, row_chunk=5, per_sm=2),
                                          dict(bw=8, nw=2, depth=1, row_chunk=4, per_sm=2)]:
            cfg = plan(shape, k, pad, stride=stride, **cfg_args)
            out = torch.full((cfg["split"], shape[1], k, k), float("nan"), device="cuda")
            try:
                run(x, dy, k, pad, cfg, out=out)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (reported as a failure; the next case still runs)
                failures += 1
                print(f"check {shape} k{k} s{stride} {dtype} {cfg_args}: FAILED {type(e).__name__}: {str(e)[:300]}",
                      flush=True)
                continue
            written = not torch.isnan(out).any().item()
            err = rel(out.sum(0).unsqueeze(1), ref)
            ok = written and err < 1e-5
            failures += not ok
            print(f"check {shape} k{k} s{stride} {dtype} {cfg_args}: err {err:.1e} written {written} "
                  f"{'ok' if ok else 'FAILED'}", flush=True)
    return failures


def bench(json_path, only=None, configs=configs_for):
    import torch

    sys.path.insert(0, os.path.dirname(__file__))
    from step_bench import _graph_time_us

    results = []
    for name, shape, k, stride, dtype in LAYERS:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        pad = k // 2
        x, dy = _operands(shape, k, pad, stride, dtype)
        ref = reference(x, dy, k, pad, stride)
        weight = torch.empty((shape[1], 1, k, k), device="cuda", dtype=x.dtype).contiguous(
            memory_format=torch.channels_last)

        def cudnn():
            return torch.ops.aten.convolution_backward(dy, x, weight, None, [stride] * 2, [pad, pad], [1, 1], False,
                                                       [0, 0], shape[1], [False, True, False])[1]

        base = _graph_time_us(cudnn)
        oh, ow = dy.shape[2], dy.shape[3]
        moved = (x.numel() + dy.numel()) * x.element_size()
        floor = max(moved / 4.25e12, shape[0] * shape[1] * oh * ow * k * k / 33.5e12) * 1e6
        print(f"\n{name}: cuDNN graph {base:.1f} us (floor {floor:.1f} us: bytes or CUDA-core FMAs)", flush=True)
        row = dict(layer=name, cudnn_graph_us=base, floor_us=floor, variants=[])
        for cfg_args in configs(k):
            cfg = plan(shape, k, pad, stride=stride, **cfg_args)
            ws = torch.full((cfg["split"], shape[1], k, k), float("nan"), device="cuda")
            try:
                run(x, dy, k, pad, cfg, out=ws)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (a prototype: report and go on)
                print(f"  {cfg_args}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            written = not torch.isnan(ws).any().item()
            err = rel(ws.sum(0).unsqueeze(1), ref)
            g = _graph_time_us(lambda: run(x, dy, k, pad, cfg, out=ws))
            # with the partials summed (torch's sum stands in for the family's ordered reduction)
            g_sum = _graph_time_us(lambda: run(x, dy, k, pad, cfg, out=ws).sum(0))
            regs = None
            try:
                kern = staged_kernel(k, cfg["bw"], cfg["nw"], cfg["depth"], stride, dtype)
                regs = list(kern.device_caches[0][0].values())[-1].n_regs
            except Exception:  # noqa: BLE001
                pass
            print(f"  {str(cfg_args):66s} split{cfg['split']:4d} graph {g:7.1f} us ({base / g:5.2f}x cuDNN), "
                  f"with the sum {g_sum:7.1f} us ({base / g_sum:5.2f}x) {g / floor:4.1f}x floor err {err:.1e} "
                  f"written {written} regs {regs}", flush=True)
            row["variants"].append(dict(cfg=cfg_args, graph_us=g, graph_with_sum_us=g_sum, err=err,
                                        written=written, regs=regs))
        results.append(row)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)


def compile_offline(k, cfg_args, st=1, dtype="bfloat16", channels=96):
    """One config compiled for sm_90 on the CPU (Gluon through Triton's bundled ptxas)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    kern = staged_kernel(k, cfg_args["bw"], cfg_args["nw"], cfg_args["depth"], st, dtype)
    names = list(kern.arg_names)
    constexprs = {"stride_xw": channels, "stride_dyw": channels, "C": channels}
    pointee = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}[dtype]
    signature = {a: (pointee if a in ("X", "DY") else "*fp32" if a == "OUT" else
                     "constexpr" if a in constexprs else "i32") for a in names}
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in
             ("X", "DY", "OUT", "stride_xn", "stride_xh", "stride_dyn", "stride_dyh", "stride_os", "stride_ok")}
    return triton.compile(GluonASTSource(kern, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg_args["nw"]})


def offline():
    """sm_90 compile on the CPU of each layer's configs: registers, stack, SASS of the FMA loop."""
    sys.path.insert(0, os.path.dirname(__file__))
    from proto_rolling import _sass_summary

    seen = set()
    for name, shape, k, st, dtype in LAYERS:
        for cfg_args in configs_for(k):
            key = (k, st, dtype, cfg_args["bw"], cfg_args["nw"], cfg_args["depth"])
            if key in seen:
                continue
            seen.add(key)
            compiled = compile_offline(k, cfg_args, st, dtype)
            ptx = compiled.asm["ptx"]
            print(f"k{k} s{st} {dtype} bw{cfg_args['bw']} nw{cfg_args['nw']} depth{cfg_args['depth']}: shared "
                  f"{compiled.metadata.shared} B, cp.async {ptx.count('cp.async.c')} "
                  + _sass_summary(compiled.asm["cubin"]), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--layers", help="comma-separated LAYERS names (default: all)")
    parser.add_argument("--sweep", choices=sorted(SWEEPS), help="bench these SWEEPS configs instead of configs_for's")
    args = parser.parse_args()
    if args.offline:
        offline()
    failed = check() if args.check else 0
    if args.bench and not failed:
        bench(args.json, args.layers.split(",") if args.layers else None,
              configs=(lambda k: SWEEPS[args.sweep]) if args.sweep else configs_for)
    sys.exit(1 if failed else 0)
