"""Prototype of a third direct kernel for issue 10: the rolling window (input rows held in registers).

The sliding kernel (convwgrad/plugins/wgrad_direct/sliding.py) walks one output row at a time and
loads, for every step, all FY filter rows of its input window again: each input element is loaded
~FY x (BW + FX - 1) / BW times (12x for 7x7 at 8 columns), from L1/L2. Measured 3x slower than
cuDNN on ConvNeXt 56x56 C96 (session 1), with the tile kernel latency-bound at low occupancy (ncu).

This kernel fixes the program's column strip (BW output columns) and walks DOWN the output rows of
an image: the FY - SH input rows the next output row shares with this one stay in registers
(converted to fp32 once), so each step loads SH new input rows (BW*SW + (FX-1)*DW columns each) and
BW grad_output columns, then runs FY*FX*BW FMAs a channel. Column masks are fixed for a strip
(computed once a unit), row masks are one scalar a loaded row. Stride and dilation in width are
baked into the generated source; dilation in height must be 1 (rows are rolled one stride at a time).

Versions (session 6; notes/PERF.md): v1 all filter rows a program (spilled on 7x7); v2 filter rows
split over grid axis 2 and an optional one-step prefetch; v3 (``interior``) an unmasked body for the
steps whose strip, channels and rows are all inside, with constexpr column strides so that a load's
offset within a row is an immediate (offline sm_90 SASS: 1.46-1.93 instructions a FMA in that loop,
against 2.31 for v2).

Work units are (image, row chunk, strip); a program owns a channel block and walks UNITS_PER_PROG
units, each with a prologue that loads the window's first FY - SH rows. One fp32 partial a program:
[split, C, FY, FX], summed in order afterwards (deterministic).

Usage:
  TRITON_INTERPRET=1 python tools/proto_rolling.py --check-cpu      # tiny shapes, float64 reference
  python tools/proto_rolling.py --bench [--json FILE]                # GPU: correctness + graph/eager vs cuDNN
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import math
import os
import sys
import tempfile

import torch
import triton

KERNEL_NAME = "_wgrad_direct_rolling_kernel"

_HEAD = """import triton
import triton.language as tl


@triton.jit
def {name}(
    X, DY, OUT,
    H, W, OH, OW, PAD_H, PAD_W, C_OUT, KPG, FY, KY_BASE,
    ROW_CHUNK, CHUNKS, STRIPS, UNITS, UNITS_PER_PROG,
    stride_xn, stride_xc, stride_xh, stride_xw: tl.constexpr,
    stride_dyn, stride_dyc, stride_dyh, stride_dyw: tl.constexpr,
    stride_os, stride_ok, stride_oy, stride_ox,
    BLOCK_C: tl.constexpr, HAS_CHANNEL_TAIL: tl.constexpr,
):
    # Generated: {fyb} filter rows of {fx} taps a program, stride ({sh}, {sw}), dilation_w {dw},
    # {bw} columns a strip, prefetch {prefetch}, unmasked interior {interior}, interior unrolled {unroll}.
    # The column strides are constexpr: a load's offset within a row is then an immediate of the load
    # instruction. Filter rows KY_BASE + program_id(2) * {fyb} onwards (a tail launch covers FY % {fyb}).
    pid_c = tl.program_id(0)
    split = tl.program_id(1)
    ky0 = KY_BASE + tl.program_id(2) * {fyb}
    chans = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < C_OUT
    x_chan = X + (chans // KPG) * stride_xc
    dy_chan = DY + chans * stride_dyc
    ZERO = split * 0
"""


def _source(fyb: int, fx: int, sh: int, sw: int, dw: int, bw: int, prefetch: bool, interior: bool = False,
            unroll: int = 1, deferred: bool = False) -> str:
    """Kernel source for ``fyb`` filter rows a program (rows ky0 .. ky0 + fyb - 1 of the filter;
    rows past FY are computed and not stored). ``interior``: the steps of a strip whose columns and
    channels are all inside, and whose rows are, run a body with no mask (no predicate, no zero fill
    a load); the others the masked one (v3). ``prefetch`` without ``interior``: every step issues
    the next step's loads before its own FMAs (v2); with ``interior`` (v4): the unmasked steps do,
    the border steps load their own. ``unroll``: the unmasked loop's unroll factor (v4; lets the
    scheduler hoist the next step's loads and rename the rolled rows instead of moving them).
    ``deferred`` (with ``prefetch``): the prefetched operands stay in the input dtype until the step
    that uses them converts them; converted at the load, the conversion waits for the load right
    there and the prefetch hides nothing (session 7's reading of v4's flat prefetch result)."""
    offsets = sorted({w * sw + kx * dw for w in range(bw) for kx in range(fx)})
    kept = max(0, fyb - sh)           # rows carried from one output row to the next
    fresh = fyb - kept                # rows loaded each step
    p, q, b = " " * 4, " " * 8, " " * 12
    lines = [_HEAD.format(name=KERNEL_NAME, fyb=fyb, fx=fx, sh=sh, sw=sw, dw=dw, bw=bw, prefetch=prefetch,
                          interior=interior, unroll=unroll, deferred=deferred)]

    at_load, at_use = ("", ".to(tl.float32)") if deferred else (".to(tl.float32)", "")

    def zeros(names):
        return [f"{p}{name} = tl.zeros((BLOCK_C,), dtype=tl.float32)" for name in names]

    lines += zeros(f"acc_{ky}_{kx}" for ky in range(fyb) for kx in range(fx))
    for o in offsets:
        lines.append(f"{p}off_{o} = {o} * stride_xw")
    # Loop-carried values start as zeros (each unit's prologue loads their real values).
    lines += zeros(f"r{j}_{o}" for j in range(kept) for o in offsets)
    if prefetch:
        held = "X.dtype.element_ty" if deferred else "tl.float32"
        lines += [f"{p}p{f}_{o} = tl.zeros((BLOCK_C,), dtype={held})" for f in range(fresh) for o in offsets]
        lines += [f"{p}pd_{w} = tl.zeros((BLOCK_C,), dtype={held})" for w in range(bw)]
    lines.append(f"{p}u_lo = split * UNITS_PER_PROG")
    lines.append(f"{p}u_hi = tl.minimum(u_lo + UNITS_PER_PROG, UNITS)")
    lines.append(f"{p}for u_counter in range(u_lo, u_hi):")
    lines += [
        f"{q}u = u_counter + ZERO",
        f"{q}strip = u % STRIPS",
        f"{q}rest = u // STRIPS",
        f"{q}chunk = rest % CHUNKS",
        f"{q}n = (rest // CHUNKS).to(tl.int64)",
        f"{q}ow0 = strip * {bw}",
        f"{q}ix0 = ow0 * {sw} - PAD_W",
        f"{q}x_img = x_chan + n * stride_xn + ix0 * stride_xw",
        f"{q}dy_img = dy_chan + n * stride_dyn + ow0 * stride_dyw",
    ]
    for o in offsets:
        lines.append(f"{q}cm_{o} = tl.where((ix0 + {o} >= 0) & (ix0 + {o} < W), chan_ok, False)")
    for w in range(bw):
        lines.append(f"{q}dm_{w} = tl.where(ow0 + {w} < OW, chan_ok, False)")
    lines.append(f"{q}oh_lo = chunk * ROW_CHUNK")
    lines.append(f"{q}oh_hi = tl.minimum(oh_lo + ROW_CHUNK, OH)")

    def load_rows(indent, names, first_ky, oh_expr, extra_ok=None, convert=".to(tl.float32)"):
        out = [f"{indent}iy_top = ({oh_expr}) * {sh} - PAD_H + ky0"]
        for i, name in enumerate(names):
            out.append(f"{indent}iy = iy_top + {first_ky + i}")
            ok = "(iy >= 0) & (iy < H)" + (f" & ({extra_ok})" if extra_ok else "")
            out.append(f"{indent}row_ok = {ok}")
            out.append(f"{indent}row_ptr = x_img + iy * stride_xh")
            for o in offsets:
                out.append(f"{indent}{name}_{o} = tl.load(row_ptr + off_{o}, mask=tl.where(row_ok, cm_{o}, False), "
                           f"other=0.0){convert}")
        return out

    def load_dy(indent, name, oh_expr, extra_ok=None, convert=".to(tl.float32)"):
        out = [f"{indent}dy_row = dy_img + ({oh_expr}) * stride_dyh"]
        for w in range(bw):
            mask = f"tl.where({extra_ok}, dm_{w}, False)" if extra_ok else f"dm_{w}"
            out.append(f"{indent}{name}_{w} = tl.load(dy_row + {w} * stride_dyw, mask={mask}, other=0.0){convert}")
        return out

    def load_unmasked(indent, rows, dys, oh_expr, convert=".to(tl.float32)"):
        out = [f"{indent}dy_row = dy_img + ({oh_expr}) * stride_dyh"]
        for w in range(bw):
            out.append(f"{indent}{dys}_{w} = tl.load(dy_row + {w} * stride_dyw){convert}")
        out.append(f"{indent}row_ptr = x_img + (({oh_expr}) * {sh} - PAD_H + ky0 + {kept}) * stride_xh")
        for f in range(fresh):
            for o in offsets:
                out.append(f"{indent}{rows}{f}_{o} = tl.load(row_ptr + ({f} * stride_xh + {o} * stride_xw))"
                           f"{convert}")
        return out

    # Prologue: the rows the chunk's first output row shares with the (virtual) row above it.
    lines += load_rows(q, [f"r{j}" for j in range(kept)], 0, "oh_lo")
    if prefetch and not interior:  # ...and the first step's fresh rows and grad_output
        lines += load_rows(q, [f"p{f}" for f in range(fresh)], kept, "oh_lo", None, at_load)
        lines += load_dy(q, "pd", "oh_lo", None, at_load)

    def row_name(ky: int, o: int) -> str:
        return f"r{ky}_{o}" if ky < kept else f"n{ky - kept}_{o}"

    def step(indent, masked, pipelined):
        out = [f"{indent}oh = oh_counter + ZERO"]
        if pipelined:
            # this step's operands were loaded a step ago; issue the next step's now
            for f in range(fresh):
                for o in offsets:
                    out.append(f"{indent}n{f}_{o} = p{f}_{o}{at_use}")
            for w in range(bw):
                out.append(f"{indent}dv_{w} = pd_{w}{at_use}")
            if masked:
                out += load_rows(indent, [f"p{f}" for f in range(fresh)], kept, "oh + 1", "oh + 1 < oh_hi", at_load)
                out += load_dy(indent, "pd", "oh + 1", "oh + 1 < oh_hi", at_load)
            else:
                out += load_unmasked(indent, "p", "pd", "oh + 1", at_load)
        elif masked:
            out += load_dy(indent, "dv", "oh")
            out += load_rows(indent, [f"n{f}" for f in range(fresh)], kept, "oh")
        else:
            out += load_unmasked(indent, "n", "dv", "oh")
        for ky in range(fyb):
            for kx in range(fx):
                for w in range(bw):
                    out.append(f"{indent}acc_{ky}_{kx} += {row_name(ky, w * sw + kx * dw)} * dv_{w}")
        # Roll: carried row j of the next output row is row j + SH of this one.
        for j in range(kept):
            for o in offsets:
                out.append(f"{indent}r{j}_{o} = {row_name(j + sh, o)}")
        return out

    if not interior:
        lines.append(f"{q}for oh_counter in range(oh_lo, oh_hi):")
        lines += step(b, masked=True, pipelined=prefetch)
    else:
        # Steps [a, b) have every row they load inside the image (the padding rows of the last filter
        # block included); with the strip's columns and channels inside too they take the unmasked body.
        last_col = max(offsets)
        lines += [
            f"{q}inside = (ix0 >= 0) & (ix0 + {last_col} < W) & (ow0 + {bw} <= OW) & (pid_c * BLOCK_C + BLOCK_C <= C_OUT)",
            f"{q}top_rows = PAD_H - ky0 - {kept}",
            f"{q}in_lo = tl.maximum(oh_lo, (tl.maximum(top_rows, 0) + {sh - 1}) // {sh})",
            f"{q}last_row = H - 1 + PAD_H - ky0 - {fyb - 1}",
            f"{q}in_hi = tl.where(last_row >= 0, last_row // {sh} + 1, 0)",
            f"{q}in_lo = tl.minimum(in_lo, oh_hi)",
            f"{q}in_hi = tl.maximum(in_lo, tl.minimum(in_hi, oh_hi))",
            f"{q}in_lo = tl.where(inside, in_lo, oh_hi)",
            f"{q}in_hi = tl.where(inside, in_hi, oh_hi)",
            f"{q}for oh_counter in range(oh_lo, in_lo):",
        ]
        lines += step(b, masked=True, pipelined=False)
        if prefetch:
            # Steps [in_lo, pipe_hi) load the next step's operands, all inside; the last interior
            # step joins the masked tail (its prefetched operands are loaded and not used).
            lines += [f"{q}pipe_hi = tl.maximum(in_lo, in_hi - 1)", f"{q}has_pipe = in_lo < pipe_hi"]
            lines += load_rows(q, [f"p{f}" for f in range(fresh)], kept, "in_lo", "has_pipe", at_load)
            lines += load_dy(q, "pd", "in_lo", "has_pipe", at_load)
            inner_hi = "pipe_hi"
        else:
            inner_hi = "in_hi"
        loop = f"tl.range(in_lo, {inner_hi}, loop_unroll_factor={unroll})" if unroll > 1 else f"range(in_lo, {inner_hi})"
        lines.append(f"{q}for oh_counter in {loop}:")
        lines += step(b, masked=False, pipelined=prefetch)
        lines.append(f"{q}for oh_counter in range({inner_hi}, oh_hi):")
        lines += step(b, masked=True, pipelined=False)

    lines.append(f"{p}out = OUT + split.to(tl.int64) * stride_os + chans * stride_ok")
    for ky in range(fyb):
        for kx in range(fx):
            lines.append(f"{p}tl.store(out + ((ky0 + {ky}) * stride_oy + {kx} * stride_ox), acc_{ky}_{kx}, "
                         f"mask=tl.where(ky0 + {ky} < FY, chan_ok, False))")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def rolling_kernel(fyb, fx, sh, sw, dw, bw, prefetch=False, interior=False, unroll=1, deferred=False):
    source = _source(fyb, fx, sh, sw, dw, bw, prefetch, interior, unroll, deferred)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"convwgrad_direct_rolling_{digest}"
    directory = os.environ.get("CONVWGRAD_GENERATED_DIR") or os.path.join(tempfile.gettempdir(), "convwgrad-gen")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name + ".py")
    if not os.path.exists(path) or open(path).read() != source:
        with open(path + ".tmp", "w") as f:
            f.write(source)
        os.replace(path + ".tmp", path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, KERNEL_NAME)


def plan(x_shape, k, stride, pad, c_out, *, block_c, bw, num_warps=1, row_chunk=None, target_programs=None,
         sms=132, fyb=None, prefetch=False, interior=False, unroll=1, tail_split=False, per_sm=16,
         deferred=False):
    """``tail_split``: where ``fyb`` does not divide the filter height, the last FY % fyb rows run
    as a second launch of a kernel generated for exactly that many rows, instead of a padded block
    (7 = 4 + 3 rather than 4 + 4: one row in eight computed for nothing)."""
    n, c, h, w = x_shape
    fyb = fyb or k
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    strips = triton.cdiv(ow, bw)
    # programs a unit and launch: channel and filter-row blocks (a tail launch runs after the main
    # one, so each is sized to fill the GPU alone: session 7's first 4 + 3 run halved its programs)
    row_blocks = k // fyb if tail_split and k % fyb else triton.cdiv(k, fyb)
    cblocks = triton.cdiv(c_out, block_c) * row_blocks
    target_programs = target_programs or sms * per_sm
    if row_chunk is None:  # whole images, or chunks of >= 2k rows where images alone leave the GPU idle
        wanted = triton.cdiv(target_programs, cblocks * n * strips)
        row_chunk = max(min(oh, 2 * k), triton.cdiv(oh, wanted))
    chunks = triton.cdiv(oh, row_chunk)
    units = n * chunks * strips
    split = max(1, min(units, triton.cdiv(target_programs, cblocks)))
    per = triton.cdiv(units, split)
    split = triton.cdiv(units, per)
    return dict(oh=oh, ow=ow, strips=strips, row_chunk=row_chunk, chunks=chunks, units=units, cblocks=cblocks,
                split=split, per=per, block_c=block_c, bw=bw, num_warps=num_warps, fyb=fyb, prefetch=prefetch,
                interior=interior, unroll=unroll, tail_split=tail_split and k % fyb != 0, per_sm=per_sm,
                deferred=deferred and prefetch)


def _row_launches(k, cfg):
    """(rows a program, first filter row, programs along the filter height) of each launch."""
    fyb = cfg["fyb"]
    if cfg.get("tail_split"):
        return [(fyb, 0, k // fyb), (k % fyb, (k // fyb) * fyb, 1)]
    return [(fyb, 0, triton.cdiv(k, fyb))]


def kernels_of(k, stride, cfg, dilation=1):
    return [rolling_kernel(rows, k, stride, stride, dilation, cfg["bw"], cfg["prefetch"], cfg["interior"],
                           cfg.get("unroll", 1), cfg.get("deferred", False)) for rows, _, _ in _row_launches(k, cfg)]


def run(x, dy, k, stride, pad, cfg, *, dilation=1, out=None):
    """dW (fp32, [C, 1, k, k]) of a depthwise 2-D conv (groups = C_in, KPG = C_out / C_in)."""
    n, c, h, w = x.shape
    c_out = dy.shape[1]
    if out is None:
        out = torch.empty((cfg["split"], c_out, k, k), device=x.device, dtype=torch.float32)
    for kern, (rows, ky_base, row_blocks) in zip(kernels_of(k, stride, cfg, dilation), _row_launches(k, cfg)):
        grid = (triton.cdiv(c_out, cfg["block_c"]), cfg["split"], row_blocks)
        kern[grid](x, dy, out, h, w, cfg["oh"], cfg["ow"], pad, pad, c_out, c_out // c, k, ky_base,
                   cfg["row_chunk"], cfg["chunks"], cfg["strips"], cfg["units"], cfg["per"],
                   *x.stride(), *dy.stride(), *out.stride()[:2], *out.stride()[2:],
                   BLOCK_C=cfg["block_c"], HAS_CHANNEL_TAIL=c_out % cfg["block_c"] != 0, num_warps=cfg["num_warps"])
    return out


def reference(x, dy, k, stride, pad, dilation=1):
    c = x.shape[1]
    return torch.nn.grad.conv2d_weight(x.double(), (dy.shape[1], 1, k, k), dy.double(), stride=stride,
                                       padding=pad, dilation=dilation, groups=c)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def check_cpu():
    torch.manual_seed(0)
    cases = [((2, 4, 7, 9), 3, 1, 1, 4, 2), ((1, 4, 6, 6), 3, 2, 1, 4, 4), ((2, 8, 9, 5), 5, 1, 2, 4, 2),
             ((1, 2, 8, 8), 7, 1, 3, 2, 4), ((2, 4, 5, 11), 3, 1, 0, 8, 2), ((1, 4, 9, 9), 3, 2, 0, 4, 2),
             # large enough for interior strips and rows (the unmasked body), one with a channel tail
             ((1, 4, 14, 16), 3, 1, 1, 4, 2), ((1, 4, 16, 16), 7, 1, 3, 4, 2), ((1, 4, 17, 17), 5, 2, 2, 4, 2),
             ((1, 6, 12, 12), 3, 1, 1, 4, 2)]
    for shape, k, s, p, bc, bw in cases:
        x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
        oh = (shape[2] + 2 * p - k) // s + 1
        ow = (shape[3] + 2 * p - k) // s + 1
        dy = torch.randn(shape[0], shape[1], oh, ow).contiguous(memory_format=torch.channels_last)
        for row_chunk, fyb, prefetch, interior, unroll, tail in (
                (None, None, False, False, 1, False), (2, None, True, False, 1, False), (3, 2, True, False, 1, False),
                (None, 2, False, True, 1, False), (2, None, False, True, 1, False), (3, 3, False, True, 1, False),
                (None, 2, True, True, 1, True), (5, 3, True, True, 1, False), (None, 2, False, True, 2, True),
                (None, 3, True, True, 2, True)):
            cfg = plan(shape, k, s, p, shape[1], block_c=bc, bw=bw, row_chunk=row_chunk, target_programs=3, fyb=fyb,
                       prefetch=prefetch, interior=interior, unroll=unroll, tail_split=tail)
            out = run(x, dy, k, s, p, cfg)
            got = out.sum(0, keepdim=False).unsqueeze(1)
            err = rel(got, reference(x, dy, k, s, p))
            print(f"{shape} k{k} s{s} p{p} bc{bc} bw{bw} chunk{row_chunk} fyb{fyb} prefetch{prefetch} interior{interior} "
                  f"unroll{unroll} tail{cfg['tail_split']} split{cfg['split']}: err {err:.1e}")
            assert err < 1e-5, err


#: ConvNeXt-T (N=64) and MobileNetV2/EfficientNet layers, bf16 channels_last.
LAYERS = [
    ("convnext-56-c96-k7", (64, 96, 56, 56), 7, 1),
    ("convnext-28-c192-k7", (64, 192, 28, 28), 7, 1),
    ("convnext-14-c384-k7", (64, 384, 14, 14), 7, 1),
    ("convnext-7-c768-k7", (64, 768, 7, 7), 7, 1),
    ("mbv2-56-c144-k3", (32, 144, 56, 56), 3, 1),
    ("mbv2-112-c96-k3-s2", (32, 96, 112, 112), 3, 2),
    ("effb0-28-c240-k5", (32, 240, 28, 28), 5, 1),
    ("effb0-14-c672-k5", (32, 672, 14, 14), 5, 1),
]


def configs_for(c, k):
    """(channels a program, warps, columns a strip, filter rows a program, prefetch, unmasked interior,
    interior unroll, tail split): one channel a thread (2-byte loads), two (4-byte) where the window
    is small. Session 6: v1 (all rows a program) spilled on 7x7; v2 (row blocks, prefetch) reached
    0.62-1.14x cuDNN, issue-bound at ~2.3 SASS instructions a FMA in its inner loop. Session 7: v3
    (unmasked interior, constexpr column strides; 1.46-1.93 offline) reached 0.74-1.00x on 7x7 at BW 8
    and lost to v2 at BW 4 (no prefetch: load latency exposed at 1-warp programs). v4 pipelines the
    unmasked steps (prefetch + interior), or unrolls them, and splits 7 = 4 + 3. The first config of
    each is session 7's best v3, the baseline."""
    # Session 7, second run: unroll 2 and 4 + 3 rows lost (the tail launch halved each launch's
    # programs: 6.7% achieved occupancy under ncu, 1.27 warps a scheduler); prefetch with interior
    # was even with v3: its loads were converted to fp32 where they were issued, so the warp waited
    # there. Deferring the conversion (offline SASS) lets ptxas sink the loads to the last third of
    # the body, so the third run also asks for more resident warps instead: programs a SM (per_sm,
    # the last field; 96-108 registers leave room for ~19 one-warp programs a SM).
    if k >= 7:
        tiles = ((32, 1, 8, 2, False, True, 1, False, False, 16), (32, 1, 8, 2, True, True, 1, False, True, 16),
                 (32, 1, 8, 2, False, True, 1, False, False, 24), (64, 2, 8, 2, True, True, 1, False, True, 16))
    elif k >= 5:
        tiles = ((32, 1, 8, 5, False, True, 1, False, False, 16), (32, 1, 8, 5, True, True, 1, False, True, 16),
                 (32, 1, 8, 5, False, True, 1, False, False, 24))
    else:
        tiles = ((32, 1, 16, 3, False, True, 1, False, False, 16), (32, 1, 16, 3, True, True, 1, False, True, 16),
                 (32, 1, 16, 3, False, True, 1, False, False, 24), (64, 1, 8, 3, False, True, 2, False, False, 16))
    configs = [dict(block_c=bc, num_warps=nw, bw=bw, fyb=fyb, prefetch=pf, interior=inner, unroll=unroll,
                    tail_split=tail, deferred=deferred, per_sm=per_sm)
               for bc, nw, bw, fyb, pf, inner, unroll, tail, deferred, per_sm in tiles]
    if k >= 7:  # ~19 programs a SM needs shorter row chunks on the 56x56 layer (whole images give 13.6)
        configs += [dict(configs[0], per_sm=19, row_chunk=chunk) for chunk in (28, 14)]
        # session 7, fourth run: fewer registers (BW 4: more resident warps) and two channels a
        # thread (4-byte loads, two independent FMA streams a load), both with 14-row chunks
        configs += [dict(configs[0], bw=4, per_sm=24, row_chunk=14),
                    dict(configs[0], block_c=64, per_sm=19, row_chunk=14)]
    return configs


def layer_inputs(shape, k, s):
    """Fresh bf16 channels_last input and grad_output of a LAYERS entry (padding k // 2)."""
    pad = k // 2
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    oh = (shape[2] + 2 * pad - k) // s + 1
    dy = torch.randn(shape[0], shape[1], oh, oh, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    return x, dy, pad, oh


def _compile_one(job):
    """Launch one (layer, config) once, so that its kernels are in Triton's on-disk cache when the
    bench reaches them (a worker process of ``_precompile``)."""
    name, cfg_args = job
    _, shape, k, s = next(layer for layer in LAYERS if layer[0] == name)
    x, dy, pad, _ = layer_inputs(shape, k, s)
    try:
        run(x, dy, k, s, pad, plan(shape, k, s, pad, shape[1], **cfg_args))
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 (the bench reports it again)
        return f"{name} {cfg_args}: {type(e).__name__}"
    return None


def _precompile(only=None, workers=12):
    """Compile every config of every layer in parallel processes first: in session 7 the bench spent
    most of its 280 s limit compiling one generated kernel after another."""
    import concurrent.futures
    import multiprocessing

    jobs = [(name, cfg_args) for name, shape, k, _ in LAYERS for cfg_args in configs_for(shape[1], k)
            if not only or name in only]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for failure in pool.map(_compile_one, jobs):
            if failure:
                print("  precompile:", failure, flush=True)


def offline(target="sm_90"):
    """Registers, spills and SASS instructions a FFMA of every 7x7/5x5/3x3 config, compiled on the
    CPU (sm_90 through Triton's bundled ptxas; gfx950: registers and scratch only)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    gpu_target = GPUTarget("cuda", 90, 32) if target == "sm_90" else GPUTarget("hip", "gfx950", 64)
    seen = set()
    for name, shape, k, s in LAYERS:
        for cfg_args in configs_for(shape[1], k):
            cfg = plan(shape, k, s, k // 2, shape[1], **cfg_args)
            for kern in kernels_of(k, s, cfg):
                if kern in seen:
                    continue
                seen.add(kern)
                names = list(kern.arg_names)
                constexprs = {"BLOCK_C": cfg["block_c"], "HAS_CHANNEL_TAIL": False, "stride_xw": shape[1],
                              "stride_dyw": shape[1]}
                signature = {a: ("*bf16" if a in ("X", "DY") else "*fp32" if a == "OUT" else
                                 "constexpr" if a in constexprs else "i32") for a in names}
                attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in
                         ("X", "DY", "OUT", "stride_xn", "stride_xh", "stride_dyn", "stride_dyh", "stride_os",
                          "stride_ok")}
                compiled = triton.compile(ASTSource(kern, signature, constexprs, attrs), target=gpu_target,
                                          options={"num_warps": cfg["num_warps"]})
                meta = compiled.metadata
                line = f"{name:22s} {kern.fn.__module__[-8:]} rows {kern_rows(kern)} "
                if target == "sm_90":
                    line += _sass_summary(compiled.asm["cubin"])
                else:
                    amd = compiled.asm["amdgcn"]
                    vgpr = [l for l in amd.splitlines() if ".vgpr_count" in l or "NumVgprs:" in l][:1]
                    scratch = [l for l in amd.splitlines() if "ScratchSize" in l][:1]
                    line += f"{' '.join(v.strip() for v in vgpr)} {' '.join(v.strip() for v in scratch)}"
                print(line, {key: cfg_args[key] for key in ("block_c", "bw", "fyb", "prefetch", "unroll",
                                                            "tail_split", "deferred")}, flush=True)


def _sass_summary(cubin: bytes) -> str:
    """Registers and spill bytes (cuobjdump -res-usage), and the instructions a FFMA of the basic
    block with the most FFMA and, among those, the fewest instructions (the unmasked interior loop's
    body) from Triton's bundled tools."""
    import re as _re
    import subprocess

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", f.name], capture_output=True,
                               text=True).stdout
        sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", f.name], capture_output=True, text=True).stdout
    regs = _re.search(r"REG:(\d+)", usage)
    stack = _re.search(r"STACK:(\d+)", usage)
    blocks, current = [], []
    for text in sass.splitlines():
        if _re.match(r"^\.L_x_\d+:", text.strip()):
            blocks.append(current)
            current = []
        elif "/*" in text and ";" in text:
            current.append(text)
    blocks.append(current)
    body = max(blocks, key=lambda block: (sum("FFMA" in t for t in block), -len(block)))  # the unmasked one
    ffma = sum("FFMA" in t for t in body)
    return (f"regs {regs.group(1) if regs else '?'} stack {stack.group(1) if stack else '?'} "
            f"loop {len(body)} instr / {ffma} FFMA = {len(body) / max(ffma, 1):.2f} ")


def kern_rows(kern):
    import re as _re
    return _re.search(r"Generated: (\d+) filter rows", open(kern.fn.__code__.co_filename).read()).group(1)


def bench(json_path, only=None):
    sys.path.insert(0, os.path.dirname(__file__))
    from step_bench import _eager_time_us, _graph_time_us

    _precompile(only)
    results = []
    for name, shape, k, s in LAYERS:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        x, dy, pad, oh = layer_inputs(shape, k, s)
        ref = reference(x, dy, k, s, pad)
        weight = torch.empty((shape[1], 1, k, k), device="cuda", dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last)

        def cudnn():
            return torch.ops.aten.convolution_backward(dy, x, weight, None, [s, s], [pad, pad], [1, 1], False,
                                                       [0, 0], shape[1], [False, True, False])[1]

        base_g, base_e = _graph_time_us(cudnn), _eager_time_us(cudnn)
        moved = (x.numel() + dy.numel()) * 2
        floor = max(moved / 4.25e12, x.shape[0] * shape[1] * oh * oh * k * k / 33.5e12) * 1e6
        print(f"\n{name}: cuDNN graph {base_g:.1f} us eager {base_e:.1f}  (CUDA-core floor {floor:.1f} us)", flush=True)
        row = dict(layer=name, cudnn_graph_us=base_g, cudnn_eager_us=base_e, floor_us=floor, variants=[])
        for cfg_args in configs_for(shape[1], k):
            cfg = plan(shape, k, s, pad, shape[1], **cfg_args)
            ws = torch.full((cfg["split"], shape[1], k, k), float("nan"), device="cuda")
            try:
                run(x, dy, k, s, pad, cfg, out=ws)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (a prototype: report and go on)
                print(f"  {cfg_args}: failed {type(e).__name__}: {str(e)[:200]}")
                continue
            written = not torch.isnan(ws).any().item()
            err = rel(ws.sum(0).unsqueeze(1), ref)

            def call():
                return run(x, dy, k, s, pad, cfg, out=ws).sum(0).to(torch.bfloat16)

            g, e = _graph_time_us(call), _eager_time_us(call)
            regs = spills = None
            try:  # the widest of the launches (a tail launch is the smaller kernel)
                compiled = [list(kern.device_caches[0][0].values())[-1] for kern in kernels_of(k, s, cfg)]
                regs, spills = max(c.n_regs for c in compiled), max(c.n_spills for c in compiled)
            except Exception:  # noqa: BLE001
                pass
            label = (f"{'chunk' + str(cfg['row_chunk']) + ' ' if 'row_chunk' in cfg_args else ''}c{cfg['block_c']} nw{cfg['num_warps']} bw{cfg['bw']} rows{cfg['fyb']}"
                     f"{'+' + str(k % cfg['fyb']) if cfg['tail_split'] else ''} "
                     f"{('deferred-' if cfg['deferred'] else '') + 'prefetch ' if cfg['prefetch'] else ''}{'interior ' if cfg['interior'] else ''}"
                     f"{'unroll' + str(cfg['unroll']) + ' ' if cfg['unroll'] > 1 else ''}t{cfg['per_sm']} "
                     f"split{cfg['split']} per{cfg['per']}")
            print(f"  {label:40s} graph {g:8.1f} us ({base_g / g:5.2f}x cuDNN)  eager {e:8.1f} ({base_e / e:5.2f}x)  "
                  f"{g / floor:5.1f}x floor  err {err:.1e} written {written} regs {regs} spills {spills}", flush=True)
            row["variants"].append(dict(label=label, graph_us=g, eager_us=e, err=err, written=written, regs=regs,
                                        spills=spills))
        results.append(row)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)


def one(spec):
    """``LAYER:INDEX``: that layer's INDEX-th config, launched three times (for ncu)."""
    name, index = spec.split(":")
    _, shape, k, s = next(layer for layer in LAYERS if layer[0] == name)
    x, dy, pad, _ = layer_inputs(shape, k, s)
    cfg = plan(shape, k, s, pad, shape[1], **configs_for(shape[1], k)[int(index)])
    for _ in range(3):
        run(x, dy, k, s, pad, cfg)
    torch.cuda.synchronize()
    print(name, cfg)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check-cpu", action="store_true")
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--layers", help="comma-separated LAYERS names (default: all)")
    parser.add_argument("--one", help="LAYER:INDEX: launch one config three times (for ncu)")
    parser.add_argument("--offline", choices=("sm_90", "gfx950"), help="compile every config on the CPU")
    args = parser.parse_args()
    if args.offline:
        offline(args.offline)
    if args.one:
        one(args.one)
    if args.check_cpu:
        check_cpu()
    if args.bench:
        bench(args.json, args.layers.split(",") if args.layers else None)
