"""Shared support checks and launch defaults of the tiled Triton dW families.

:func:`tiled_kernel_reasons` is the refusal list every such family appends to its own
(target, dtype, tile bounds, split-K, TF32, index width, grid limits); a family passes its
grids and its largest tile, so the checks are the same and the limits its own.
"""

from __future__ import annotations

import torch

from convwgrad.provider.spec import MIN_DOT_BLOCK, block_size_reasons
from convwgrad.provider.target import cudnn_conv_allows_tf32

from .launch import MAX_SPLIT_K, k_blocks, needs_wide_index

#: tl.dot's minimum tile dim, the core's (named here for every tiled family's tiles).
MIN_BLOCK = MIN_DOT_BLOCK
NUM_WARPS = 4
#: Software-pipelining depth: Triton's matmul tutorial configs use 3-4 on
#: Hopper and 2 on CDNA; not yet swept here.
NUM_STAGES = {"cuda": 3, "hip": 2}


def allows_tf32(problem, target) -> bool:
    """fp32 dots round to TF32 where torch lets cuDNN do so and the target has TF32 units."""
    if problem.dtype != "fp32" or not cudnn_conv_allows_tf32():
        return False
    return target.backend == "cuda" or target.arch == "gfx942"


def tiled_kernel_reasons(problem, spec, target, grids, max_blocks, reduction_steps=None, *,
                         min_block: int = MIN_BLOCK, powers_of_two: bool = True) -> list[str]:
    """Refusals every tiled Triton family shares: target, dtype, tile, split-K, TF32, index width,
    grid limits. Blocks must be powers of two unless ``powers_of_two`` is False (a family that
    unrolls them rather than taking them as ``tl.arange`` ranges). ``grids(problem, spec)`` gives
    the family's launch grids, ``max_blocks`` its largest (block_m, block_n, block_k),
    ``min_block`` its smallest (tl.dot's 16 unless the family has no tl.dot). ``reduction_steps(problem, spec)``, if given, counts the steps a split
    divides, for a family whose reduction is not K_gemm in block_k steps."""
    reasons = []
    if not target.runs_triton:
        reasons.append(f"target {target.name} runs no Triton kernels (on CPU set TRITON_INTERPRET=1)")
    if spec.dtype != problem.dtype:
        reasons.append(f"spec dtype {spec.dtype} != problem dtype {problem.dtype}")
    if spec.tile is None:
        return reasons + ["needs a tile"]
    block_sizes = block_size_reasons(spec.tile, max_blocks, min_block, powers_of_two=powers_of_two)
    reasons += block_sizes
    if reduction_steps is None:
        blocks = k_blocks(problem, spec)
        if spec.split_k > blocks:
            reasons.append(
                f"split_k={spec.split_k} exceeds the {blocks} block_k={spec.tile.block_k} steps of "
                f"K_gemm={problem.gemm_k}: some splits would be empty"
            )
    elif not block_sizes:  # the steps of a tile the kernel cannot take mean nothing
        steps = reduction_steps(problem, spec)
        if spec.split_k > steps:
            reasons.append(f"split_k={spec.split_k} exceeds the {steps} reduction steps of block_k="
                           f"{spec.tile.block_k}: some splits would be empty")
    if spec.split_k > MAX_SPLIT_K:
        reasons.append(f"split_k={spec.split_k} exceeds the limit {MAX_SPLIT_K}")
    if spec.allow_tf32 and not allows_tf32(problem, target):
        reasons.append(f"allow_tf32 is set but {problem.dtype} on {target.name} has no TF32 path allowed")
    if needs_wide_index(problem) and not spec.wide_index:
        reasons.append("an operand's offsets reach 2**31 (its elements or its strides): needs wide_index "
                       "(64-bit offsets)")
    if not block_sizes:  # the grids of a tile the kernel cannot take mean nothing
        for grid in grids(problem, spec):
            for axis, (size, limit) in enumerate(zip(grid, target.max_grid)):
                if size > limit:
                    reasons.append(f"grid axis {axis} = {size} exceeds the limit {limit} of {target.name}")
    return reasons
