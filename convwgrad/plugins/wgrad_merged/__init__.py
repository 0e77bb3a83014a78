"""The merged-group family: Gm adjacent depthwise groups per program, composed with split-K.

Registration layer; the kernel is in :mod:`.kernels`, the gate and launcher in
:mod:`.launcher`. A contiguous (NCHW) input is admitted and computed correctly,
but its channels are not adjacent in memory, so its loads stay element-wide:
the vector loads need channels_last (explain() says so).
"""

from __future__ import annotations

from convwgrad.provider.blocks.checks import MIN_BLOCK, NUM_STAGES, NUM_WARPS, allows_tf32, tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import KernelSpec, Tile, cdiv, pow2_at_least

from . import launcher

FAMILY = "wgrad_merged"
#: Above split-K (10): where the gate admits a depthwise problem, merging is the family built for it.
PRIORITY = 20
#: Degrees offered, preferred first. 16 fills the matrix unit's 16-row minimum exactly;
#: 32 doubles the M tile and so the off-diagonal work, smaller degrees leave rows empty.
#: H200 sweep (bf16 channels_last, 2026-12-02, shapes where merged beats cuDNN, best split
#: per degree): 16 first captured 0.966 of the best degree's speed on the corpus (82
#: shapes) and 0.997 on the random grid (30), against 0.954 and 0.921 for 32 first.
DEGREES = (16, 32, 8, 4, 2)
#: ...except where 32 fills the merged-column tiles this much better than 16 (fractions of
#: the padded N tiles that hold real columns): small filters, where 9 taps x 16 = 144
#: columns leave a 128-wide second tile nearly empty and 288 fill 3 of them. Chosen on the
#: same sweep (margins 0 to 0.2 tried): 32 was the best degree on 17 dilated 3x3-7x7
#: UniRepLKNet layers, by up to 1.28x; no large filter moves (31x31: 0.993 vs 0.997).
FILL_MARGIN_FOR_32 = 0.05
#: ...and 1-D filters of at most this many taps (Mamba's k = 4), where both degrees fill their tiles: 32 was
#: the faster degree on every such layer of the in-sample random shapes and the fitting set (H100, bf16
#: channels_last, isolated calls, session 21: 5 layers, 1.02-1.21x, geomean 1.10x); the H200 sweeps of the
#: random grid and the corpus (13 layers, Mamba's among them) read it even (gm32 0.4 % slower, geomean).
SHORT_SEQUENCE_TAPS_FOR_32 = 4
VECTOR_BYTES = 16
#: Merged columns (taps x Gm) per program: 128 holds a 3x3 filter at Gm = 8 or
#: 4x4 taps at Gm = 8 in one tile with 16 fp32 accumulators a thread. Not yet swept.
MAX_BLOCK_N = 128
#: Bounds of the reduction step. The step offered first is the smallest that gives
#: every thread a whole 16-byte vector of the A tile (block_m x block_k elements over
#: num_warps * warp_size threads): read off the ISA, at Gm = 8 bf16 block_k 32 gave
#: sm_90 8-byte and gfx950 4-byte dY loads, 64 (sm_90) and 128 (gfx950) all 16-byte.
MIN_BLOCK_K = 32
MAX_BLOCK_K = 256


def preferred_degrees(problem) -> list[int]:
    short_sequence = problem.spatial_dims == 1 and problem.gemm_n <= SHORT_SEQUENCE_TAPS_FOR_32
    if short_sequence or n_tile_fill(problem, 32) > n_tile_fill(problem, 16) + FILL_MARGIN_FOR_32:
        return [32, *(gm for gm in DEGREES if gm != 32)]
    return list(DEGREES)


def n_tile_fill(problem, group_merge: int) -> float:
    """The fraction of the merged-column tiles (taps x Gm columns, block_n wide) that is real."""
    columns = problem.gemm_n * group_merge
    block_n = merged_block_n(problem, group_merge)
    return columns / (cdiv(columns, block_n) * block_n)


def merged_block_n(problem, group_merge: int) -> int:
    widest = pow2_at_least(max(min(MAX_BLOCK_N, MAX_TAPS_PER_TILE * group_merge), group_merge), MIN_BLOCK)
    return min(pow2_at_least(problem.gemm_n * group_merge, MIN_BLOCK), widest)


def block_k_choices(problem, block_m: int, target) -> tuple[int, ...]:
    threads = NUM_WARPS * target.warp_size
    vector = pow2_at_least(VECTOR_BYTES // problem.element_size * threads // block_m, MIN_BLOCK_K)
    vector = min(vector, MAX_BLOCK_K)
    return (vector, vector // 2) if vector // 2 >= MIN_BLOCK_K else (vector, vector * 2)


#: Filter taps one tile covers at most. Narrow degrees load narrow vectors, so each tap
#: costs more address registers: Gm = 2 at 64 taps a tile spilled on sm_90 (16-48 bytes
#: of scratch); 32 taps keep it in registers.
MAX_TAPS_PER_TILE = 32
#: The largest tile support() admits, pinned or tuned: what the family offers. block_m
#: holds the merged rows, at most MAX_GROUP_MERGE of them (kpg == 1).
MAX_BLOCKS = (launcher.MAX_GROUP_MERGE, MAX_BLOCK_N, MAX_BLOCK_K)


def tile_for(problem, group_merge: int, block_k: int, target) -> Tile:
    block_m = pow2_at_least(group_merge * problem.kpg, MIN_BLOCK)
    return Tile(block_m=block_m, block_n=merged_block_n(problem, group_merge), block_k=block_k, num_warps=NUM_WARPS,
                num_stages=NUM_STAGES.get(target.backend, 1))


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    degrees = [group_merge] if group_merge else preferred_degrees(problem)
    if not group_merge and not problem.is_depthwise:
        degrees = degrees[:1]  # one candidate, so explain() shows why the family refuses
    return [
        KernelSpec(
            family=FAMILY,
            dtype=problem.dtype,
            tile=tile_for(problem, gm, bk, target),
            group_merge=gm,
            allow_tf32=allows_tf32(problem, target),
            wide_index=needs_wide_index(problem),
        )
        for gm in degrees
        for bk in block_k_choices(problem, pow2_at_least(gm * problem.kpg, MIN_BLOCK), target)
    ]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.group_merge_available(problem, spec, target)
    tile = spec.tile
    if tile is not None and tile.block_n // spec.group_merge > MAX_TAPS_PER_TILE:
        reasons.append(f"block_n={tile.block_n} at group_merge={spec.group_merge} is "
                       f"{tile.block_n // spec.group_merge} taps a tile, over {MAX_TAPS_PER_TILE}: they spill registers")
    if reasons:  # the grids of a degree the gate refuses mean nothing
        return reasons + tiled_kernel_reasons(problem, spec, target, lambda problem, spec: (), MAX_BLOCKS)
    return tiled_kernel_reasons(problem, spec, target, launcher.grids, MAX_BLOCKS)


def layout_note(problem, spec, target) -> str:
    if problem.layout == "channels_last":
        return ""
    return " (contiguous NCHW input: admitted, but channels are not adjacent, so loads stay element-wide; use channels_last)"


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise dW, Gm adjacent groups per program as one GEMM, diagonal stored; split-K composable",
    splits_k=True,
    max_split_k=MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    admission_note=layout_note,
    workspace_nbytes=workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
