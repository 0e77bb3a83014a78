"""Shared Triton building blocks of the tiled dW families (the jit layer).

Every problem is handled as 3-D (1-D and 2-D pad the outer dims with size 1), and
dW's GEMM view is indexed as in the split-K family: column
``j = ((c*FZ + z)*FY + y)*FX + x`` (input channel ``c``, filter tap ``z, y, x``) and
reduction index ``k = ((n*OD + od)*OH + oh)*OW + ow``.

- :func:`_split_taps`: decode a GEMM column into (channel, tap).
- :func:`_accumulate_tile`: one program's fp32 tile of dY x im2col(X) over its slice of
  K_gemm, in a fixed order, with the two-level accumulation that bounds the matrix units'
  truncation bias.
- :func:`_splitk_reduce_kernel`: stage 2, the sum in a fixed order of the fp32 partials of a
  (split, K, N_gemm) workspace into dW. No atomics: runs are bitwise reproducible.

Triton resolves a jit function's callees by name in the caller's module globals, so a
family's kernels module imports the helpers it calls into its own namespace.
"""

import triton
import triton.language as tl


@triton.jit
def _split_taps(index, FZ, FY, FX):
    """Column index ((c*FZ + z)*FY + y)*FX + x of dW's GEMM view -> (c, z, y, x)."""
    tap_x = index % FX
    rest = index // FX
    tap_y = rest % FY
    rest = rest // FY
    return rest // FZ, rest % FZ, tap_y, tap_x


@triton.jit
def _accumulate_tile(
    X, DY,
    chan_x, chan_dy,  # per-column input channel and per-row grad_output channel
    tap_z, tap_y, tap_x,  # per-column filter tap
    mask_m, mask_n,  # valid rows and columns of the tile
    split, K_PER_SPLIT, GEMM_K,  # this program reduces [split * K_PER_SPLIT, +K_PER_SPLIT) of K_gemm
    D, H, W, OD, OH, OW,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
    stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, IS_UPCAST_OPERANDS: tl.constexpr, IS_WIDE_INDEX: tl.constexpr,
    PROMOTE_STEPS: tl.constexpr,
):
    """sum over this program's slice of k of dY[row, k] * im2col(X)[k, col], in fp32."""
    if IS_WIDE_INDEX:
        chan_x = chan_x.to(tl.int64)
        chan_dy = chan_dy.to(tl.int64)
    x_chan_off = chan_x * stride_xc
    dy_chan_off = chan_dy * stride_dyc
    k_lo = split * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, GEMM_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Two-level accumulation: the matrix units' fp32 accumulate is not round-to-nearest (on
    # Hopper it truncates, ~2**-23 bias per step), which over 1e5 steps biased dW by 1%. A
    # fresh accumulator per PROMOTE_STEPS steps, promoted with ordinary fp32 adds, bounds it.
    for k_outer in range(k_lo, k_hi, BLOCK_K * PROMOTE_STEPS):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        steps = tl.minimum(PROMOTE_STEPS, tl.cdiv(k_hi - k_outer, BLOCK_K))
        for step in range(0, steps):
            offs_k = k_outer + step * BLOCK_K + tl.arange(0, BLOCK_K)
            if IS_WIDE_INDEX:
                offs_k = offs_k.to(tl.int64)
            mask_k = offs_k < k_hi
            ow = offs_k % OW
            rest_k = offs_k // OW
            oh = rest_k % OH
            rest_k = rest_k // OH
            od = rest_k % OD
            n = rest_k // OD

            dy_pos = n * stride_dyn + od * stride_dyd + oh * stride_dyh + ow * stride_dyw
            a = tl.load(
                DY + dy_chan_off[:, None] + dy_pos[None, :],
                mask=mask_m[:, None] & mask_k[None, :],
                other=0.0,
            )
            iz = (od * STRIDE_D - PAD_D)[:, None] + (tap_z * DIL_D)[None, :]
            iy = (oh * STRIDE_H - PAD_H)[:, None] + (tap_y * DIL_H)[None, :]
            ix = (ow * STRIDE_W - PAD_W)[:, None] + (tap_x * DIL_W)[None, :]
            inside = (iz >= 0) & (iz < D) & (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
            x_off = (n * stride_xn)[:, None] + x_chan_off[None, :] + iz * stride_xd + iy * stride_xh + ix * stride_xw
            b = tl.load(X + x_off, mask=mask_k[:, None] & mask_n[None, :] & inside, other=0.0)
            if IS_UPCAST_OPERANDS:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, b, part, input_precision=DOT_PRECISION)
        acc += part
    return acc


@triton.jit
def _splitk_reduce_kernel(
    WS,  # fp32 partials (SPLIT_K, K, N_gemm), contiguous
    OUT,  # dW (K, cpg, FZ, FY, FX), any strides
    TOTAL,  # K * N_gemm: elements of one split
    FZ, FY, FX,
    GEMM_N,
    SPLIT_K,
    stride_ok, stride_oc, stride_oz, stride_oy, stride_ox,
    BLOCK: tl.constexpr,  # elements of dW per program
    SPLIT_BLOCK: tl.constexpr,  # splits one step loads (a [SPLIT_BLOCK, BLOCK] tile)
    IS_WIDE_INDEX: tl.constexpr,  # 64-bit offsets for workspaces of 2**31 elements or more
):
    # A [SPLIT_BLOCK, BLOCK] tile a step keeps many independent loads in flight: a program looping
    # over splits one row at a time is latency-bound (~0.12 us a split on the H200, 72 us for 598
    # splits of a 4704-element dW). Rows are added elementwise in split order, then one fixed tree
    # over SPLIT_BLOCK: the same partials give the same bits on every run.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.arange(0, SPLIT_BLOCK)
    if IS_WIDE_INDEX:
        offs = offs.to(tl.int64)
        rows = rows.to(tl.int64)
    mask = offs < TOTAL
    acc = tl.zeros((SPLIT_BLOCK, BLOCK), dtype=tl.float32)
    for first in range(0, SPLIT_K, SPLIT_BLOCK):
        split = first + rows
        acc += tl.load(WS + split[:, None] * TOTAL + offs[None, :], mask=(split < SPLIT_K)[:, None] & mask[None, :],
                       other=0.0)
    total = tl.sum(acc, axis=0)
    row = offs // GEMM_N
    chan_c, tap_z, tap_y, tap_x = _split_taps(offs % GEMM_N, FZ, FY, FX)
    out_off = row * stride_ok + chan_c * stride_oc + tap_z * stride_oz + tap_y * stride_oy + tap_x * stride_ox
    tl.store(OUT + out_off, total.to(OUT.dtype.element_ty), mask=mask)
