"""Triton kernels of the split-K two-stage family.

Every problem is handled as 3-D (1-D and 2-D pad the outer dims with size 1).
Per group ``g`` the weight gradient is a GEMM

    dW_g[m, j] = sum_k dY_g[m, k] * im2col(X_g)[k, j]

with ``m`` an output channel of the group (M = kpg), ``j = ((c*FZ + z)*FY + y)*FX + x``
a filter tap of input channel ``c`` (N_gemm = cpg*FZ*FY*FX), and
``k = ((n*OD + od)*OH + oh)*OW + ow`` (K_gemm = N*OD*OH*OW).

Grid of stage 1: (groups * split_k, tiles over N_gemm, tiles over M). Each
program reduces one contiguous slice of K_gemm, ``K_PER_SPLIT`` long (a
multiple of BLOCK_K), in a fixed order, and stores its tile: straight into dW
when split_k == 1, else as fp32 partials into the workspace. Stage 2 sums the
partials over the splits in split order and casts. No atomics: runs are
bitwise reproducible.

The tap decoding, the tile accumulation and stage 2 are the provider core's shared
blocks (:mod:`convwgrad.provider.blocks.jit`); they are imported here because Triton
resolves a jit callee by name in the caller's module.
"""

import triton
import triton.language as tl

from convwgrad.provider.blocks.jit import _accumulate_tile, _split_taps


@triton.jit
def _wgrad_splitk_kernel(
    X,  # input (N, C, D, H, W), any strides
    DY,  # grad_output (N, K, OD, OH, OW), any strides
    OUT,  # dW (K, cpg, FZ, FY, FX) when SPLIT_K == 1, else the fp32 workspace (split, K, N_gemm)
    D, H, W,  # input spatial size
    OD, OH, OW,  # output spatial size
    FZ, FY, FX,  # filter size
    STRIDE_D, STRIDE_H, STRIDE_W,
    PAD_D, PAD_H, PAD_W,  # padding before each dim (the after side only bounds the output size)
    DIL_D, DIL_H, DIL_W,
    CPG, KPG,  # channels per group: input, output
    GEMM_N, GEMM_K,
    K_PER_SPLIT,  # reduction length per split, a multiple of BLOCK_K
    SPLIT_K,
    stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oc, stride_oz, stride_oy, stride_ox,  # OUT; stride_os spans splits
    BLOCK_M: tl.constexpr,  # tile over M (output channels of a group)
    BLOCK_N: tl.constexpr,  # tile over N_gemm (filter taps x input channels)
    BLOCK_K: tl.constexpr,  # reduction step over N*OD*OH*OW
    DOT_PRECISION: tl.constexpr,  # "ieee" or "tf32" (fp32 operands only)
    IS_UPCAST_OPERANDS: tl.constexpr,  # interpreter only: its bf16 tl.dot is wrong, so dot in fp32
    IS_WIDE_INDEX: tl.constexpr,  # 64-bit offsets, for operands whose offsets reach 2**31
    PROMOTE_STEPS: tl.constexpr,  # BLOCK_K steps per matrix-unit accumulator before an fp32 add
):
    pid_gs = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_m = tl.program_id(2)
    group = pid_gs // SPLIT_K
    split = pid_gs % SPLIT_K

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < KPG
    mask_n = offs_n < GEMM_N
    chan_c, tap_z, tap_y, tap_x = _split_taps(offs_n, FZ, FY, FX)

    chan_x = group * CPG + chan_c
    chan_dy = group * KPG + offs_m
    acc = _accumulate_tile(
        X, DY, chan_x, chan_dy, tap_z, tap_y, tap_x, mask_m, mask_n, split, K_PER_SPLIT, GEMM_K,
        D, H, W, OD, OH, OW, STRIDE_D, STRIDE_H, STRIDE_W, PAD_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
        stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
        stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
        BLOCK_M, BLOCK_N, BLOCK_K, DOT_PRECISION, IS_UPCAST_OPERANDS, IS_WIDE_INDEX, PROMOTE_STEPS,
    )

    row = group * KPG + offs_m
    # A workspace of split_k dWs passes 2**31 elements long before one dW does.
    split_off = split.to(tl.int64) * stride_os
    if IS_WIDE_INDEX:
        row = row.to(tl.int64)
    col_off = chan_c * stride_oc + tap_z * stride_oz + tap_y * stride_oy + tap_x * stride_ox
    out_ptrs = OUT + split_off + row[:, None] * stride_ok + col_off[None, :]
    tl.store(out_ptrs, acc.to(OUT.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
