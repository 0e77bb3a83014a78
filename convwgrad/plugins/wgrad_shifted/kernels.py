"""Triton kernel of the shifted-view family: one depthwise channel's dW as a GEMM over taps.

One channel, stride 1, no dilation, for the idea (the kernel handles all three):

    dW[ky, kx] = sum over (n, i, w) of X[n, i + ky_a, w + kx] * dY[n, i + p_h - ky_b, w]

with ky = ky_a + ky_b, the reduction running over (n, i, w): i a "base" input row, w an
output column. The tile is a GEMM whose operands are shifted views of the activations:

- A[m, j] = X[n, i + ky_a, w + kx]: rows m = (ky_hi, kx), ``ky_a = ky_hi * BLOCK_N`` (the
  folded part of ky) and ``kx`` (a Hankel view of an input row: row m is the row shifted by
  kx); columns j = (i, w) of the reduction;
- B[j, col] = dY[n, i + p_h - ky_b, w]: columns col = ky_lo, ``ky_b = ky_base + col``
  (a Toeplitz view: column col is grad_output shifted down by ky_b rows).

C[m, col] = dW[ky_a + ky_b, kx]: every entry of the tile is one filter tap, none computed twice
(the merged family computes Gm x Gm channel pairs and keeps the diagonal). With stride s and
dilation d the maps are the convolution's own: X row ``i + ky_a*d_h``, X column
``ow*s_w + kx*d_w - p_w``, dY row ``(i + p_h - ky_b*d_h) / s_h``, which is a dY row only where
the division is exact (rows of the other phases are masked: stride s_h costs s_h times the
matrix work, not correctness).

The reduction step (BLOCK_K lanes) covers ROWS_PER_STEP whole rows of SEG output columns each
(SEG = OW when a row fits in BLOCK_K, so a 7x7 map packs 9 rows into 64 lanes), or one
SEG = BLOCK_K chunk of a wider row. The step's offsets within the tile are computed once per
program; a step adds one scalar to the base pointers. The row range of a ky tile is only the
rows where both operands can be nonzero.

Problems are posed to the kernel in its own axes: ``rows`` (the axis ky shifts, folded between
the operands) and ``columns`` (the axis kx shifts, on A only). The launcher maps a 2-D problem
to them as (H, W), or (W, H) when only the width has a filter extent, and a 1-D one as (L, -)
with a one-column dummy axis.

Grid: (channels * SPLIT_K, ky tiles, kx tiles). Split s reduces a contiguous slice of the
program's (n, row block, column chunk) steps, in a fixed order; SPLIT_K == 1 stores dW, else
fp32 partials of the true dW into the shared workspace, summed in split order by the shared
stage 2 (:func:`convwgrad.provider.blocks.jit._splitk_reduce_kernel`).
"""

import triton
import triton.language as tl


@triton.jit
def _row_range(ky_base, split, H, OH, FY, PAD_H, DIL_H, BATCH, ROWS_PER_STEP, COL_CHUNKS, SPLIT_K,
               ROW_STRIDE: tl.constexpr, FOLD: tl.constexpr, BLOCK_N: tl.constexpr):
    """The first base row of a ky tile, its row blocks, and this split's slice [t_lo, t_hi) of
    its (n, row block, column chunk) steps. Base rows i are only those where both operands can
    be nonzero: B needs some dY row (ky_b in the tile), A some X row (a real folded ky group)."""
    ky_b_last = tl.minimum(ky_base + BLOCK_N, FY) - 1
    folds = tl.minimum(FOLD, tl.cdiv(FY - ky_base, BLOCK_N))  # ky groups of this tile that are real
    i_lo = tl.maximum(ky_base * DIL_H - PAD_H, -(folds - 1) * BLOCK_N * DIL_H)
    i_hi = tl.minimum((OH - 1) * ROW_STRIDE + ky_b_last * DIL_H - PAD_H, H - 1)
    row_blocks = tl.cdiv(tl.maximum(i_hi - i_lo + 1, 0), ROWS_PER_STEP)
    steps = BATCH * row_blocks * COL_CHUNKS
    per_split = tl.cdiv(steps, SPLIT_K)
    t_lo = split * per_split
    t_hi = tl.minimum(t_lo + per_split, steps)
    return i_lo, row_blocks, t_lo, t_hi


@triton.jit
def _step_origin(t, i_lo, row_blocks, ROWS_PER_STEP, COL_CHUNKS, SEG, IS_WIDE_INDEX: tl.constexpr):
    """Step t -> (image n, first base row i0, first output column ow0): scalars, once a step."""
    chunk = t % COL_CHUNKS
    rest = t // COL_CHUNKS
    n = rest // row_blocks
    i0 = i_lo + (rest % row_blocks) * ROWS_PER_STEP
    ow0 = chunk * SEG
    if IS_WIDE_INDEX:
        n = n.to(tl.int64)
        i0 = i0.to(tl.int64)
        ow0 = ow0.to(tl.int64)
    return n, i0, ow0


#: Paddings are not specialised: with a padding divisible by 16, Triton 3.6 and 3.9 derived
#: 16-byte alignment for the 1-D NCHW operand loads and issued 16-byte cp.async copies that
#: fault at run time ("misaligned address" on the H200: 1-D, C=512, L=2048, k=65 pad 32 and k=33
#: pad 16 faulted, pad 31 and (32, 31) ran; tools/shifted_triage.py, 2026-12-03). Unspecialised,
#: every padding compiles as pad 31 did (offline sm_90 PTX: element loads, no cp.async of 16).
UNSPECIALISED = ["PAD_H", "PAD_W"]


@triton.jit(do_not_specialize=UNSPECIALISED)
def _wgrad_shifted_kernel(
    X,  # input (N, C, rows, columns) in the kernel's axes, any strides
    DY,  # grad_output (N, K, out rows, out columns), any strides
    OUT,  # dW (K, 1, FY, FX) when SPLIT_K == 1, else the fp32 workspace (split, K, taps)
    H, W,  # input rows and columns
    OH, OW,  # output rows and columns
    FY, FX,  # filter rows and columns
    STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,  # (the row stride is the constexpr ROW_STRIDE)
    BATCH,
    KPG,  # output channels per input channel (1: depthwise; > 1: a channel multiplier)
    SEG,  # output columns per row segment of a step: OW if OW <= BLOCK_K, else BLOCK_K
    ROWS_PER_STEP,  # whole row segments per step: BLOCK_K // SEG
    COL_CHUNKS,  # segments per row: cdiv(OW, SEG)
    SPLIT_K,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oy, stride_ox,  # OUT; stride_os spans splits
    ROW_STRIDE: tl.constexpr,  # convolution stride along rows: > 1 masks the dY rows of other phases
    CHANNEL_BLOCK: tl.constexpr,  # channels per program: 1 here (see _wgrad_shifted_cblock_kernel)
    KX_BLOCK: tl.constexpr,  # kx per tile (power of two); BLOCK_M // KX_BLOCK ky groups folded into M
    IS_WHOLE_ROWS: tl.constexpr,  # OW <= BLOCK_K: one column chunk, so column masks are loop-invariant
    BLOCK_M: tl.constexpr,  # A rows: (folded ky group, kx)
    BLOCK_N: tl.constexpr,  # B columns: ky_lo, BLOCK_N consecutive ky
    BLOCK_K: tl.constexpr,  # reduction lanes per step: ROWS_PER_STEP x SEG (n, row, column) points
    DOT_PRECISION: tl.constexpr,  # "ieee" or "tf32" (fp32 operands only)
    IS_UPCAST_OPERANDS: tl.constexpr,  # interpreter only: its bf16 tl.dot is wrong, so dot in fp32
    IS_WIDE_INDEX: tl.constexpr,  # 64-bit offsets, for operands whose offsets reach 2**31
    PROMOTE_STEPS: tl.constexpr,  # steps per matrix-unit accumulator before an fp32 add
):
    FOLD = BLOCK_M // KX_BLOCK  # ky groups folded into M
    pid_cs = tl.program_id(0)
    pid_y = tl.program_id(1)
    pid_x = tl.program_id(2)
    chan = pid_cs // SPLIT_K
    split = pid_cs % SPLIT_K
    ky_base = pid_y * (FOLD * BLOCK_N)
    kx_base = pid_x * KX_BLOCK

    # Tile coordinates, once per program.
    offs_m = tl.arange(0, BLOCK_M)
    ky_a = (offs_m // KX_BLOCK) * BLOCK_N  # folded ky of row m (X shifted down by ky_a rows)
    kx = kx_base + offs_m % KX_BLOCK
    cols = tl.arange(0, BLOCK_N)
    ky_b = ky_base + cols  # ky of column c before the fold (dY shifted up by ky_b rows)
    lanes = tl.arange(0, BLOCK_K)
    lane_row = lanes // SEG
    lane_col = lanes % SEG
    lane_ok = lane_row < ROWS_PER_STEP
    mask_m = (kx < FX) & (ky_base + ky_a < FY)
    mask_n = ky_b < FY

    i_lo, row_blocks, t_lo, t_hi = _row_range(ky_base, split, H, OH, FY, PAD_H, DIL_H, BATCH, ROWS_PER_STEP,
                                              COL_CHUNKS, SPLIT_K, ROW_STRIDE, FOLD, BLOCK_N)

    chan_x = chan // KPG
    if IS_WIDE_INDEX:
        chan = chan.to(tl.int64)
        chan_x = chan_x.to(tl.int64)
    x_chan = X + chan_x * stride_xc
    dy_chan = DY + chan * stride_dyc

    # A: X rows i0 + a_row, columns ow0*s + a_col; offsets relative to the step's base pointer.
    a_row = lane_row[None, :] + (ky_a * DIL_H)[:, None]
    a_col = (lane_col * STRIDE_W)[None, :] + (kx * DIL_W - PAD_W)[:, None]
    # B: dY rows (i0 + b_row) / ROW_STRIDE, columns ow0 + lane_col.
    b_row = lane_row[:, None] + (PAD_H - ky_b * DIL_H)[None, :]
    if IS_WIDE_INDEX:
        a_row = a_row.to(tl.int64)
        a_col = a_col.to(tl.int64)
        b_row = b_row.to(tl.int64)
    a_off = a_row * stride_xh + a_col * stride_xw
    b_col_off = (lane_col * stride_dyw)[:, None]
    if IS_WIDE_INDEX:
        b_col_off = b_col_off.to(tl.int64)
    if ROW_STRIDE == 1:
        b_off = b_row * stride_dyh + b_col_off
    mask_a_static = mask_m[:, None] & lane_ok[None, :]
    mask_b_static = lane_ok[:, None] & mask_n[None, :]
    if IS_WHOLE_ROWS:  # one chunk at ow0 = 0: the column bounds never change
        mask_a_static = mask_a_static & (a_col >= 0) & (a_col < W)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Two-level accumulation, as in the shared tile loop: a fresh matrix-unit accumulator per
    # PROMOTE_STEPS steps, promoted with ordinary fp32 adds (Hopper's accumulate truncates).
    for t_outer in range(t_lo, t_hi, PROMOTE_STEPS):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        t_end = tl.minimum(t_outer + PROMOTE_STEPS, t_hi)
        for t in range(t_outer, t_end):
            n, i0, ow0 = _step_origin(t, i_lo, row_blocks, ROWS_PER_STEP, COL_CHUNKS, SEG, IS_WIDE_INDEX)

            rows_a = i0 + a_row
            mask_a = mask_a_static & (rows_a >= 0) & (rows_a < H)
            if not IS_WHOLE_ROWS:
                cols_a = ow0 * STRIDE_W + a_col
                mask_a = mask_a & (cols_a >= 0) & (cols_a < W) & ((ow0 + lane_col) < OW)[None, :]
            x_step = x_chan + n * stride_xn + i0 * stride_xh + (ow0 * STRIDE_W) * stride_xw
            a = tl.load(x_step + a_off, mask=mask_a, other=0.0)

            rows_b = i0 + b_row  # dY row times ROW_STRIDE
            mask_b = mask_b_static & (rows_b >= 0) & (rows_b < OH * ROW_STRIDE)
            if not IS_WHOLE_ROWS:
                mask_b = mask_b & ((ow0 + lane_col) < OW)[:, None]
            dy_step = dy_chan + n * stride_dyn + ow0 * stride_dyw
            if ROW_STRIDE == 1:
                b = tl.load(dy_step + i0 * stride_dyh + b_off, mask=mask_b, other=0.0)
            else:
                mask_b = mask_b & (rows_b % ROW_STRIDE == 0)
                b = tl.load(dy_step + (rows_b // ROW_STRIDE) * stride_dyh + b_col_off, mask=mask_b, other=0.0)
            if IS_UPCAST_OPERANDS:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, b, part, input_precision=DOT_PRECISION)
        acc += part

    ky = ky_base + ky_a[:, None] + cols[None, :]
    kx2 = kx[:, None]
    mask = (ky < FY) & (kx2 < FX)
    split_off = split.to(tl.int64) * stride_os
    out_ptrs = OUT + split_off + chan * stride_ok + ky * stride_oy + kx2 * stride_ox
    tl.store(out_ptrs, acc.to(OUT.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=UNSPECIALISED)
def _wgrad_shifted_cblock_kernel(
    X, DY, OUT,
    H, W, OH, OW, FY, FX,
    STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
    BATCH,
    KPG,  # 1: a channel block needs adjacent input channels for adjacent output channels
    SEG, ROWS_PER_STEP, COL_CHUNKS,
    SPLIT_K,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oy, stride_ox,
    ROW_STRIDE: tl.constexpr,
    CHANNEL_BLOCK: tl.constexpr,  # CB adjacent channels per program: the batch dim of a 3-D tl.dot
    KX_BLOCK: tl.constexpr,
    IS_WHOLE_ROWS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, IS_UPCAST_OPERANDS: tl.constexpr, IS_WIDE_INDEX: tl.constexpr,
    PROMOTE_STEPS: tl.constexpr,
):
    """The same GEMM for CB adjacent channels at once (a batched 3-D tl.dot): in channels_last the
    CB channels of one operand element are contiguous, so each thread's loads are CB-wide vectors
    (16 bytes for bf16 at CB = 8) where the one-channel kernel loads single elements. Arguments as
    in :func:`_wgrad_shifted_kernel`; the launcher admits it for kpg == 1 and C % CB == 0."""
    FOLD = BLOCK_M // KX_BLOCK
    pid_cs = tl.program_id(0)
    pid_y = tl.program_id(1)
    pid_x = tl.program_id(2)
    block = pid_cs // SPLIT_K
    split = pid_cs % SPLIT_K
    ky_base = pid_y * (FOLD * BLOCK_N)
    kx_base = pid_x * KX_BLOCK

    cb = tl.arange(0, CHANNEL_BLOCK)
    chan = block * CHANNEL_BLOCK + cb
    offs_m = tl.arange(0, BLOCK_M)
    ky_a = (offs_m // KX_BLOCK) * BLOCK_N
    kx = kx_base + offs_m % KX_BLOCK
    cols = tl.arange(0, BLOCK_N)
    ky_b = ky_base + cols
    lanes = tl.arange(0, BLOCK_K)
    lane_row = lanes // SEG
    lane_col = lanes % SEG
    lane_ok = lane_row < ROWS_PER_STEP
    mask_m = (kx < FX) & (ky_base + ky_a < FY)
    mask_n = ky_b < FY

    i_lo, row_blocks, t_lo, t_hi = _row_range(ky_base, split, H, OH, FY, PAD_H, DIL_H, BATCH, ROWS_PER_STEP,
                                              COL_CHUNKS, SPLIT_K, ROW_STRIDE, FOLD, BLOCK_N)
    if IS_WIDE_INDEX:
        chan = chan.to(tl.int64)
    x_chan = (chan * stride_xc)[:, None, None]
    dy_chan = (chan * stride_dyc)[:, None, None]

    a_row = lane_row[None, :] + (ky_a * DIL_H)[:, None]
    a_col = (lane_col * STRIDE_W)[None, :] + (kx * DIL_W - PAD_W)[:, None]
    b_row = lane_row[:, None] + (PAD_H - ky_b * DIL_H)[None, :]
    if IS_WIDE_INDEX:
        a_row = a_row.to(tl.int64)
        a_col = a_col.to(tl.int64)
        b_row = b_row.to(tl.int64)
    a_off = x_chan + (a_row * stride_xh + a_col * stride_xw)[None, :, :]
    b_col_off = (lane_col * stride_dyw)[:, None]
    if IS_WIDE_INDEX:
        b_col_off = b_col_off.to(tl.int64)
    if ROW_STRIDE == 1:
        b_off = dy_chan + (b_row * stride_dyh + b_col_off)[None, :, :]
    mask_a_static = mask_m[:, None] & lane_ok[None, :]
    mask_b_static = lane_ok[:, None] & mask_n[None, :]
    if IS_WHOLE_ROWS:
        mask_a_static = mask_a_static & (a_col >= 0) & (a_col < W)

    acc = tl.zeros((CHANNEL_BLOCK, BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t_outer in range(t_lo, t_hi, PROMOTE_STEPS):
        part = tl.zeros((CHANNEL_BLOCK, BLOCK_M, BLOCK_N), dtype=tl.float32)
        t_end = tl.minimum(t_outer + PROMOTE_STEPS, t_hi)
        for t in range(t_outer, t_end):
            n, i0, ow0 = _step_origin(t, i_lo, row_blocks, ROWS_PER_STEP, COL_CHUNKS, SEG, IS_WIDE_INDEX)
            rows_a = i0 + a_row
            mask_a = mask_a_static & (rows_a >= 0) & (rows_a < H)
            if not IS_WHOLE_ROWS:
                cols_a = ow0 * STRIDE_W + a_col
                mask_a = mask_a & (cols_a >= 0) & (cols_a < W) & ((ow0 + lane_col) < OW)[None, :]
            x_step = X + n * stride_xn + i0 * stride_xh + (ow0 * STRIDE_W) * stride_xw
            a = tl.load(x_step + a_off, mask=mask_a[None, :, :], other=0.0)

            rows_b = i0 + b_row
            mask_b = mask_b_static & (rows_b >= 0) & (rows_b < OH * ROW_STRIDE)
            if not IS_WHOLE_ROWS:
                mask_b = mask_b & ((ow0 + lane_col) < OW)[:, None]
            dy_step = DY + n * stride_dyn + ow0 * stride_dyw
            if ROW_STRIDE == 1:
                b = tl.load(dy_step + i0 * stride_dyh + b_off, mask=mask_b[None, :, :], other=0.0)
            else:
                mask_b = mask_b & (rows_b % ROW_STRIDE == 0)
                b_rows_off = ((rows_b // ROW_STRIDE) * stride_dyh + b_col_off)[None, :, :]
                b = tl.load(dy_step + dy_chan + b_rows_off, mask=mask_b[None, :, :], other=0.0)
            if IS_UPCAST_OPERANDS:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, b, part, input_precision=DOT_PRECISION)
        acc += part

    ky = ky_base + ky_a[:, None] + cols[None, :]
    kx2 = kx[:, None]
    mask = (ky < FY) & (kx2 < FX)
    split_off = split.to(tl.int64) * stride_os
    out_ptrs = OUT + split_off + (chan * stride_ok)[:, None, None] + (ky * stride_oy + kx2 * stride_ox)[None, :, :]
    tl.store(out_ptrs, acc.to(OUT.dtype.element_ty), mask=mask[None, :, :])
