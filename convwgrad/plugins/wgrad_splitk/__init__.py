"""The split-K two-stage family: implicit-GEMM dW for every grouped convolution.

Registration layer: candidate specs, the support rules, and ``plugin``, the
hook implementations the provider core registers. The kernels are in
:mod:`.kernels`, the launcher in :mod:`.launcher`.
"""

from __future__ import annotations

from convwgrad.provider.blocks.checks import MIN_BLOCK, NUM_STAGES, NUM_WARPS, allows_tf32, tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import KernelSpec, Tile, pow2_at_least

from . import launcher

FAMILY = "wgrad_splitk"
#: Above the aten fallback (0); the merged family will rank above this one.
PRIORITY = 10

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


def _fit(extent: int, upper: int) -> int:
    return min(pow2_at_least(extent, MIN_BLOCK), upper)


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
            wide_index=needs_wide_index(problem),
        )
        for bk in BLOCK_K_CHOICES
        if fp32_tile_fits(problem.dtype, bk, block_n) or bk == BLOCK_K_CHOICES[0]
    ]


def fp32_tile_fits(dtype: str, block_k: int, block_n: int) -> bool:
    """Whether a block_k x block_n operand tile of ``dtype`` stays in registers (MAX_FP32_TILE_KN)."""
    return dtype != "fp32" or block_k * block_n <= MAX_FP32_TILE_KN


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
    max_split_k=MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    workspace_nbytes=workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
