"""Triton kernel of the merged-group family (depthwise: cpg == kpg == 1).

One program computes GROUP_MERGE (Gm) adjacent groups. The merged GEMM has
M = Gm rows (the merged groups' output channels) and N_gemm = taps * Gm
columns, column ``j = tap * Gm + c``: for a fixed tap, the Gm input channels
are adjacent, so in a channels_last tensor the B operand's loads are Gm-wide
contiguous vectors (16 bytes for bf16 at Gm = 8), and so are the A operand's.
The tile computes every (row, c) pair; only the diagonal row == c is dW, and the
epilogue folds that test into its store mask, so off-diagonal pairs cost no store.

Grid: (G/Gm * split_k, tiles over taps*Gm, 1). split_k == 1 stores dW; split_k > 1
stores fp32 partials of the true dW into the workspace, reduced by the shared ordered
reduction. The tap decoding, the tile accumulation and that reduction are the provider
core's blocks (:mod:`convwgrad.provider.blocks.jit`); the helpers are imported here because
Triton resolves a jit callee by name in the caller's module.
"""

import triton
import triton.language as tl

from convwgrad.provider.blocks.jit import _accumulate_tile, _split_taps


@triton.jit
def _wgrad_merged_kernel(
    X,  # input (N, C, D, H, W), any strides; channels_last gives the vector loads
    DY,  # grad_output (N, C, OD, OH, OW)
    OUT,  # dW (C, 1, FZ, FY, FX) when SPLIT_K == 1, else the fp32 workspace (split, C, taps)
    D, H, W,
    OD, OH, OW,
    FZ, FY, FX,
    STRIDE_D, STRIDE_H, STRIDE_W,
    PAD_D, PAD_H, PAD_W,
    DIL_D, DIL_H, DIL_W,
    TAPS,  # FZ*FY*FX: the true N_gemm of one group
    GEMM_K,
    K_PER_SPLIT,  # reduction length per split, a multiple of BLOCK_K
    SPLIT_K,
    stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oz, stride_oy, stride_ox,  # OUT; stride_os spans splits
    GROUP_MERGE: tl.constexpr,  # Gm: adjacent groups per program (power of two)
    BLOCK_M: tl.constexpr,  # rows of the merged tile, >= Gm (tl.dot needs >= 16)
    BLOCK_N: tl.constexpr,  # merged columns (taps x Gm) per program, a multiple of Gm
    BLOCK_K: tl.constexpr,  # reduction step over N*OD*OH*OW
    DOT_PRECISION: tl.constexpr,  # "ieee" or "tf32" (fp32 operands only)
    IS_UPCAST_OPERANDS: tl.constexpr,  # interpreter only: its bf16 tl.dot is wrong, so dot in fp32
    IS_WIDE_INDEX: tl.constexpr,  # 64-bit offsets, for operands whose offsets reach 2**31
    PROMOTE_STEPS: tl.constexpr,  # BLOCK_K steps per matrix-unit accumulator before an fp32 add
):
    pid_gs = tl.program_id(0)
    pid_n = tl.program_id(1)
    merged_group = pid_gs // SPLIT_K
    split = pid_gs % SPLIT_K
    first_channel = merged_group * GROUP_MERGE

    rows = tl.arange(0, BLOCK_M)  # channel within the merged group (kpg == 1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_channel = cols % GROUP_MERGE
    tap = cols // GROUP_MERGE
    # Bounds of the merged tile, not of one group: Gm rows, TAPS*Gm columns.
    mask_m = rows < GROUP_MERGE
    mask_n = tap < TAPS
    _, tap_z, tap_y, tap_x = _split_taps(tap, FZ, FY, FX)

    chan_x = first_channel + col_channel
    chan_dy = first_channel + rows
    acc = _accumulate_tile(
        X, DY, chan_x, chan_dy, tap_z, tap_y, tap_x, mask_m, mask_n, split, K_PER_SPLIT, GEMM_K,
        D, H, W, OD, OH, OW, STRIDE_D, STRIDE_H, STRIDE_W, PAD_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
        stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
        stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
        BLOCK_M, BLOCK_N, BLOCK_K, DOT_PRECISION, IS_UPCAST_OPERANDS, IS_WIDE_INDEX, PROMOTE_STEPS,
    )

    # Only the diagonal (row == the column's channel) is dW; the rest is dropped by the mask.
    diagonal = rows[:, None] == col_channel[None, :]
    row = first_channel + rows
    split_off = split.to(tl.int64) * stride_os
    if IS_WIDE_INDEX:
        row = row.to(tl.int64)
    col_off = tap_z * stride_oz + tap_y * stride_oy + tap_x * stride_ox
    out_ptrs = OUT + split_off + row[:, None] * stride_ok + col_off[None, :]
    tl.store(out_ptrs, acc.to(OUT.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :] & diagonal)
