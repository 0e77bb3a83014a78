"""Launcher of the direct family: the gate, the step geometry, grids, arguments, the split policy.

Tile fields, as this family reads them (it has no GEMM tile; see :mod:`.kernels`):

- ``block_m``: output channels per program (BLOCK_C);
- ``block_n``: filter taps per program, a power of two (BLOCK_T); taps past it go to more
  programs along grid axis 2. ``block_n = 1`` with a filter of more than one tap selects the
  sliding kernel (:mod:`.sliding`): every tap its own unrolled [block_m] accumulator, each input
  column loaded and converted once per step and filter row;
- ``block_k``: output columns per step (BLOCK_W): the positions one step accumulates;
- ``num_warps``; ``num_stages`` is passed to Triton but the kernel has no tl.dot to pipeline.
"""

from __future__ import annotations

import math

from convwgrad.provider.aot import Constexpr
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import KernelSpec, cdiv

from .kernels import _wgrad_direct_kernel
from .sliding import sliding_kernel

#: Largest channels per program: 512 is 64 lanes x 8 bf16 (one wave64's 16-byte vectors side by
#: side, the sliding kernel's widest 1-wave program on gfx950); the tile limits (this and the two
#: below) are checked by the shared tiled_kernel_reasons.
MAX_BLOCK_C = 512
#: Largest taps per program: 64 holds a 7x7 (8x8 padded) filter; bigger filters take more
#: programs along grid axis 2 (each re-reading its inputs), which is the large-filter families'
#: ground, not this one's.
MAX_BLOCK_T = 64
#: Largest columns per step: 256 covers a 224-wide output row in one segment (NCHW tiles).
MAX_BLOCK_W = 256
#: fp32 accumulators per thread (block_m * block_n * block_k / threads) past which a tile is
#: refused: each accumulator comes with its input element, and 128 + 128 registers spill.
#: Chosen from the register budget (255 a thread on sm_90), not yet measured.
MAX_ACC_PER_THREAD = 128
#: The sliding kernel unrolls every tap: up to a 9x9 filter (81 taps), past which the unrolled
#: body (and its compile time) grows with no gain over the tile kernel's tap blocks. Not measured.
MAX_SLIDING_TAPS = 81
#: ...and taps x block_k FMAs a channel in one unrolled step: 648 = 81 taps x 8 columns, about
#: 2 x 650 instructions a copy of the body (it has two). Chosen to keep the body within the
#: instruction cache's reach; not yet measured.
MAX_SLIDING_PRODUCTS = 648


def is_sliding(problem: ConvProblem, spec: KernelSpec) -> bool:
    """block_n == 1 on a filter of several taps selects the sliding kernel."""
    return spec.tile is not None and spec.tile.block_n == 1 and math.prod(problem.filter_size) > 1


def kernel_for(problem: ConvProblem, spec: KernelSpec):
    """The stage-1 kernel ``spec`` runs: the tile kernel, or the sliding kernel generated for this
    filter, stride, dilation, step and channel tail."""
    if not is_sliding(problem, spec):
        return _wgrad_direct_kernel
    fz, fy, fx = shared.padded3(problem.filter_size, 1)
    return sliding_kernel(fz, fy, fx, problem.stride[-1], problem.dilation[-1], spec.tile.block_k,
                          problem.out_channels % spec.tile.block_m != 0)


def steps_per_row(problem: ConvProblem, spec: KernelSpec) -> int:
    """Segments of block_k output columns in one output row."""
    return cdiv(problem.output_size[-1], spec.tile.block_k)


def total_steps(problem: ConvProblem, spec: KernelSpec) -> int:
    """Segments one channel block walks: every output row (n, od, oh) times its segments."""
    rows = problem.batch * math.prod(problem.output_size[:-1])
    return rows * steps_per_row(problem, spec)


def inner_columns(problem: ConvProblem, block_w: int) -> tuple[int, int]:
    """Segments [lo, hi) of an output row whose every tap reads inside the input (no column mask)."""
    width, out_width = problem.input_size[-1], problem.output_size[-1]
    fx, stride, dil = problem.filter_size[-1], problem.stride[-1], problem.dilation[-1]
    pad = problem.padding[-1][0]
    span = block_w * stride
    lo = cdiv(pad, span)
    last = width - 1 + pad - (fx - 1) * dil - (block_w - 1) * stride  # largest ow0 * stride allowed
    hi = min(out_width // block_w, last // span + 1) if last >= 0 else 0
    return lo, max(lo, hi)


def accumulators_per_thread(spec: KernelSpec, target, problem: ConvProblem | None = None) -> float:
    """fp32 accumulators a thread holds: the tile kernel's [block_n, block_m, block_k] tile, or the
    sliding kernel's taps x block_m (``problem`` given)."""
    tile = spec.tile
    if problem is not None and is_sliding(problem, spec):
        return math.prod(problem.filter_size) * tile.block_m / (tile.num_warps * target.warp_size)
    return tile.block_m * tile.block_n * tile.block_k / (tile.num_warps * target.warp_size)


def direct_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why the direct kernel cannot run ``spec`` on ``problem``; [] when it can. The one gate:
    support() and validate() both call it."""
    reasons = []
    if problem.cpg != 1:
        reasons.append(f"cpg={problem.cpg}: the direct family computes depthwise and channel-multiplier "
                       f"problems (cpg == 1); grouped convolutions run in the split-K family")
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: the direct family blocks channels by tile.block_m, "
                       f"it takes no merge degree")
    if spec.allow_tf32:
        reasons.append("allow_tf32=True: the direct family has no matrix-unit path, it accumulates fp32 FMAs")
    tile = spec.tile
    if tile is None:
        reasons.append("needs a tile")
        return reasons
    per_thread = accumulators_per_thread(spec, target, problem)
    if is_sliding(problem, spec):
        taps = math.prod(problem.filter_size)
        if taps > MAX_SLIDING_TAPS:
            reasons.append(f"block_n=1 (the sliding kernel) unrolls all {taps} taps, over {MAX_SLIDING_TAPS}: "
                           f"use the tile kernel (block_n > 1) for this filter")
        if taps * tile.block_k > MAX_SLIDING_PRODUCTS:
            reasons.append(f"block_k={tile.block_k} x {taps} taps = {taps * tile.block_k} unrolled FMAs a step, "
                           f"over the sliding kernel's {MAX_SLIDING_PRODUCTS}")
    if per_thread > MAX_ACC_PER_THREAD:
        reasons.append(f"tile {tile.name} holds {per_thread:g} fp32 accumulators a thread on {target.name}, "
                       f"over {MAX_ACC_PER_THREAD}: it would spill registers")
    return reasons


def validate(problem: ConvProblem, spec: KernelSpec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, direct_available(problem, spec, target))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (channel blocks, split_k, tap blocks: 1 for the sliding kernel); stage 2, if any: the
    shared reduction's."""
    taps = math.prod(problem.filter_size)
    tap_blocks = 1 if is_sliding(problem, spec) else cdiv(taps, spec.tile.block_n)  # sliding: every tap a program
    stage1 = (cdiv(problem.out_channels, spec.tile.block_m), spec.split_k, tap_blocks)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


#: The split policy's aim: programs per compute unit. At ~100 registers a thread a 4-warp
#: program leaves room for ~5 resident per H200 SM; 8 gives the scheduler a second, partial wave
#: to balance uneven splits. Not yet measured.
TARGET_PROGRAMS_PER_CU = 8
#: ...or warps per compute unit, whichever asks for more programs: narrow programs (the sliding
#: kernel's 1-warp ones) need more of them to fill a SM. Not yet measured.
TARGET_WARPS_PER_CU = 32
#: Each split walks at least this many segments, so the fp32 partial it writes ([taps, channels]
#: per program) and the reduction stay small next to its loads. Not yet measured.
MIN_STEPS_PER_SPLIT = 16


def choose_split_k(problem: ConvProblem, spec: KernelSpec, target, base_programs: int, max_split_k: int) -> int:
    """The direct family's split: fill TARGET_PROGRAMS_PER_CU programs (or TARGET_WARPS_PER_CU warps)
    a compute unit, every split
    at least MIN_STEPS_PER_SPLIT segments, within ``max_split_k``. Its own policy (not the merged
    family's ladder): this kernel streams on CUDA cores and wants full waves."""
    per_cu = max(TARGET_PROGRAMS_PER_CU, TARGET_WARPS_PER_CU // spec.tile.num_warps)
    wanted = cdiv(per_cu * target.compute_units, max(1, base_programs))
    cap = max(1, min(max_split_k, total_steps(problem, spec) // MIN_STEPS_PER_SPLIT))
    return max(1, min(wanted, cap))


def stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    split_stride, k_stride, _c_stride, z_stride, y_stride, x_stride = out_strides  # cpg == 1
    col_blocks = steps_per_row(problem, spec)
    steps = total_steps(problem, spec)
    inner_lo, inner_hi = inner_columns(problem, spec.tile.block_k)
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        *shared.geometry_args(problem),
        ("TAPS", math.prod(problem.filter_size)),
        ("C_OUT", problem.out_channels),
        ("KPG", problem.kpg),
        ("COL_BLOCKS", col_blocks),
        ("STEPS", steps),
        ("STEPS_PER_SPLIT", cdiv(steps, spec.split_k)),
        ("COL_INNER_LO", inner_lo), ("COL_INNER_HI", inner_hi),
        *shared.operand_stride_args(x, dy),
        ("stride_os", split_stride), ("stride_ok", k_stride),
        ("stride_oz", z_stride), ("stride_oy", y_stride), ("stride_ox", x_stride),
        ("BLOCK_C", Constexpr(spec.tile.block_m)),
        ("BLOCK_T", Constexpr(spec.tile.block_n)),
        ("BLOCK_W", Constexpr(spec.tile.block_k)),
        ("HAS_CHANNEL_TAIL", Constexpr(problem.out_channels % spec.tile.block_m != 0)),
        ("IS_ONE_COL_BLOCK", Constexpr(col_blocks == 1)),
        ("IS_WIDE_INDEX", Constexpr(spec.wide_index)),
    ]


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    validate(problem, spec, target)
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=kernel_for(problem, spec), make_args=stage1_args, grids=grids, validate=validate)


def prepare(problem, spec, target, input, grad_output, out):
    validate(problem, spec, target)
    return shared.prepare_stages(problem, spec, target, input, grad_output, out, kernel=kernel_for(problem, spec),
                                 make_args=stage1_args, grids=grids, validate=validate)


def compile_kernels(problem, spec, target):
    validate(problem, spec, target)
    return shared.compile_stages(problem, spec, target, kernel=kernel_for(problem, spec), make_args=stage1_args,
                                 validate=validate)
