"""Launcher of the shifted-view family: the kernel's axes, the gate, grids, arguments.

The kernel knows two axes, ``rows`` (ky: split between the operands, folded into M) and
``columns`` (kx: the Hankel shift of A). :func:`kernel_axes` maps a problem onto them once;
everything else (tile geometry, grids, arguments, the step count the split gate needs) reads
that map, so the gate and the launch cannot disagree about it.
"""

from __future__ import annotations

import attrs

from convwgrad.provider.aot import Constexpr
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks.checks import allows_tf32
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import KernelSpec, cdiv, pow2_at_least

from .kernels import _wgrad_shifted_cblock_kernel, _wgrad_shifted_kernel

#: Largest channel block (``spec.group_merge``: adjacent channels per program, the batch dim
#: of a 3-D tl.dot). 8 bf16 channels are one 16-byte vector in channels_last; 16 doubles the
#: accumulators (CB x block_m x block_n fp32). Not yet measured.
MAX_CHANNEL_BLOCK = 16

#: Largest convolution stride along the kernel's rows: each value is its own compile (a
#: constexpr, so the phase test is a shift), and stride s costs s times the matrix work.
MAX_ROW_STRIDE = 4


@attrs.frozen(kw_only=True)
class Axis:
    """One spatial axis of the problem as the kernel sees it."""

    dim: int | None  # the problem's spatial dim (0-based), None for the one-column dummy of 1-D
    size: int  # input extent
    out: int  # output extent
    filter: int
    stride: int
    pad: int  # padding before (the after side only bounds ``out``)
    dilation: int


DUMMY = Axis(dim=None, size=1, out=1, filter=1, stride=1, pad=0, dilation=1)


@attrs.frozen(kw_only=True)
class KernelAxes:
    rows: Axis
    columns: Axis

    @property
    def swapped(self) -> bool:
        return self.rows.dim == 1


def _axis(problem: ConvProblem, dim: int) -> Axis:
    return Axis(dim=dim, size=problem.input_size[dim], out=problem.output_size[dim], filter=problem.filter_size[dim],
                stride=problem.stride[dim], pad=problem.padding[dim][0], dilation=problem.dilation[dim])


def kernel_axes(problem: ConvProblem) -> KernelAxes:
    """1-D: the length is the rows, columns a dummy. 2-D: (H, W), or (W, H) when only the width
    has a filter extent (a 1 x k filter would leave the ky columns 1 of BLOCK_N wide)."""
    if problem.spatial_dims == 1:
        return KernelAxes(rows=_axis(problem, 0), columns=DUMMY)
    fy, fx = problem.filter_size[:2]
    if fy == 1 and fx > 1:
        return KernelAxes(rows=_axis(problem, 1), columns=_axis(problem, 0))
    return KernelAxes(rows=_axis(problem, 0), columns=_axis(problem, 1))


@attrs.frozen(kw_only=True)
class TileGeometry:
    """How a tile covers the taps and the reduction, derived from the spec's Tile."""

    kx_block: int  # kx per tile: block_m rows = fold x kx_block
    fold: int  # ky groups folded into M
    ky_tiles: int
    kx_tiles: int
    seg: int  # output columns per row segment of a step
    rows_per_step: int
    col_chunks: int
    whole_rows: bool
    steps: int  # reduction steps of the busiest ky tile (the split gate's count)


def kx_block_for(problem: ConvProblem, block_m: int) -> int:
    return min(pow2_at_least(kernel_axes(problem).columns.filter), block_m)


def tile_geometry(problem: ConvProblem, spec: KernelSpec) -> TileGeometry:
    axes = kernel_axes(problem)
    rows, columns = axes.rows, axes.columns
    tile = spec.tile
    kx_block = kx_block_for(problem, tile.block_m)
    fold = tile.block_m // kx_block
    ky_per_tile = fold * tile.block_n
    seg = min(columns.out, tile.block_k)
    rows_per_step = tile.block_k // seg
    col_chunks = cdiv(columns.out, seg)
    busiest = 0
    for ky_base in range(0, rows.filter, ky_per_tile):  # the kernel's row range per ky tile
        ky_b_last = min(ky_base + tile.block_n, rows.filter) - 1
        folds = min(fold, cdiv(rows.filter - ky_base, tile.block_n))
        i_lo = max(ky_base * rows.dilation - rows.pad, -(folds - 1) * tile.block_n * rows.dilation)
        i_hi = min((rows.out - 1) * rows.stride + ky_b_last * rows.dilation - rows.pad, rows.size - 1)
        busiest = max(busiest, cdiv(max(i_hi - i_lo + 1, 0), rows_per_step))
    return TileGeometry(
        kx_block=kx_block, fold=fold, ky_tiles=cdiv(rows.filter, ky_per_tile), kx_tiles=cdiv(columns.filter, kx_block),
        seg=seg, rows_per_step=rows_per_step, col_chunks=col_chunks, whole_rows=col_chunks == 1,
        steps=problem.batch * busiest * col_chunks,
    )


def shifted_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why the shifted-view kernel cannot run ``problem`` with ``spec`` on ``target``; [] when it can.

    The one gate: the plugin's support() and validate() both call it."""
    reasons = []
    if problem.cpg != 1:
        reasons.append(f"cpg={problem.cpg}: the shifted view computes one input channel per output channel "
                       "(depthwise or a channel multiplier); a grouped convolution runs in the split-K family")
    if problem.spatial_dims == 3:
        reasons.append(f"spatial_dims=3 (filter_size={problem.filter_size}): a depth shift is not implemented "
                       "(the view shifts rows and columns); 3-D runs in the merged or split-K family")
    cb = spec.group_merge
    if cb > 1:
        if cb & (cb - 1) or cb > MAX_CHANNEL_BLOCK:
            reasons.append(f"group_merge={cb}: a channel block must be a power of two <= {MAX_CHANNEL_BLOCK}")
        if problem.kpg != 1:
            reasons.append(f"group_merge={cb} with kpg={problem.kpg}: a channel block needs depthwise channels "
                           "(adjacent output channels reading adjacent input channels)")
        if problem.out_channels % cb:
            reasons.append(f"group_merge={cb} does not divide out_channels={problem.out_channels}")
    if not target.has_matrix_units:
        reasons.append(f"target {target.name} has no matrix units")
    if problem.dtype == "fp32" and target.backend != "interpreter" and not allows_tf32(problem, target):
        reasons.append(f"dtype=fp32 on {target.name} without TF32 (torch.backends.cudnn.allow_tf32 off, or no "
                       "TF32 units): full-precision fp32 dots leave the matrix units, which are this family's point; "
                       "the merged or split-K family runs it")
    if problem.spatial_dims != 3:
        rows = kernel_axes(problem).rows
        if rows.stride > MAX_ROW_STRIDE:
            reasons.append(f"stride={rows.stride} along {'width' if kernel_axes(problem).swapped else 'rows'} "
                           f"exceeds {MAX_ROW_STRIDE} (each costs its factor in matrix work)")
    if spec.tile is None:
        reasons.append("needs a tile")
    return reasons


def validate(problem: ConvProblem, spec: KernelSpec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    reasons = shifted_available(problem, spec, target)
    if reasons:
        raise ValueError(f"{spec.kernel_name()} cannot run {problem.describe()}: " + "; ".join(reasons))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (K / channel block * split_k, ky tiles, kx tiles); stage 2, if any: the shared reduction's."""
    geometry = tile_geometry(problem, spec)
    stage1 = (problem.out_channels // spec.group_merge * spec.split_k, geometry.ky_tiles, geometry.kx_tiles)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


def _spatial_stride(strides, axis: Axis, spatial_dims: int) -> int:
    """The stride of ``axis`` among a tensor's trailing spatial strides; 0 for the dummy axis."""
    return 0 if axis.dim is None else strides[len(strides) - spatial_dims + axis.dim]


def stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    axes = kernel_axes(problem)
    rows, columns = axes.rows, axes.columns
    geometry = tile_geometry(problem, spec)
    dims = problem.spatial_dims
    split_stride, k_stride, _c_stride, *tap_strides = out_strides  # cpg == 1
    tile_args = shared.tile_option_args(spec, interpreted=interpreted)
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        ("H", rows.size), ("W", columns.size), ("OH", rows.out), ("OW", columns.out),
        ("FY", rows.filter), ("FX", columns.filter),
        ("STRIDE_W", columns.stride), ("PAD_H", rows.pad), ("PAD_W", columns.pad),
        ("DIL_H", rows.dilation), ("DIL_W", columns.dilation),
        ("BATCH", problem.batch), ("KPG", problem.kpg),
        ("SEG", geometry.seg), ("ROWS_PER_STEP", geometry.rows_per_step), ("COL_CHUNKS", geometry.col_chunks),
        ("SPLIT_K", spec.split_k),
        ("stride_xn", x.stride(0)), ("stride_xc", x.stride(1)),
        ("stride_xh", _spatial_stride(x.stride(), rows, dims)), ("stride_xw", _spatial_stride(x.stride(), columns, dims)),
        ("stride_dyn", dy.stride(0)), ("stride_dyc", dy.stride(1)),
        ("stride_dyh", _spatial_stride(dy.stride(), rows, dims)),
        ("stride_dyw", _spatial_stride(dy.stride(), columns, dims)),
        ("stride_os", split_stride), ("stride_ok", k_stride),
        ("stride_oy", _spatial_stride(tap_strides, rows, dims)),
        ("stride_ox", _spatial_stride(tap_strides, columns, dims)),
        ("ROW_STRIDE", Constexpr(rows.stride)),
        ("CHANNEL_BLOCK", Constexpr(spec.group_merge)),
        ("KX_BLOCK", Constexpr(geometry.kx_block)),
        ("IS_WHOLE_ROWS", Constexpr(geometry.whole_rows)),
        *tile_args,
    ]


def kernel_for(spec: KernelSpec):
    """One channel a program (2-D tl.dot), or a block of group_merge channels (3-D tl.dot)."""
    return _wgrad_shifted_cblock_kernel if spec.group_merge > 1 else _wgrad_shifted_kernel


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=kernel_for(spec), make_args=stage1_args, grids=grids, validate=validate)


def prepare(problem, spec, target, input, grad_output, out):
    return shared.prepare_stages(problem, spec, target, input, grad_output, out, kernel=kernel_for(spec),
                                 make_args=stage1_args, grids=grids, validate=validate)


def compile_kernels(problem, spec, target):
    return shared.compile_stages(problem, spec, target, kernel=kernel_for(spec), make_args=stage1_args,
                                 validate=validate)
