"""Launcher of the merged-group family: merged vs true dims, the gate, grids, arguments.

The merged dims (what a program's tile covers) and the true dims (what sizes dW
and the workspace) are kept apart on purpose: a tile bound taken from the true
per-group extent would silently drop (1 - 1/Gm) of dW's rows.
"""

from __future__ import annotations

import math

import attrs

from convwgrad.provider.aot import Constexpr
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import KernelSpec, cdiv

from .kernels import _wgrad_merged_kernel

#: Largest merge degree: 64 channels make a 64-row tile, the largest M the
#: family's tiles use; beyond it the grid shrinks with nothing left to gain in load width.
MAX_GROUP_MERGE = 64


@attrs.frozen(kw_only=True)
class MergedDims:
    """The merged GEMM a program's tile covers, beside the true per-group dims."""

    grid_M: int  # rows of the merged tile: Gm * kpg
    grid_N: int  # columns of the merged GEMM: taps * cpg * Gm
    grid_groups: int  # programs along groups: G / Gm
    true_M: int  # kpg: rows of one group's dW
    true_N: int  # taps * cpg: columns of one group's dW


def merged_dims(problem: ConvProblem, group_merge: int) -> MergedDims:
    return MergedDims(
        grid_M=group_merge * problem.kpg,
        grid_N=problem.gemm_n * group_merge,
        grid_groups=problem.groups // group_merge,
        true_M=problem.gemm_m,
        true_N=problem.gemm_n,
    )


def group_merge_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why ``spec.group_merge`` cannot merge ``problem``'s groups on ``target``; [] when it can.

    The one gate: the plugin's support() and validate() both call it, so they cannot drift.
    """
    gm = spec.group_merge
    reasons = []
    if problem.cpg != 1 or problem.kpg != 1:
        kind = "a channel multiplier (kpg > 1)" if problem.cpg == 1 else "a grouped convolution (cpg > 1)"
        reasons.append(
            f"cpg={problem.cpg}, kpg={problem.kpg}: merging needs depthwise groups (cpg == kpg == 1); "
            f"{kind} runs in the split-K family"
        )
    if gm < 2:
        reasons.append(f"group_merge={gm}: a single group per program is the split-K family's")
    elif gm & (gm - 1):
        reasons.append(f"group_merge={gm} is not a power of two")
    elif gm > MAX_GROUP_MERGE:
        reasons.append(f"group_merge={gm} exceeds the family's limit {MAX_GROUP_MERGE}")
    if gm >= 1 and problem.groups % gm:
        reasons.append(f"group_merge={gm} does not divide groups={problem.groups}")
    if not target.has_matrix_units:
        reasons.append(f"target {target.name} has no matrix units")
    tile = spec.tile
    if tile is None:
        reasons.append("needs a tile")
    elif not reasons:
        dims = merged_dims(problem, gm)
        if dims.grid_M > tile.block_m:
            reasons.append(f"merged M = {dims.grid_M} does not fit block_m={tile.block_m}")
        if tile.block_n % gm:
            reasons.append(f"block_n={tile.block_n} is not a multiple of group_merge={gm}")
    return reasons


def validate(problem: ConvProblem, spec: KernelSpec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, group_merge_available(problem, spec, target))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (G/Gm * split_k, tiles over taps*Gm, 1); stage 2, if any: the shared reduction's."""
    dims = merged_dims(problem, spec.group_merge)
    stage1 = (dims.grid_groups * spec.split_k, cdiv(dims.grid_N, spec.tile.block_n), 1)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


def stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    split_stride, k_stride, _c_stride, z_stride, y_stride, x_stride = out_strides  # cpg == 1
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        *shared.geometry_args(problem),
        ("TAPS", math.prod(problem.filter_size)),
        ("GEMM_K", problem.gemm_k),
        ("K_PER_SPLIT", shared.k_per_split(problem, spec)), ("SPLIT_K", spec.split_k),
        *shared.operand_stride_args(x, dy),
        ("stride_os", split_stride), ("stride_ok", k_stride),
        ("stride_oz", z_stride), ("stride_oy", y_stride), ("stride_ox", x_stride),
        ("GROUP_MERGE", Constexpr(spec.group_merge)),
        *shared.tile_option_args(spec, interpreted=interpreted),
    ]


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=_wgrad_merged_kernel, make_args=stage1_args, grids=grids, validate=validate)


def prepare(problem, spec, target, input, grad_output, out):
    return shared.prepare_stages(problem, spec, target, input, grad_output, out, kernel=_wgrad_merged_kernel,
                                 make_args=stage1_args, grids=grids, validate=validate)


def compile_kernels(problem, spec, target):
    return shared.compile_stages(problem, spec, target, kernel=_wgrad_merged_kernel, make_args=stage1_args,
                                 validate=validate)
