"""The shifted-view family: large-filter depthwise dW on the matrix units, every tap computed once.

Registration layer; the kernel is in :mod:`.kernels` (its docstring derives the GEMM), the
kernel axes, gate and launcher in :mod:`.launcher`.

Per channel, dW (FY x FX) is one GEMM: M = (folded ky group, kx), N = ky, reduced over
(n, input row, output column); A is the input row shifted by kx (a Hankel view), B the
grad_output rows shifted by ky (a Toeplitz view). Where the merged family computes Gm x Gm
channel pairs to keep the diagonal, this tile's entries are all taps, so it is built for
filters large enough to fill a 16 x 16 tile: RepLKNet's 13x13 to 31x31, long 1-D filters.

Admitted: depthwise and channel multipliers (cpg == 1), 1-D and 2-D, any stride (rows: up
to ``launcher.MAX_ROW_STRIDE``), dilation and asymmetric padding, fp16/bf16, fp32 with TF32
where :func:`allows_tf32` says so, any strides (NCHW: one channel's plane is contiguous;
channels_last: one channel per program loads single elements, so channels_last is offered a
block of ``group_merge`` = 8 adjacent channels per program as the batch dim of a 3-D tl.dot,
whose loads are 16-byte vectors). Refused with reasons: grouped (cpg > 1), 3-D, fp32 without TF32.

Two kernels. The shifted-view GEMM above (tiles with block_n <= 64, offered by candidate_specs).
The outer-product GEMM (MegEngine's DW-IGEMM / cutlass example 19, for dW): per channel and ky,
C[ow, iw] = sum over (n, oh) of dY[n, oh, ow] * X[n, oh*s + ky*d - p, iw] is a plain GEMM of two
plain tiles, and dW[ky, kx] is C's diagonal ``iw = ow*s + kx*d``, summed once per program after the
reduction (tl.gather). It is selected by a tile with block_n >= ``launcher.OUTER_MIN_BLOCK_N``
(128: block_n = ky chunk x input columns), never offered by candidate_specs: reachable by pin
only (:func:`outer_tile` builds its tile), so routing is unchanged.

Routing: opt-in (``convwgrad.selectors.routing.OPT_IN_FAMILIES``): the router gives it only the
class it was measured faster on (``routing.opt_in_measured_faster``: on CUDA, undilated 2-D
depthwise filters of >= 13x13); elsewhere it runs when pinned.
"""

from __future__ import annotations

from convwgrad.provider.blocks.checks import MIN_BLOCK, NUM_STAGES, NUM_WARPS, allows_tf32, tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import KernelSpec, Tile, cdiv, pow2_at_least

from . import launcher

FAMILY = "wgrad_shifted"
#: Between merged (20) and split-K (10): merged keeps every problem it admits except where the
#: measured rule (selectors/routing.py, opt_in_measured_faster) gives a layer to this family.
PRIORITY = 15
#: Largest A rows (kx x folded ky): 64 is one Hopper warpgroup's wgmma M and 32 fp32
#: accumulators a thread at 4 warps with block_n = 64. Not yet measured.
MAX_BLOCK_M = 64
#: Largest ky columns a tile takes. Not yet measured.
MAX_BLOCK_N = 64
#: Reduction lanes per step, preferred first. 64 holds a 56-wide row (87.5% of lanes), two
#: 28-wide rows, four 14-wide or nine 7-wide ones; 32 halves the operand tiles' registers.
#: Chosen from that arithmetic, not yet measured.
BLOCK_K_CHOICES = (64, 32)
MAX_BLOCK_K = 128
MAX_BLOCKS = (MAX_BLOCK_M, MAX_BLOCK_N, MAX_BLOCK_K)


def tile_shapes(problem) -> list[tuple[int, int]]:
    """(block_m, block_n) offered, preferred first: the smallest M that holds kx (16 at least),
    then M = 64 with ky groups folded in (wgmma-sized), each with the fewest ky columns that
    cover the filter's rows over its folds. Neither is measured yet."""
    axes = launcher.kernel_axes(problem)
    kx = min(pow2_at_least(axes.columns.filter), MAX_BLOCK_M)
    shapes = []
    for block_m in dict.fromkeys((max(kx, MIN_BLOCK), MAX_BLOCK_M)):
        fold = block_m // kx
        block_n = min(max(pow2_at_least(cdiv(axes.rows.filter, fold)), MIN_BLOCK), MAX_BLOCK_N)
        shapes.append((block_m, block_n))
    return shapes


#: Channel block offered for channels_last (``group_merge``: adjacent channels per program, the
#: batch dim of a 3-D tl.dot): 8 bf16/fp16 channels are one 16-byte load (read off the sm_90 and
#: gfx950 ISA: every operand load 16 bytes), against one element a load for a single channel.
CHANNEL_BLOCK = 8
#: Reduction lanes with a channel block: CB x the 2-D tile's operands, so a quarter of the lanes.
#: 31x31 at CB = 8, 32 x 32: block_k 16 at 4 warps took 255 registers on sm_90 (no spill),
#: block_k 32 at 8 warps 216. H200 (tools/family_bench.py, 2026-12-03, 4 channels_last layers):
#: block_k 16 at 4 warps was the faster on 3 of 4 at 3 stages, and fastest of all at 1 stage.
CHANNEL_BLOCK_TILES = ((16, 4), (32, 8))
#: Pipeline stages of the channel-block kernel on CUDA: 1 beat 3 on every layer measured (H200,
#: same run): 31x31 56x56 C128 N=16 455 vs 598 us, 27x27 14x14 C512 89 vs 128, 13x13 7x7 C1024
#: 21.1 vs 22.8, 7x7 d2 28x28 C160 72 vs 84 (the 3-D dot's operands go through shared memory;
#: at 255 registers a thread the extra stages cost more than they hide).
CHANNEL_BLOCK_STAGES = {"cuda": 1}


def channel_block_fits(problem) -> bool:
    """Whether the CHANNEL_BLOCK candidates are offered: channels_last (their point), depthwise,
    and C a multiple of the block."""
    return (problem.layout == "channels_last" and problem.kpg == 1 and problem.cpg == 1
            and problem.out_channels % CHANNEL_BLOCK == 0 and problem.spatial_dims < 3)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    stages = NUM_STAGES.get(target.backend, 1)
    if problem.spatial_dims == 3:  # one candidate, so explain() shows why the family refuses
        shapes = [(MIN_BLOCK, MIN_BLOCK)]
    else:
        shapes = tile_shapes(problem)
    tiles = []  # (channel block, Tile), preferred first
    blocked = group_merge if group_merge and group_merge > 1 else (
        CHANNEL_BLOCK if group_merge is None and channel_block_fits(problem) else None)
    if blocked:
        bm, bn = shapes[0]
        block_stages = CHANNEL_BLOCK_STAGES.get(target.backend, stages)
        tiles += [(blocked, Tile(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=block_stages))
                  for bk, warps in CHANNEL_BLOCK_TILES]
    if not group_merge or group_merge == 1:
        tiles += [(1, Tile(block_m=bm, block_n=bn, block_k=bk, num_warps=NUM_WARPS, num_stages=stages))
                  for bm, bn in shapes for bk in BLOCK_K_CHOICES]
    return [
        KernelSpec(
            family=FAMILY,
            dtype=problem.dtype,
            tile=tile,
            group_merge=cb,
            allow_tf32=allows_tf32(problem, target),
            wide_index=needs_wide_index(problem),
        )
        for cb, tile in tiles
    ]


def reduction_steps(problem, spec) -> int:
    if launcher.is_outer(spec):
        return launcher.outer_geometry(problem, spec).steps
    return launcher.tile_geometry(problem, spec).steps


def max_blocks(spec) -> tuple[int, int, int]:
    """The block bounds of the kernel ``spec`` selects (an outer tile has block_n >= 128)."""
    return launcher.OUTER_MAX_BLOCKS if launcher.is_outer(spec) else MAX_BLOCKS


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.shifted_available(problem, spec, target)
    if reasons:  # the grids and steps of a problem the gate refuses mean nothing
        return reasons + tiled_kernel_reasons(problem, spec, target, lambda problem, spec: (), max_blocks(spec),
                                              reduction_steps=lambda problem, spec: spec.split_k)
    return tiled_kernel_reasons(problem, spec, target, launcher.grids, max_blocks(spec),
                                reduction_steps=reduction_steps)


def outer_tile(problem, block_ow: int, block_k: int, ky_chunk: int = 1, num_warps: int = NUM_WARPS,
               num_stages: int = 2) -> Tile:
    """The outer-product kernel's tile for ``problem`` (pin it: candidate_specs never offers it, so
    routing is unchanged): block_m = ``block_ow`` output columns, block_n = ``ky_chunk`` ky rows of
    the NW input columns they touch (at least OUTER_MIN_BLOCK_N, which is what selects the kernel)."""
    nw = launcher.outer_needed_nw(problem, block_ow)
    block_n = max(nw * ky_chunk, launcher.OUTER_MIN_BLOCK_N)
    return Tile(block_m=block_ow, block_n=block_n, block_k=block_k, num_warps=num_warps, num_stages=num_stages)


def layout_note(problem, spec, target) -> str:
    if problem.layout == "channels_last" and spec.group_merge == 1:
        return " (channels_last, one channel per program: loads are element-wide, strided by C; group_merge=8 loads vectors)"
    if problem.layout != "channels_last" and spec.group_merge > 1:
        return f" (contiguous NCHW input: a block of {spec.group_merge} channels is strided, loads stay element-wide)"
    return ""


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise dW per channel as a GEMM of shifted views (kx x ky taps, none wasted on channel pairs); "
                "split over (n, rows)",
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
