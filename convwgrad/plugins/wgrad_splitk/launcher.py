"""Launcher of the split-K two-stage family: its grids and stage-1 arguments; the workspace,
stage 2, checks and the launch itself are the provider core's shared blocks
(:mod:`convwgrad.provider.blocks.launch`)."""

from __future__ import annotations

from convwgrad.provider.aot import CompiledKernel
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import BoundLaunch, KernelSpec, cdiv
from convwgrad.provider.target import TargetInfo

from .kernels import _wgrad_splitk_kernel


def tiles(problem: ConvProblem, spec: KernelSpec) -> tuple[int, int]:
    """(tiles over M, tiles over N_gemm) of one group."""
    return cdiv(problem.gemm_m, spec.tile.block_m), cdiv(problem.gemm_n, spec.tile.block_n)


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (groups * split_k, tiles over N_gemm, tiles over M); stage 2, if any: shared.reduce_grid."""
    tiles_m, tiles_n = tiles(problem, spec)
    stage1 = (problem.groups * spec.split_k, tiles_n, tiles_m)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


def stage1_args(
    problem: ConvProblem, spec: KernelSpec, x, dy, out, out_strides, *, interpreted: bool
) -> list[tuple[str, object]]:
    """The stage-1 kernel's arguments in order; constexprs wrapped in :class:`Constexpr`."""
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        *shared.geometry_args(problem),
        ("CPG", problem.cpg), ("KPG", problem.kpg),
        ("GEMM_N", problem.gemm_n), ("GEMM_K", problem.gemm_k),
        ("K_PER_SPLIT", shared.k_per_split(problem, spec)), ("SPLIT_K", spec.split_k),
        *shared.operand_stride_args(x, dy),
        *zip(("stride_os", "stride_ok", "stride_oc", "stride_oz", "stride_oy", "stride_ox"), out_strides),
        *shared.tile_option_args(spec, interpreted=interpreted),
    ]


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=_wgrad_splitk_kernel, make_args=stage1_args, grids=grids)


def prepare(problem, spec, target, input, grad_output, out) -> BoundLaunch:
    return shared.prepare_stages(problem, spec, target, input, grad_output, out,
                                 kernel=_wgrad_splitk_kernel, make_args=stage1_args, grids=grids)


def compile_kernels(problem: ConvProblem, spec: KernelSpec, target: TargetInfo) -> list[CompiledKernel]:
    return shared.compile_stages(problem, spec, target, kernel=_wgrad_splitk_kernel, make_args=stage1_args)
