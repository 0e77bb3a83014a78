"""The split-K two-stage family: implicit-GEMM dW for every grouped convolution.

Registration layer: candidate specs, the support rules, and ``plugin``, the
hook implementations the provider core registers. The kernels are in
:mod:`.kernels`, the launcher in :mod:`.launcher`.
"""

from __future__ import annotations

import torch

from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import MIN_DOT_BLOCK, KernelSpec, Tile, block_size_reasons, pow2_at_least

from . import launcher

FAMILY = "wgrad_splitk"
#: Above the aten fallback (0); the merged family will rank above this one.
PRIORITY = 10

#: tl.dot's minimum tile dim, the core's (named here for the merged family's tiles too).
MIN_BLOCK = MIN_DOT_BLOCK
#: 64x64 fp32 accumulators are 32 registers a thread at 4 warps; larger tiles
#: only pay for kpg and cpg*taps far above depthwise sizes. Not yet swept.
MAX_BLOCK_M = 64
MAX_BLOCK_N = 64
#: Reduction steps offered, preferred first. 32 ranked first on 5 of the 6
#: bench demo layers on H200 (bf16 channels_last, 2026-12-02), 128 never; and 128
#: spilled registers to local memory in sm_90 builds (8-248 bytes of scratch in
#: `convwgrad compile`), so it is no longer offered.
BLOCK_K_CHOICES = (32, 64)
#: Largest block_k x block_n of fp32 operands: every gathered element holds its own
#: address and mask, and fp32 tiles of 4096 spilled on sm_90 (24-248 bytes of scratch).
MAX_FP32_TILE_KN = 2048
#: The largest tile support() admits, pinned or tuned: what the family offers.
MAX_BLOCKS = (MAX_BLOCK_M, MAX_BLOCK_N, max(BLOCK_K_CHOICES))
NUM_WARPS = 4
#: Software-pipelining depth: Triton's matmul tutorial configs use 3-4 on
#: Hopper and 2 on CDNA; not yet swept here.
NUM_STAGES = {"cuda": 3, "hip": 2}


def _fit(extent: int, upper: int) -> int:
    return min(pow2_at_least(extent, MIN_BLOCK), upper)


def allows_tf32(problem, target) -> bool:
    """fp32 dots round to TF32 where torch lets cuDNN do so and the target has TF32 units."""
    if problem.dtype != "fp32" or not torch.backends.cudnn.allow_tf32:
        return False
    return target.backend == "cuda" or target.arch == "gfx942"


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    block_m = _fit(problem.gemm_m, MAX_BLOCK_M)
    block_n = _fit(problem.gemm_n, MAX_BLOCK_N)
    stages = NUM_STAGES.get(target.backend, 1)
    return [
        KernelSpec(
            family=FAMILY,
            dtype=problem.dtype,
            tile=Tile(block_m=block_m, block_n=block_n, block_k=bk, num_warps=NUM_WARPS, num_stages=stages),
            allow_tf32=allows_tf32(problem, target),
            wide_index=launcher.needs_wide_index(problem),
        )
        for bk in BLOCK_K_CHOICES
        if fp32_tile_fits(problem.dtype, bk, block_n) or bk == BLOCK_K_CHOICES[0]
    ]


def fp32_tile_fits(dtype: str, block_k: int, block_n: int) -> bool:
    """Whether a block_k x block_n operand tile of ``dtype`` stays in registers (MAX_FP32_TILE_KN)."""
    return dtype != "fp32" or block_k * block_n <= MAX_FP32_TILE_KN


def tiled_kernel_reasons(problem, spec, target, grids, max_blocks) -> list[str]:
    """Refusals every tiled Triton family shares: target, dtype, tile, split-K, TF32, index width,
    grid limits. ``grids(problem, spec)`` gives the family's launch grids, ``max_blocks`` its
    largest (block_m, block_n, block_k)."""
    reasons = []
    if not target.runs_triton:
        reasons.append(f"target {target.name} runs no Triton kernels (on CPU set TRITON_INTERPRET=1)")
    if spec.dtype != problem.dtype:
        reasons.append(f"spec dtype {spec.dtype} != problem dtype {problem.dtype}")
    if spec.tile is None:
        return reasons + ["needs a tile"]
    block_sizes = block_size_reasons(spec.tile, max_blocks, MIN_BLOCK)
    reasons += block_sizes
    blocks = launcher.k_blocks(problem, spec)
    if spec.split_k > blocks:
        reasons.append(
            f"split_k={spec.split_k} exceeds the {blocks} block_k={spec.tile.block_k} steps of "
            f"K_gemm={problem.gemm_k}: some splits would be empty"
        )
    if spec.split_k > launcher.MAX_SPLIT_K:
        reasons.append(f"split_k={spec.split_k} exceeds the limit {launcher.MAX_SPLIT_K}")
    if spec.allow_tf32 and not allows_tf32(problem, target):
        reasons.append(f"allow_tf32 is set but {problem.dtype} on {target.name} has no TF32 path allowed")
    if launcher.needs_wide_index(problem) and not spec.wide_index:
        reasons.append("an operand's offsets reach 2**31 (its elements or its strides): needs wide_index "
                       "(64-bit offsets)")
    if not block_sizes:  # the grids of a tile the kernel cannot take mean nothing
        for grid in grids(problem, spec):
            for axis, (size, limit) in enumerate(zip(grid, target.max_grid)):
                if size > limit:
                    reasons.append(f"grid axis {axis} = {size} exceeds the limit {limit} of {target.name}")
    return reasons


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = []
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: this family computes one group per program")
    tile = spec.tile
    if tile is not None and not fp32_tile_fits(spec.dtype, tile.block_k, tile.block_n):
        reasons.append(
            f"fp32 block_k x block_n = {tile.block_k} x {tile.block_n} exceeds {MAX_FP32_TILE_KN}: every "
            "gathered element holds its own address and mask, and larger fp32 tiles spill registers"
        )
    return reasons + tiled_kernel_reasons(problem, spec, target, launcher.grids, MAX_BLOCKS)


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="implicit-GEMM dW, K_gemm split over workgroups, fp32 workspace + ordered reduction",
    splits_k=True,
    max_split_k=launcher.MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    workspace_nbytes=launcher.workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
