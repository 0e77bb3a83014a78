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
def _channel_bases(X, DY, chan, KPG, stride_xc, stride_dyc, IS_WIDE_INDEX: tl.constexpr):
    """(output channel, X and dY base pointers) of a one-channel program; the channel widened to
    64 bits where offsets need it (it also addresses dW)."""
    chan_x = chan // KPG
    if IS_WIDE_INDEX:
        chan = chan.to(tl.int64)
        chan_x = chan_x.to(tl.int64)
    return chan, X + chan_x * stride_xc, DY + chan * stride_dyc


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

    chan, x_chan, dy_chan = _channel_bases(X, DY, chan, KPG, stride_xc, stride_dyc, IS_WIDE_INDEX)

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


@triton.jit(do_not_specialize=UNSPECIALISED)
def _wgrad_shifted_outer_kernel(
    X,  # input (N, C, rows, columns) in the outer kernel's axes, any strides
    DY,  # grad_output (N, K, out rows, out columns), any strides
    OUT,  # dW (K, 1, FY, FX) when SPLIT_K == 1, else the fp32 workspace (split, K, taps)
    H, W, OH, OW, FY, FX,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
    BATCH,
    KPG,  # output channels per input channel
    W_ALIGNED,  # W // ALIGN: the column bound is W_ALIGNED * ALIGN (== W whenever ALIGN > 1)
    OW_ALIGNED,  # OW // ALIGN, likewise for the output columns
    OW_BLOCKS,  # cdiv(OW, BLOCK_M): output-column blocks, looped inside the program
    SPLIT_K,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oy, stride_ox,
    NW: tl.constexpr,  # X columns per ky (power of two) >= ALIGN - 1 + (BLOCK_M-1)*STRIDE_W + (FX-1)*DIL_W + 1
    KX_BLOCK: tl.constexpr,  # power of two >= FX
    ALIGN: tl.constexpr,  # elements per 16 bytes when the launcher proved every row start aligned, else 1
    BLOCK_M: tl.constexpr,  # output columns a GEMM covers (M)
    BLOCK_N: tl.constexpr,  # KY_CHUNK ky x NW input columns (N)
    BLOCK_K: tl.constexpr,  # (n, output row) pairs per step
    DOT_PRECISION: tl.constexpr, IS_UPCAST_OPERANDS: tl.constexpr, IS_WIDE_INDEX: tl.constexpr,
    PROMOTE_STEPS: tl.constexpr,
):
    """The outer-product formulation (MegEngine's DW-IGEMM / cutlass example 19, for dW): per
    channel and ky, C_ky[ow, j] = sum over (n, oh) of dY[n, oh, ow0 + ow] * X[n, oh*s_h + ky*d_h
    - p_h, xs + j] is a plain GEMM of two plain tiles (each operand element loaded once a ky, no
    Hankel shift), and dW[ky, kx] = sum over ow of C_ky[ow, delta + ow*s_w + kx*d_w] is a diagonal
    sum done once per (program, column block) after the whole reduction, with tl.gather.

    N holds KY_CHUNK = BLOCK_N // NW consecutive ky (column c = (ky_l, j)): the dY tile is loaded
    once a step for all of them. xs = ow0*s_w - p_w rounded down to a multiple of ALIGN (delta the
    remainder), so with ALIGN > 1 every X row segment starts on 16 bytes. Grid: (K * SPLIT_K, ky
    chunks, 1); the output-column blocks are an outer loop inside the program, so each program
    owns its dW taps (no atomics) and split s reduces a contiguous slice of the (n, oh) steps."""
    KY_CHUNK: tl.constexpr = BLOCK_N // NW
    Q: tl.constexpr = KY_CHUNK * KX_BLOCK  # taps a program owns: (ky_l, kx)
    pid_cs = tl.program_id(0)
    pid_y = tl.program_id(1)
    chan = pid_cs // SPLIT_K
    split = pid_cs % SPLIT_K
    ky0 = pid_y * KY_CHUNK

    # Output rows whose X row lies inside the input for some ky of the chunk (numerators >= 0).
    ky_last = tl.minimum(ky0 + KY_CHUNK, FY) - 1
    oh_lo = tl.cdiv(tl.maximum(PAD_H - ky_last * DIL_H, 0), STRIDE_H)
    top = H - 1 + PAD_H - ky0 * DIL_H
    oh_hi = tl.minimum(tl.maximum(top, 0) // STRIDE_H + 1, OH)
    oh_hi = tl.where(top >= 0, oh_hi, 0)
    ohr = tl.maximum(oh_hi - oh_lo, 1)  # rows a image (>= 1 so the step's division is defined)
    rows_total = tl.where(oh_hi > oh_lo, BATCH * ohr, 0)
    steps = tl.cdiv(rows_total, BLOCK_K)
    per_split = tl.cdiv(steps, SPLIT_K)
    t_lo = split * per_split
    t_hi = tl.minimum(t_lo + per_split, steps)

    offs_m = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    ky_l = cols // NW
    j = cols % NW
    mask_ky = (ky0 + ky_l) < FY
    x_row_shift = (ky0 + ky_l) * DIL_H - PAD_H  # X row of column c is oh*s_h + this
    lanes = tl.arange(0, BLOCK_K)
    q = tl.arange(0, Q)
    q_ky = q // KX_BLOCK
    q_kx = q % KX_BLOCK

    chan, x_chan, dy_chan = _channel_bases(X, DY, chan, KPG, stride_xc, stride_dyc, IS_WIDE_INDEX)

    dw = tl.zeros((Q,), dtype=tl.float32)
    for owb in range(0, OW_BLOCKS):
        ow0 = owb * BLOCK_M
        xcol0 = ow0 * STRIDE_W - PAD_W
        delta = ((xcol0 % ALIGN) + ALIGN) % ALIGN
        xs = ((xcol0 - delta) // ALIGN) * ALIGN  # exact; written so Triton sees xs % ALIGN == 0
        xcols = xs + j
        mask_n = mask_ky & (xcols >= 0) & (xcols < W_ALIGNED * ALIGN)
        ow = ow0 + offs_m
        mask_m = ow < OW_ALIGNED * ALIGN
        if ALIGN == 1:
            a_col = ow * stride_dyw
            b_col = xcols * stride_xw
            dy_seg = 0
            x_seg = 0
        else:  # stride_dyw == stride_xw == 1 (the launcher's condition for ALIGN > 1): the segment
            a_col = offs_m  # start (ow0, xs) joins the row offsets, which are multiples of ALIGN
            b_col = j
            dy_seg = ow0
            x_seg = xs
        if IS_WIDE_INDEX:
            a_col = a_col.to(tl.int64)
            b_col = b_col.to(tl.int64)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for t_outer in range(t_lo, t_hi, PROMOTE_STEPS):
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            t_end = tl.minimum(t_outer + PROMOTE_STEPS, t_hi)
            for t in range(t_outer, t_end):
                r = t * BLOCK_K + lanes
                mask_r = r < rows_total
                n = r // ohr
                oh = oh_lo + r % ohr
                if IS_WIDE_INDEX:
                    n = n.to(tl.int64)
                    oh = oh.to(tl.int64)
                # A: dY rows (n, oh), columns ow0 + m: one plain tile, (BLOCK_M, BLOCK_K).
                dy_row = tl.multiple_of(n * stride_dyn + oh * stride_dyh + dy_seg, [ALIGN])
                a = tl.load(dy_chan + dy_row[None, :] + a_col[:, None], mask=mask_m[:, None] & mask_r[None, :],
                            other=0.0)
                # B: X rows oh*s_h + ky*d_h - p_h, columns xs + j: KY_CHUNK plain row segments.
                x_row = (oh * STRIDE_H)[:, None] + x_row_shift[None, :]
                x_base = tl.multiple_of(n[:, None] * stride_xn + x_row * stride_xh + x_seg, [ALIGN, ALIGN])
                mask_b = mask_r[:, None] & mask_n[None, :] & (x_row >= 0) & (x_row < H)
                b = tl.load(x_chan + x_base + b_col[None, :], mask=mask_b, other=0.0)
                if IS_UPCAST_OPERANDS:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                part = tl.dot(a, b, part, input_precision=DOT_PRECISION)
            acc += part

        # dW[ky0 + ky_l, kx] += sum over m of C[m, ky_l*NW + delta + m*s_w + kx*d_w], once a block.
        diag = delta + offs_m[:, None] * STRIDE_W + (q_kx * DIL_W)[None, :]
        valid = (ow < OW)[:, None] & (q_kx < FX)[None, :] & (diag < NW)
        idx = tl.where(valid, (q_ky * NW)[None, :] + diag, 0)
        picked = tl.gather(acc, idx, 1)
        dw += tl.sum(tl.where(valid, picked, 0.0), axis=0)

    ky = ky0 + q_ky
    mask = (ky < FY) & (q_kx < FX)
    split_off = split.to(tl.int64) * stride_os
    out_ptrs = OUT + split_off + chan * stride_ok + ky * stride_oy + q_kx * stride_ox
    tl.store(out_ptrs, dw.to(OUT.dtype.element_ty), mask=mask)
