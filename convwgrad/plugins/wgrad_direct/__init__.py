"""The direct family: depthwise and channel-multiplier dW (cpg == 1) on CUDA cores, no GEMM view.

Registration layer; the kernel is in :mod:`.kernels`, the gate, grids and split policy in
:mod:`.launcher`. Built for small filters (3x3 to 9x9, short 1-D), where cuDNN runs 6-12x
above the floor and the matrix-unit families waste most of their tiles. Opt-in
(``selectors.routing.OPT_IN_FAMILIES``): measured on the H200 (2026-12-03) at 0.3-0.6x cuDNN on
ConvNeXt and MobileNetV2 layers (notes/PERF.md), so the router gives it nothing; pin it with
``plan(problem, family="wgrad_direct")``.
"""

from __future__ import annotations

import math

from convwgrad.provider.blocks.checks import tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import KernelSpec, Tile, pow2_at_least

from . import launcher

FAMILY = "wgrad_direct"
#: Below split-K (10) and merged (20); opt-in besides: reached by pin (measured slower than cuDNN).
PRIORITY = 5
VECTOR_BYTES = 16
#: Lanes side by side along the channels in channels_last: 8 lanes x 16 bytes = one 128-byte
#: line a tap (block_m = 64 bf16 or 32 fp32 channels). Not yet measured.
CHANNEL_LANES = 8
NUM_WARPS = 4
#: fp32 accumulators a thread the default tile aims for: 32 (and 32 input elements beside
#: them) keep a 4-warp program near 100 registers, ~5 programs a H200 SM. The second candidate
#: doubles it (fewer, longer steps). Not yet measured.
ACC_PER_THREAD = (32, 64)
#: The largest tile support() admits: (channels, taps, columns) a program.
MAX_BLOCKS = (launcher.MAX_BLOCK_C, launcher.MAX_BLOCK_T, launcher.MAX_BLOCK_W)
#: No tl.dot: any power of two down to 1 is a valid block (one channel, one tap, one column).
MIN_BLOCK = 1


def tile_for(problem, target, *, acc_per_thread: int = ACC_PER_THREAD[0], num_warps: int = NUM_WARPS) -> Tile:
    """The default tile: channels_last blocks channels in 16-byte vectors and fills the rest of the
    accumulator budget with columns; NCHW blocks columns (its contiguous axis) first."""
    threads = num_warps * target.warp_size
    budget = acc_per_thread * threads  # elements of the [taps, channels, columns] tile
    block_t = min(pow2_at_least(math.prod(problem.filter_size)), launcher.MAX_BLOCK_T)
    out_width = pow2_at_least(problem.output_size[-1])
    channels = pow2_at_least(problem.out_channels)
    if problem.layout == "channels_last":
        widest = VECTOR_BYTES // problem.element_size * CHANNEL_LANES
        block_c = min(channels, widest)
        exact = problem.out_channels & -problem.out_channels  # largest power of two dividing C
        if VECTOR_BYTES // problem.element_size <= exact < block_c:
            block_c = exact  # no channel tail: C=96 takes 3 x 32, not 2 x 64 with the second half empty
        block_w = max(1, min(budget // (block_t * block_c), out_width, launcher.MAX_BLOCK_W))
    else:
        block_w = max(1, min(out_width, launcher.MAX_BLOCK_W, budget // block_t))
        block_c = max(1, min(budget // (block_t * block_w), channels, launcher.MAX_BLOCK_C))
    return Tile(block_m=block_c, block_n=block_t, block_k=block_w, num_warps=num_warps, num_stages=1)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    tiles = dict.fromkeys(tile_for(problem, target, acc_per_thread=acc) for acc in ACC_PER_THREAD)
    return [
        KernelSpec(family=FAMILY, dtype=problem.dtype, tile=tile, group_merge=group_merge or 1,
                   wide_index=needs_wide_index(problem))
        for tile in tiles
    ]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.direct_available(problem, spec, target)
    if reasons:  # the grids of a spec the gate refuses mean nothing
        return reasons + tiled_kernel_reasons(problem, spec, target, lambda problem, spec: (), MAX_BLOCKS,
                                              min_block=MIN_BLOCK)
    return tiled_kernel_reasons(problem, spec, target, launcher.grids, MAX_BLOCKS, min_block=MIN_BLOCK)


def layout_note(problem, spec, target) -> str:
    if problem.layout == "channels_last":
        return ""
    return (" (contiguous NCHW input: admitted, vectors run along ow, but each tap's shifted row is not "
            "16-byte aligned, so input loads stay narrow; channels_last is the fast layout)")


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise/channel-multiplier dW on CUDA cores: [taps, channels, columns] fp32 accumulators, "
                "one pointer tensor a program; deterministic split",
    splits_k=True,
    max_split_k=MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    admission_note=layout_note,
    workspace_nbytes=workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    choose_split_k=launcher.choose_split_k,
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
