"""Triton kernel of the direct family: depthwise / channel-multiplier dW on CUDA cores (cpg == 1).

No GEMM view, no tl.dot. dW[k, tap] = sum over (n, od, oh, ow) of
X[n, k // KPG, od*s - p + tap_z*d, oh*s - p + tap_y*d, ow*s - p + tap_x*d] * DY[n, k, od, oh, ow].

One program owns BLOCK_C output channels, BLOCK_T filter taps and a contiguous range of
"steps" (its split); a step is one output row segment of BLOCK_W columns. The program holds a
[BLOCK_T, BLOCK_C, BLOCK_W] fp32 accumulator (one per tap, channel and column), and per step:

- loads the grad_output tile [BLOCK_C, BLOCK_W] once (fp32 after the load);
- loads the input tile [BLOCK_T, BLOCK_C, BLOCK_W] through ONE pointer tensor built once per
  program (``x_tap_offsets``: tap z/y/x offsets + channel offsets + column offsets) plus a
  scalar per step (the row and the segment's first column): no per-element index math;
- accumulates ``acc += x * dy[None]`` (one fp32 FMA per element).

Masks: the row validity of each tap is a [BLOCK_T] vector computed once per output row from
scalars; the column validity matters only in the border segments at the left/right padding,
and the launcher passes the range of interior segments (``COL_INNER_LO`` to ``COL_INNER_HI``)
in which every tap's column is inside the input: there the load mask is the hoisted row mask.
When one segment covers the whole output row (IS_ONE_COL_BLOCK, the NCHW shape of the tile)
the column mask is built once per program.

Layouts: in channels_last the channel axis is contiguous (16-byte vectors when C is a multiple
of the vector width and Triton can prove it); in NCHW the column axis is (vectors along ow when
the stride is 1; the taps' shifted rows are not 16-byte aligned, so loads there stay narrow).
Both run natively through the strides: no transposes.

At the end the columns are summed (in registers and across the lanes holding them) and the
[BLOCK_T, BLOCK_C] fp32 partial is stored: straight to dW when SPLIT_K == 1, else into the fp32
workspace (split, C, taps) that the shared ordered reduction sums. No atomics: deterministic.
"""

import triton
import triton.language as tl

from convwgrad.provider.blocks.jit import _split_taps


@triton.jit
def _load_step(acc, x_ptrs, dy_ptrs, x_mask, dy_mask, IS_MASKED: tl.constexpr):
    """One segment: acc[t, c, w] += x[t, c, w] * dy[c, w] in fp32; unmasked loads when not IS_MASKED."""
    if IS_MASKED:
        xv = tl.load(x_ptrs, mask=x_mask, other=0.0)
        dv = tl.load(dy_ptrs, mask=dy_mask, other=0.0)
    else:
        xv = tl.load(x_ptrs)
        dv = tl.load(dy_ptrs)
    return acc + xv.to(tl.float32) * dv.to(tl.float32)[None, :, :]


@triton.jit
def _border_step(acc, b, x_ptrs0, dy_ptrs0, x_row, dy_row, row_ok, chan_ok, dx, cols,
                 W, OW, STRIDE_W, PAD_W, stride_xw, stride_dyw,
                 BLOCK_W: tl.constexpr, HAS_CHANNEL_TAIL: tl.constexpr, IS_WIDE_INDEX: tl.constexpr):
    """One segment with its column mask (the segments at the padding or the row's end)."""
    ow0 = b * BLOCK_W
    if IS_WIDE_INDEX:
        ow0 = ow0.to(tl.int64)
    ix0 = ow0 * STRIDE_W - PAD_W
    ix = (ix0 + dx)[:, None] + (cols * STRIDE_W)[None, :]
    ow_ok = (ow0 + cols) < OW
    x_mask = (row_ok[:, None] & (ix >= 0) & (ix < W) & ow_ok[None, :])[:, None, :]
    dy_mask = ow_ok[None, :]
    if HAS_CHANNEL_TAIL:
        x_mask = x_mask & chan_ok[None, :, None]
        dy_mask = dy_mask & chan_ok[:, None]
    return _load_step(acc, x_ptrs0 + (x_row + ix0 * stride_xw), dy_ptrs0 + (dy_row + ow0 * stride_dyw),
                      x_mask, dy_mask, True)


@triton.jit
def _inner_segments(acc, lo, hi, x_ptrs0, dy_ptrs0, x_row, dy_row, x_mask, dy_mask,
                    STRIDE_W, PAD_W, stride_xw, stride_dyw,
                    BLOCK_W: tl.constexpr, IS_MASKED: tl.constexpr, IS_WIDE_INDEX: tl.constexpr):
    """Segments [lo, hi) of one row, all inside the input's columns: the masks are loop-invariant."""
    for b in range(lo, hi):
        ow0 = b * BLOCK_W
        if IS_WIDE_INDEX:
            ow0 = ow0.to(tl.int64)
        acc = _load_step(acc, x_ptrs0 + (x_row + (ow0 * STRIDE_W - PAD_W) * stride_xw),
                         dy_ptrs0 + (dy_row + ow0 * stride_dyw), x_mask, dy_mask, IS_MASKED)
    return acc


@triton.jit
def _wgrad_direct_kernel(
    X,  # input (N, C_in, D, H, W), any strides
    DY,  # grad_output (N, C_out, OD, OH, OW), any strides
    OUT,  # dW (C_out, 1, FZ, FY, FX) when SPLIT_K == 1, else the fp32 workspace (split, C_out, taps)
    D, H, W,
    OD, OH, OW,
    FZ, FY, FX,
    STRIDE_D, STRIDE_H, STRIDE_W,
    PAD_D, PAD_H, PAD_W,
    DIL_D, DIL_H, DIL_W,
    TAPS,  # FZ*FY*FX
    C_OUT,  # output channels (dW rows)
    KPG,  # output channels per group: input channel = output channel // KPG
    COL_BLOCKS,  # cdiv(OW, BLOCK_W): segments per output row
    STEPS,  # N*OD*OH*COL_BLOCKS: segments a channel block walks in all
    STEPS_PER_SPLIT,  # segments per split; the last split may hold fewer (or none: it stores zeros)
    COL_INNER_LO, COL_INNER_HI,  # segments [LO, HI) of a row need no column mask (host-computed)
    stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oz, stride_oy, stride_ox,  # OUT; stride_os spans splits
    BLOCK_C: tl.constexpr,  # output channels per program (Tile.block_m)
    BLOCK_T: tl.constexpr,  # filter taps per program, a power of two >= 1 (Tile.block_n)
    BLOCK_W: tl.constexpr,  # output columns per step (Tile.block_k)
    HAS_CHANNEL_TAIL: tl.constexpr,  # C_OUT % BLOCK_C != 0: the last channel block is masked
    IS_ONE_COL_BLOCK: tl.constexpr,  # COL_BLOCKS == 1: the column mask is built once per program
    IS_WIDE_INDEX: tl.constexpr,  # 64-bit offsets, for operands whose offsets reach 2**31
):
    pid_c = tl.program_id(0)
    split = tl.program_id(1)
    pid_t = tl.program_id(2)

    taps = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    tap_ok = taps < TAPS
    # Padding taps (past TAPS) read where the last tap reads: in bounds whenever it is, so the
    # interior loads need no tap mask; their sums are never stored.
    _, tap_z, tap_y, tap_x = _split_taps(tl.minimum(taps, TAPS - 1), FZ, FY, FX)
    dz = tap_z * DIL_D
    dy_ = tap_y * DIL_H
    dx = tap_x * DIL_W
    chans = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < C_OUT
    cols = tl.arange(0, BLOCK_W)
    x_chans = chans // KPG
    if IS_WIDE_INDEX:
        dz = dz.to(tl.int64)
        dy_ = dy_.to(tl.int64)
        dx = dx.to(tl.int64)
        x_chans = x_chans.to(tl.int64)
        chans = chans.to(tl.int64)
        cols = cols.to(tl.int64)

    # The one pointer tensor per operand, built once; a step adds a scalar.
    x_tap_offsets = (dz * stride_xd + dy_ * stride_xh + dx * stride_xw)[:, None, None] \
        + (x_chans * stride_xc)[None, :, None] + (cols * (STRIDE_W * stride_xw))[None, None, :]
    x_ptrs0 = X + x_tap_offsets
    dy_ptrs0 = DY + (chans * stride_dyc)[:, None] + (cols * stride_dyw)[None, :]
    if IS_ONE_COL_BLOCK:  # the one segment starts at ow = 0 in every row
        ix_once = (dx[:, None] - PAD_W) + (cols * STRIDE_W)[None, :]
        col_mask_once = (ix_once >= 0) & (ix_once < W) & (cols < OW)[None, :]
    span_z = (FZ - 1) * DIL_D
    span_y = (FY - 1) * DIL_H

    acc = tl.zeros((BLOCK_T, BLOCK_C, BLOCK_W), dtype=tl.float32)
    step_lo = split * STEPS_PER_SPLIT
    step_hi = tl.minimum(step_lo + STEPS_PER_SPLIT, STEPS)
    for row in range(step_lo // COL_BLOCKS, tl.cdiv(step_hi, COL_BLOCKS)):
        oh = row % OH
        rest = row // OH
        od = rest % OD
        n = rest // OD
        if IS_WIDE_INDEX:
            n = n.to(tl.int64)
            od = od.to(tl.int64)
            oh = oh.to(tl.int64)
        iz0 = od * STRIDE_D - PAD_D
        iy0 = oh * STRIDE_H - PAD_H
        iz = iz0 + dz
        iy = iy0 + dy_
        row_ok = (iz >= 0) & (iz < D) & (iy >= 0) & (iy < H)  # [BLOCK_T], once per row
        x_row = n * stride_xn + iz0 * stride_xd + iy0 * stride_xh
        dy_row = n * stride_dyn + od * stride_dyd + oh * stride_dyh
        first = row * COL_BLOCKS
        b_lo = tl.maximum(step_lo - first, 0)
        b_hi = tl.minimum(step_hi - first, COL_BLOCKS)
        if IS_ONE_COL_BLOCK:
            x_mask = (row_ok[:, None] & col_mask_once)[:, None, :]
            dy_mask = (cols < OW)[None, :]
            if HAS_CHANNEL_TAIL:
                x_mask = x_mask & chan_ok[None, :, None]
                dy_mask = dy_mask & chan_ok[:, None]
            for b in range(b_lo, b_hi):  # zero or one segment
                acc = _load_step(acc, x_ptrs0 + (x_row - PAD_W * stride_xw), dy_ptrs0 + dy_row, x_mask, dy_mask, True)
        else:
            inner_lo = tl.minimum(b_hi, tl.maximum(b_lo, COL_INNER_LO))
            inner_hi = tl.maximum(inner_lo, tl.minimum(b_hi, COL_INNER_HI))
            # Interior segments: every tap's column is inside the input and every column is an
            # output column. In a row whose every tap row is inside too, no mask at all (but the
            # channel tail's); otherwise the row mask, hoisted out of the loop.
            row_inside = (iz0 >= 0) & (iz0 + span_z < D) & (iy0 >= 0) & (iy0 + span_y < H)
            if row_inside:
                if HAS_CHANNEL_TAIL:
                    acc = _inner_segments(acc, inner_lo, inner_hi, x_ptrs0, dy_ptrs0, x_row, dy_row,
                                          chan_ok[None, :, None], chan_ok[:, None], STRIDE_W, PAD_W,
                                          stride_xw, stride_dyw, BLOCK_W, True, IS_WIDE_INDEX)
                else:
                    acc = _inner_segments(acc, inner_lo, inner_hi, x_ptrs0, dy_ptrs0, x_row, dy_row,
                                          chan_ok[None, :, None], chan_ok[:, None], STRIDE_W, PAD_W,
                                          stride_xw, stride_dyw, BLOCK_W, False, IS_WIDE_INDEX)
            else:
                x_mask = row_ok[:, None, None]
                if HAS_CHANNEL_TAIL:
                    x_mask = x_mask & chan_ok[None, :, None]
                acc = _inner_segments(acc, inner_lo, inner_hi, x_ptrs0, dy_ptrs0, x_row, dy_row,
                                      x_mask, chan_ok[:, None], STRIDE_W, PAD_W, stride_xw, stride_dyw,
                                      BLOCK_W, True, IS_WIDE_INDEX)
            # Border segments (left padding, right padding, the row's last partial segment):
            # the column mask per (tap, column), from scalars and the precomputed tap vector.
            for b in range(b_lo, inner_lo):
                acc = _border_step(acc, b, x_ptrs0, dy_ptrs0, x_row, dy_row, row_ok, chan_ok, dx, cols,
                                   W, OW, STRIDE_W, PAD_W, stride_xw, stride_dyw,
                                   BLOCK_W, HAS_CHANNEL_TAIL, IS_WIDE_INDEX)
            for b in range(inner_hi, b_hi):
                acc = _border_step(acc, b, x_ptrs0, dy_ptrs0, x_row, dy_row, row_ok, chan_ok, dx, cols,
                                   W, OW, STRIDE_W, PAD_W, stride_xw, stride_dyw,
                                   BLOCK_W, HAS_CHANNEL_TAIL, IS_WIDE_INDEX)

    part = tl.sum(acc, axis=2)  # [BLOCK_T, BLOCK_C]
    out_off = (tap_z * stride_oz + tap_y * stride_oy + tap_x * stride_ox)[:, None] + (chans * stride_ok)[None, :]
    tl.store(OUT + split.to(tl.int64) * stride_os + out_off, part.to(OUT.dtype.element_ty),
             mask=tap_ok[:, None] & chan_ok[None, :])
