"""Launcher of the shifted-view family: the kernel's axes, the gate, grids, arguments.

Two kernels: the shifted-view GEMM (:func:`~.kernels._wgrad_shifted_kernel` and its channel-block
twin) and the outer-product GEMM (:func:`~.kernels._wgrad_shifted_outer_kernel`), which a tile
with ``block_n >= OUTER_MIN_BLOCK_N`` selects (:func:`is_outer`; the shifted kernels stop at
block_n 64). The outer kernel's geometry is :class:`OuterGeometry`.

The kernel knows two axes, ``rows`` (ky: split between the operands, folded into M) and
``columns`` (kx: the Hankel shift of A). :func:`kernel_axes` maps a problem onto them once;
everything else (tile geometry, grids, arguments, the step count the split gate needs) reads
that map, so the gate and the launch cannot disagree about it.
"""

from __future__ import annotations

import math

import attrs

from convwgrad.provider.aot import Constexpr
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks.checks import allows_tf32
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import KernelSpec, cdiv, pow2_at_least, pow2_nearest

from .kernels import _wgrad_shifted_cblock_kernel, _wgrad_shifted_kernel, _wgrad_shifted_outer_kernel

#: Largest channel block (``spec.group_merge``: adjacent channels per program, the batch dim
#: of a 3-D tl.dot). 8 bf16 channels are one 16-byte vector in channels_last; 16 doubles the
#: accumulators (CB x block_m x block_n fp32). Not yet measured.
MAX_CHANNEL_BLOCK = 16

#: Largest convolution stride along the kernel's rows: each value is its own compile (a
#: constexpr, so the phase test is a shift), and stride s costs s times the matrix work.
MAX_ROW_STRIDE = 4

#: Tiles with block_n at least this select the outer-product kernel (block_n = KY_CHUNK x NW: ky
#: rows of NW input columns each); the shifted kernels take block_n <= 64 (MAX_BLOCK_N), so the
#: two ranges never meet and KernelSpec's schema is unchanged. A convention, not a measurement.
OUTER_MIN_BLOCK_N = 128
#: Largest outer tile: (BLOCK_OW, KY_CHUNK x NW, (n, oh) rows a step). 64 x 256 fp32 accumulators
#: are 128 registers a thread at 4 warps; not yet measured.
OUTER_MAX_BLOCKS = (64, 256, 128)


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
    if problem.spatial_dims != 3 and spec.tile is not None and is_outer(spec):
        reasons += outer_reasons(problem, spec)
    elif problem.spatial_dims != 3:
        rows = kernel_axes(problem).rows
        if rows.stride > MAX_ROW_STRIDE:
            reasons.append(f"stride={rows.stride} along {'width' if kernel_axes(problem).swapped else 'rows'} "
                           f"exceeds {MAX_ROW_STRIDE} (each costs its factor in matrix work)")
    if spec.tile is None:
        reasons.append("needs a tile")
    return reasons


def validate(problem: ConvProblem, spec: KernelSpec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, shifted_available(problem, spec, target))


#: The split policy (:func:`choose_split_k`), fitted on the H100 sweep of the 50 in-sample random shapes
#: (notes/sweep/insample_h100.csv, session 19; the family's planned tile at splits 1-64, isolated calls):
#: of programs per compute unit {0.5 .. 12} x steps per split {32 .. 1024, unbounded}, 4 programs a unit
#: with at most 32 (n, row) steps a split captured 0.967 of the best split's time there, against 0.855
#: for the shared split-K policy (whose ladder 1/4/16/32 and block_k step count fit the GEMM families:
#: on 4x4-7x7 output planes it chose 4 where 8-16 ran up to 2x faster). The held-out 50 read 0.967 (was 0.917).
SPLIT_PROGRAMS_PER_CU = 4
MAX_STEPS_PER_SPLIT = 32
#: The fp32 partials a split may hold (split_k x |dW| x 4 bytes): past 8-16 splits the time of the large-dW
#: layers measured flat (31x31 112x112 C1024 N=8: 6.52-6.81 ms from 4 to 64), and 64 partials of that dW are
#: 252 MB of workspace.
MAX_SPLIT_WORKSPACE_BYTES = 64 * 2**20
#: The largest degree the sweep timed (1-64): the policy picks none it has no measurement of.
MAX_POLICY_SPLIT = 64


def choose_split_k(problem: ConvProblem, spec: KernelSpec, target, base_programs: int, max_split_k: int) -> int:
    """The power of two nearest (by ratio) to the larger of SPLIT_PROGRAMS_PER_CU programs a compute unit
    over the split-free grid and the busiest ky tile's steps over MAX_STEPS_PER_SPLIT; no split empty, the
    workspace within MAX_SPLIT_WORKSPACE_BYTES."""
    steps = outer_geometry(problem, spec).steps if is_outer(spec) else tile_geometry(problem, spec).steps
    wanted = max(SPLIT_PROGRAMS_PER_CU * target.compute_units / max(1, base_programs), steps / MAX_STEPS_PER_SPLIT)
    dw_bytes = math.prod(problem.weight_size) * 4
    return pow2_nearest(wanted, limit=min(max_split_k, MAX_POLICY_SPLIT, steps, MAX_SPLIT_WORKSPACE_BYTES // max(1, dw_bytes)))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (K / channel block * split_k, ky tiles, kx tiles), or for the outer kernel
    (K * split_k, ky chunks, 1); stage 2, if any: the shared reduction's."""
    if is_outer(spec):
        stage1 = (problem.out_channels * spec.split_k, outer_geometry(problem, spec).ky_chunks, 1)
    else:
        geometry = tile_geometry(problem, spec)
        stage1 = (problem.out_channels // spec.group_merge * spec.split_k, geometry.ky_tiles, geometry.kx_tiles)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


def _spatial_stride(strides, axis: Axis, spatial_dims: int) -> int:
    """The stride of ``axis`` among a tensor's trailing spatial strides; 0 for the dummy axis."""
    return 0 if axis.dim is None else strides[len(strides) - spatial_dims + axis.dim]


def _stride_args(x, dy, out_strides, axes, dims) -> list[tuple[str, int]]:
    """The strides both kernels take, in the kernel axes (rows, columns) of ``axes``."""
    rows, columns = axes.rows, axes.columns
    split_stride, k_stride, _c_stride, *tap_strides = out_strides  # cpg == 1
    return [
        ("stride_xn", x.stride(0)), ("stride_xc", x.stride(1)),
        ("stride_xh", _spatial_stride(x.stride(), rows, dims)), ("stride_xw", _spatial_stride(x.stride(), columns, dims)),
        ("stride_dyn", dy.stride(0)), ("stride_dyc", dy.stride(1)),
        ("stride_dyh", _spatial_stride(dy.stride(), rows, dims)),
        ("stride_dyw", _spatial_stride(dy.stride(), columns, dims)),
        ("stride_os", split_stride), ("stride_ok", k_stride),
        ("stride_oy", _spatial_stride(tap_strides, rows, dims)),
        ("stride_ox", _spatial_stride(tap_strides, columns, dims)),
    ]


def stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    axes = kernel_axes(problem)
    rows, columns = axes.rows, axes.columns
    geometry = tile_geometry(problem, spec)
    dims = problem.spatial_dims
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
        *_stride_args(x, dy, out_strides, axes, dims),
        ("ROW_STRIDE", Constexpr(rows.stride)),
        ("CHANNEL_BLOCK", Constexpr(spec.group_merge)),
        ("KX_BLOCK", Constexpr(geometry.kx_block)),
        ("IS_WHOLE_ROWS", Constexpr(geometry.whole_rows)),
        *tile_args,
    ]


def kernel_for(spec: KernelSpec):
    """The outer-product kernel for an outer tile (:func:`is_outer`); else one channel a program
    (2-D tl.dot), or a block of group_merge channels (3-D tl.dot)."""
    if is_outer(spec):
        return _wgrad_shifted_outer_kernel
    return _wgrad_shifted_cblock_kernel if spec.group_merge > 1 else _wgrad_shifted_kernel


def make_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool):
    """The stage-1 arguments of the kernel :func:`kernel_for` picks (looked up at call time, so a
    test may wrap either builder)."""
    if is_outer(spec):
        return outer_stage1_args(problem, spec, x, dy, out, out_strides, interpreted=interpreted)
    return stage1_args(problem, spec, x, dy, out, out_strides, interpreted=interpreted)


# ------------------------------------------------------------------------- outer-product kernel
def is_outer(spec: KernelSpec) -> bool:
    """Whether ``spec`` selects the outer-product kernel: a tile with block_n >= OUTER_MIN_BLOCK_N."""
    return spec.tile is not None and spec.tile.block_n >= OUTER_MIN_BLOCK_N


def outer_axes(problem: ConvProblem) -> KernelAxes:
    """The outer kernel's axes: ``columns`` is the GEMM's axis (output columns x input columns),
    ``rows`` is reduced over with ky looped in chunks. 1-D: the length is the columns (rows the
    dummy); 2-D: (H, W), or (W, H) when only the height has a filter extent."""
    if problem.spatial_dims == 1:
        return KernelAxes(rows=DUMMY, columns=_axis(problem, 0))
    fy, fx = problem.filter_size[:2]
    if fx == 1 and fy > 1:
        return KernelAxes(rows=_axis(problem, 1), columns=_axis(problem, 0))
    return KernelAxes(rows=_axis(problem, 0), columns=_axis(problem, 1))


#: Elements per 16 bytes by dtype: the outer kernel's X and dY row segments start on 16 bytes
#: when the strides allow (see :func:`outer_align`).
VECTOR_ELEMENTS = {"bf16": 8, "fp16": 8, "fp32": 4}


def outer_alignable(problem: ConvProblem) -> int:
    """The alignment (elements) the tile geometry reserves room for: the 16-byte vector when the
    problem is NCHW-contiguous with W and OW multiples of it, else 1. The launch still checks the
    tensors' strides (:func:`outer_align`) and falls back to 1 inside the same NW."""
    a = VECTOR_ELEMENTS[problem.dtype]
    columns = outer_axes(problem).columns
    if problem.layout != "contiguous" or columns.dim is None or columns.size % a or columns.out % a:
        return 1
    if columns.dim != problem.spatial_dims - 1:  # swapped axes: the columns are not the inner dim
        return 1
    return a


def outer_align(problem: ConvProblem, x, dy) -> int:
    """ALIGN for the launch: outer_alignable(problem) if every row start of both operands is a
    multiple of it (unit column strides, the other strides multiples), else 1. The data pointers'
    own 16-byte alignment is Triton's to specialise (and the direct launch re-checks it)."""
    a = outer_alignable(problem)
    if a == 1:
        return 1
    for t in (x, dy):
        if t.stride(-1) != 1 or any(s % a for s in t.stride()[:-1]):
            return 1
    return a


@attrs.frozen(kw_only=True)
class OuterGeometry:
    """How an outer tile covers the problem."""

    nw: int  # X columns a ky (power of two)
    kx_block: int  # power of two >= FX
    ky_chunk: int  # ky a program: block_n // nw
    ky_chunks: int
    ow_blocks: int  # output-column blocks, looped inside the program
    align: int  # the alignment reserved in nw
    steps: int  # (n, oh) steps of the busiest ky chunk (the split gate's count)


def outer_needed_nw(problem: ConvProblem, block_m: int) -> int:
    columns = outer_axes(problem).columns
    return pow2_at_least(outer_alignable(problem) - 1 + (block_m - 1) * columns.stride
                         + (columns.filter - 1) * columns.dilation + 1)


def outer_geometry(problem: ConvProblem, spec: KernelSpec) -> OuterGeometry:
    axes = outer_axes(problem)
    rows, columns = axes.rows, axes.columns
    tile = spec.tile
    nw = outer_needed_nw(problem, tile.block_m)
    ky_chunk = max(tile.block_n // nw, 1)
    busiest = 0
    for ky0 in range(0, rows.filter, ky_chunk):  # the kernel's output-row range per chunk
        ky_last = min(ky0 + ky_chunk, rows.filter) - 1
        oh_lo = cdiv(max(rows.pad - ky_last * rows.dilation, 0), rows.stride)
        top = rows.size - 1 + rows.pad - ky0 * rows.dilation
        oh_hi = min(top // rows.stride + 1, rows.out) if top >= 0 else 0
        busiest = max(busiest, cdiv(problem.batch * max(oh_hi - oh_lo, 0), tile.block_k))
    return OuterGeometry(nw=nw, kx_block=pow2_at_least(columns.filter), ky_chunk=ky_chunk,
                         ky_chunks=cdiv(rows.filter, ky_chunk), ow_blocks=cdiv(columns.out, tile.block_m),
                         align=outer_alignable(problem), steps=busiest)


def outer_reasons(problem: ConvProblem, spec: KernelSpec) -> list[str]:
    """Why the outer kernel cannot take ``spec`` for ``problem`` (beyond the family's gate)."""
    reasons = []
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge} with an outer tile (block_n={spec.tile.block_n} >= "
                       f"{OUTER_MIN_BLOCK_N}): the outer-product kernel runs one channel a program")
    columns = outer_axes(problem).columns
    nw = outer_needed_nw(problem, spec.tile.block_m)
    if nw > spec.tile.block_n:
        reasons.append(f"block_n={spec.tile.block_n} is narrower than one ky's input columns: block_m="
                       f"{spec.tile.block_m} output columns at stride {columns.stride} span {nw} (power of "
                       f"two of align-1 + (block_m-1)*stride + (FX-1)*dilation + 1, FX={columns.filter}, "
                       f"dilation={columns.dilation})")
    return reasons


def outer_stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    axes = outer_axes(problem)
    rows, columns = axes.rows, axes.columns
    geometry = outer_geometry(problem, spec)
    dims = problem.spatial_dims
    align = outer_align(problem, x, dy)
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        ("H", rows.size), ("W", columns.size), ("OH", rows.out), ("OW", columns.out),
        ("FY", rows.filter), ("FX", columns.filter),
        ("STRIDE_H", rows.stride), ("STRIDE_W", columns.stride), ("PAD_H", rows.pad), ("PAD_W", columns.pad),
        ("DIL_H", rows.dilation), ("DIL_W", columns.dilation),
        ("BATCH", problem.batch), ("KPG", problem.kpg),
        ("W_ALIGNED", columns.size // align), ("OW_ALIGNED", columns.out // align),
        ("OW_BLOCKS", geometry.ow_blocks), ("SPLIT_K", spec.split_k),
        *_stride_args(x, dy, out_strides, axes, dims),
        ("NW", Constexpr(geometry.nw)),
        ("KX_BLOCK", Constexpr(geometry.kx_block)),
        ("ALIGN", Constexpr(align)),
        *shared.tile_option_args(spec, interpreted=interpreted),
    ]


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=kernel_for(spec), make_args=make_args, grids=grids, validate=validate)


def prepare(problem, spec, target, input, grad_output, out):
    return shared.prepare_stages(problem, spec, target, input, grad_output, out, kernel=kernel_for(spec),
                                 make_args=make_args, grids=grids, validate=validate)


def compile_kernels(problem, spec, target):
    return shared.compile_stages(problem, spec, target, kernel=kernel_for(spec), make_args=make_args,
                                 validate=validate)
