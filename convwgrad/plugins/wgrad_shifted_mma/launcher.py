"""Launcher of the shifted-MMA family: the gate, the split policy, the run-time build (NVRTC) and
the launches (the CUDA driver API for stage 1, the shared ordered reduction for stage 2).

Why a CUDA C++ kernel and not Triton or Gluon: the kernel reads A as a Hankel view of one staged
input row (1-element shifts) and B as a Toeplitz view of a ring of grad_output rows whose start
moves every step. Plain Triton has no shared-memory handle; Gluon's shared sub-views start only at
constexpr multiples of their length (notes/GLUON.md), so neither view exists there without gathers
through scratch memory. The Triton shifted family forms the operands element by element and was
measured 8.4x slower on RepLKNet-31B's 31x31 layer (H200, session 11). The gfx950 story: the same
formulation on v_mfma with hiprtc is not written; on AMD the Triton shifted and merged families
stay the path (this family refuses HIP with that reason).
"""

from __future__ import annotations

import ctypes
import functools
import math
import pathlib
from typing import NamedTuple

import torch

from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks import nvrtc
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import BoundLaunch, KernelSpec, cdiv, pow2_nearest

SOURCE = pathlib.Path(__file__).with_name("kernels.cu")
#: Warps (channels) a CTA of the kernel for operands of any strides, as the source's WARPS.
WARPS = 4
#: Channel counts of the channels_last kernels with cooperative loads: a CTA's warps own that many adjacent
#: channels, and one vector load a position brings them all (4 bf16 in 8 bytes). Session 13 also built 8
#: channels a CTA (16-byte loads, 8 warps): H100, graph replay, against 4 channels, 0.92-0.98x the time on
#: RepLKNet-31B's 31x31 and 29x29 layers but 1.02-1.20x on the 27x27, SLaK and batch-8 ones, and NVRTC's
#: build of it spilled 8 bytes; it was dropped (git 275dc2e has it).
COOPERATIVE_CHANNEL_COUNTS = (4,)
#: Channels a cooperative CTA, where the layout allows one (cooperative_layout); 0: never. Measured
#: (H100, session 13, tools/proto_shifted_mma.py --layouts channels_last): 4 channels against the kernel
#: for any strides 1.31x (31x31 56x56 N=32: 153.6 us against 200.6), 1.52x (29x29), 1.47x (27x27), 1.20x
#: (13x13 14x14 N=32); 1.01-1.09x on SLaK and the batch-8 31x31; 0.81x on UniRepLKNet's 28x28 13x13 at
#: batch 4 (19.3 us against 15.6: 160 CTAs, too few to hide a CTA barrier a row).
COOPERATIVE_CHANNELS = 4
#: Filters up to this many taps a side run the kernels of the 16 x 16 tap tile (one m16 x two n8 MMA
#: tiles, a quarter of the 32 x 32 tile's MMAs).
SMALL_TILE_FILTER = 16


#: Longest 1-D filter: the sequence kernels fold the taps as kx + 16 ky into one m16 x n8 MMA tile.
SEQUENCE_MAX_FILTER = 128
#: Positions j a step of the sequence kernels that exist (kernels.cu's STEP: 16-position blocks; each lane's loads
#: for a step are in flight together), and the one the family runs. Chosen before measuring (session 16): 64,
#: the 2-D kernels' row of four blocks; 128 is built to be timed beside it.
SEQUENCE_STEPS = (64, 128)
SEQUENCE_STEP = 64
#: Positions a unit's prologue stages besides its steps (kernels.cu's SEQ_BACK grad_output positions and the
#: first 16 input ones): what splitting an image into more units costs.
SEQUENCE_PROLOGUE = 128 + 16
#: The sequence kernels index positions with 32-bit ints, to L + left padding + a few steps past it.
SEQUENCE_MAX_POSITIONS = 2**31 - 4 * SEQUENCE_STEP - SEQUENCE_PROLOGUE

def _kernel_name(channels: int, small_tile: bool, dilated_cols: bool = False) -> str:
    """The source's name for a stage-1 kernel: wgrad_shifted_mma[_dilated_cols][_cl<channels>][_t16]_kernel."""
    return (f"wgrad_shifted_mma{'_dilated_cols' if dilated_cols else ''}{f'_cl{channels}' if channels else ''}"
            f"{'_t16' if small_tile else ''}_kernel")


def _sequence_kernel_name(channels: int, step: int) -> str:
    """The source's name for a 1-D stage-1 kernel: wgrad_shifted_mma_seq[_cl<channels>][_s<step>]_kernel."""
    return (f"wgrad_shifted_mma_seq{f'_cl{channels}' if channels else ''}"
            f"{f'_s{step}' if step != SEQUENCE_STEPS[0] else ''}_kernel")


def stage1_kernel_name(problem: ConvProblem, channels: int = 0, sequence_step: int | None = None) -> str:
    """The source's stage-1 kernel for ``problem``: cooperative over ``channels`` channels (0: the
    kernel for any strides); for a 2-D problem of the tap tile the filter needs, the _dilated_cols
    one for a column dilation above 1 (at 1 the kernel's A loads overlap and nvcc shares them,
    kernels.cu's mma_row); for a 1-D problem the sequence kernel of ``sequence_step`` positions a
    step (None: SEQUENCE_STEP)."""
    if problem.spatial_dims == 1:
        return _sequence_kernel_name(channels, sequence_step or SEQUENCE_STEP)
    return _kernel_name(channels, max(problem.filter_size) <= SMALL_TILE_FILTER, problem.dilation[-1] > 1)


#: Every kernel of the source (its build is checked for spills kernel by kernel).
KERNEL_NAMES = (*(_kernel_name(channels, small, dilated) for dilated in (False, True)
                  for channels in (0, *COOPERATIVE_CHANNEL_COUNTS) for small in (False, True)
                  if small or not dilated),   # dilated columns: the 16 x 16 tile only (the gate)
                *(_sequence_kernel_name(channels, step) for step in SEQUENCE_STEPS
                  for channels in (0, *COOPERATIVE_CHANNEL_COUNTS)))
#: Largest filter side: the tile is 32 kx x 32 ky (two m16 and four n8 MMA tiles).
MAX_FILTER = 32
#: Widest input and output rows: four 16-column blocks of one warp, and the shared row copies' length.
MAX_WIDTH = 64
#: The ring holds 33 grad_output rows and is preloaded with the rows above the first input row.
MAX_TOP_PADDING = 32
#: Most grad_output rows back a step reads, DH x (KH - 1): the ring's 33 rows hold those rows, the current
#: one and the row the next step writes before every warp is done with this one (the cooperative kernels'
#: one barrier a row).
MAX_RING_SPAN = 31
#: Elements of each of the two staged copies of an input row (the source's COPY_LEN): every A read of a
#: 16-column block, up to column 16 x blocks - 1 + DW x (KW - 1) of the padded row, stays in its copy.
COPY_LEN = 160
#: Stage-1 CTAs aimed at: ~8 an SM of 132 over the run, each CTA 4 channels x a run of images.
#: Chosen before measuring (session 11); the timed layers ran at this value.
TARGET_CTAS = 132 * 8
#: 2-D filters: stage-1 CTAs aimed at, 32 an SM of 132 (4 x TARGET_CTAS), the split rounded to a power of two
#: (the batch sizes users train with are) and capped at MAX_SPLIT_2D and at MAX_PARTIALS_PER_INPUT_BYTE. Fitted
#: on the in-sample random shapes and the fitting set (notes/sweep/{insample,fit}_h100.csv, H100, isolated
#: calls, session 20): the family's time at this split is 0.978 of its best swept split's (geomean, 29 shapes,
#: min 0.90); session 11's policy (TARGET_CTAS, degrees that split the batch evenly: 3, 5, 7, 11) was 0.938.
#: More splits rarely cost (the 56x56 and 28x28 rows were flat from 8 to 64) but the partials are written and
#: read again: on 31x31 filters over 7x7 planes 64 splits ran 2.4x slower than 4.
TARGET_CTAS_2D = 132 * 32
MAX_SPLIT_2D = 32
#: Bytes of fp32 partials (splits x channels x taps x 4) a split may add per byte of input, at most: 8.
MAX_PARTIALS_PER_INPUT_BYTE = 8
#: Output rows narrower than this (a 16-column MMA block a row, partly empty) aim at 16 CTAs an SM instead:
#: fitted on the narrow-plane fitting set (notes/sweep/fit_narrow_h100.csv, H100, isolated calls, session 21;
#: 9x9-31x31 on planes of 7, 10 and 13) with the in-sample and fitting shapes' 7x7 planes, over the 17 such
#: shapes the router gives the family: 0.975 of the best swept split's time (min 0.87) against 0.955 at 32 an SM.
NARROW_ROWS_BELOW = 14
TARGET_CTAS_2D_NARROW_ROWS = 132 * 16
DTYPES = {"bf16": (), "fp16": ("-DELEM_IS_FP16",)}


def _bindings():
    """(driver, nvrtc) from cuda-bindings, or the reason they are missing (the shared NVRTC block's;
    a function of this module so that tests can take them away from this family alone)."""
    return nvrtc.bindings()


def mma_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why the kernel cannot run ``spec`` on ``problem``; [] when it can. The one gate: support() and
    prepare() both call it."""
    reasons = []
    if target.backend != "cuda":  # the interpreter is a target of its own
        reasons.append(f"target {target.name}: the kernel is CUDA C++ (mma.sync, ldmatrix) built by NVRTC; "
                       f"no interpreter, and no gfx950 port (the Triton shifted family serves HIP)")
    elif int(target.arch) < 80:
        reasons.append(f"target {target.name}: mma.sync m16n8k16 on bf16 needs sm_80 or newer")
    elif _bindings()[1]:
        reasons.append(_bindings()[1])
    if problem.spatial_dims not in (1, 2):
        reasons.append(f"spatial_dims={problem.spatial_dims}: the kernels compute 1-D and 2-D convolutions only")
    if problem.cpg != 1 or problem.kpg != 1:
        reasons.append(f"cpg={problem.cpg}, kpg={problem.kpg}: depthwise problems only (one input and one "
                       f"output channel a group)")
    if problem.dtype not in DTYPES:
        reasons.append(f"dtype={problem.dtype}: bf16 and fp16 only (mma.sync on 16-bit operands)")
    if problem.spatial_dims == 2:
        if tuple(problem.stride) != (1, 1):
            reasons.append(f"stride={tuple(problem.stride)}: stride 1 only (the Hankel and Toeplitz views step "
                           f"one element a column and one row a step)")
        fy, fx = problem.filter_size
        dh, dw = problem.dilation
        if fy > MAX_FILTER or fx > MAX_FILTER:
            reasons.append(f"filter_size={tuple(problem.filter_size)}: at most {MAX_FILTER} a side (a 32 x 32 "
                           f"tap tile)")
        if problem.input_size[1] > MAX_WIDTH or problem.output_size[1] > MAX_WIDTH:
            reasons.append(f"input width {problem.input_size[1]}, output width {problem.output_size[1]}: at most "
                           f"{MAX_WIDTH} (four 16-column blocks of one warp)")
        top = problem.padding[0][0]
        if top > MAX_TOP_PADDING:
            reasons.append(f"padding top={top}: at most {MAX_TOP_PADDING} (the ring of grad_output rows)")
        if dw > 1 and max(fy, fx) > SMALL_TILE_FILTER:
            reasons.append(f"dilation={tuple(problem.dilation)}, filter_size={tuple(problem.filter_size)}: a column "
                           f"dilation above 1 runs on the 16 x 16 tap tile only, filters of at most "
                           f"{SMALL_TILE_FILTER} a side (NVRTC's build of the 32 x 32 one spilled)")
        if dh * (fy - 1) > MAX_RING_SPAN:
            reasons.append(f"dilation={tuple(problem.dilation)}, filter_size={tuple(problem.filter_size)}: the "
                           f"filter spans {dh} x ({fy} - 1) = {dh * (fy - 1)} grad_output rows above a step's, at "
                           f"most {MAX_RING_SPAN} (the ring of 33 rows)")
        # the last 16-column block's A reads reach column blocks_end - 1 + DW (KW - 1) of the padded row
        # (exact for an even DW (KW - 1); an odd one is read from the odd copy, one element back), and the
        # padded row, left + W + right = OW + DW (KW - 1), fits with them. At DW = 1 the kernel reads up to
        # 31 columns past a block unclamped (mma_row), within 64 + 31 while the widths pass
        blocks_end = 16 * cdiv(problem.output_size[1], 16)
        if blocks_end + dw * (fx - 1) > COPY_LEN:
            reasons.append(f"dilation={tuple(problem.dilation)}, filter_size={tuple(problem.filter_size)}, output "
                           f"width {problem.output_size[1]}: the row reads reach column {blocks_end} + {dw} x "
                           f"({fx} - 1) = {blocks_end + dw * (fx - 1)} of the padded row, at most {COPY_LEN} (its "
                           f"staged copy)")
    if problem.spatial_dims == 1:
        reasons += _sequence_reasons(problem)
    if spec.tile is None or spec.split_k < 2:
        reasons.append(f"split_k={spec.split_k}: the kernel writes fp32 partials, so it runs in two stages "
                       f"(split_k >= 2)")
    return reasons


def _sequence_reasons(problem: ConvProblem) -> list[str]:
    """Why the sequence kernels (1-D) cannot run ``problem``."""
    reasons = []
    (k,), (length,), (left, _) = problem.filter_size, problem.input_size, problem.padding[0]
    if tuple(problem.stride) != (1,):
        reasons.append(f"stride={tuple(problem.stride)}: stride 1 only (the Hankel and shifted views step one "
                       f"position a column)")
    if tuple(problem.dilation) != (1,):
        reasons.append(f"dilation={tuple(problem.dilation)}: the sequence kernels are undilated (a dilated 1-D "
                       f"filter is not written)")
    if k > SEQUENCE_MAX_FILTER:
        reasons.append(f"filter_size={tuple(problem.filter_size)}: at most {SEQUENCE_MAX_FILTER} taps (kx + 16 ky "
                       f"in one 16 x 8 MMA tile)")
    if max(length, problem.output_size[0]) + left > SEQUENCE_MAX_POSITIONS:
        reasons.append(f"input length {length}, padding {left}: positions past {SEQUENCE_MAX_POSITIONS} (the "
                       f"kernels index a sequence with 32-bit ints)")
    return reasons


def validate(problem, spec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, mma_available(problem, spec, target))


def choose_split_k(problem: ConvProblem) -> int:
    """Splits of the batch: TARGET_CTAS stage-1 CTAs at most one image a split apart, and at
    least two (the second stage casts the fp32 partials). A split past the batch writes zeros.
    1-D: splits of the units (sequence_schedule), as many as TARGET_CTAS asks for, each the same
    number of units apart from the last."""
    ctas_per_split = cdiv(problem.out_channels, WARPS)
    if problem.spatial_dims == 1:
        units = sequence_schedule(problem, 1).units_per_split   # one split: all the units
        return max(2, cdiv(units, cdiv(units, _sequence_target_splits(problem))))
    input_bytes = problem.batch * problem.in_channels * math.prod(problem.input_size) * problem.element_size
    partial_bytes = problem.out_channels * math.prod(problem.filter_size) * 4
    target_ctas = TARGET_CTAS_2D_NARROW_ROWS if problem.output_size[-1] < NARROW_ROWS_BELOW else TARGET_CTAS_2D
    wanted = min(target_ctas / ctas_per_split, MAX_SPLIT_2D, MAX_PARTIALS_PER_INPUT_BYTE * input_bytes / partial_bytes)
    splits = min(problem.batch, pow2_nearest(wanted))
    return max(2, cdiv(problem.batch, cdiv(problem.batch, splits)))


def images_per_split(problem: ConvProblem, spec: KernelSpec) -> int:
    return cdiv(problem.batch, spec.split_k)


def sequence_steps(problem: ConvProblem, step: int = SEQUENCE_STEP) -> int:
    """Steps of ``step`` positions j a 1-D image takes: j runs to the output length plus 16 x (the
    folded tap rows - 1) (kernels.cu's sequence kernels)."""
    (k,), (length,) = problem.filter_size, problem.output_size
    return cdiv(length + 16 * (cdiv(k, 16) - 1), step)


class SequenceSchedule(NamedTuple):
    """How the sequence kernels share a 1-D batch out: a unit is a run of ``steps_per_unit`` steps of
    one image (whole images unless the batch has fewer images than splits), a split ``units_per_split``
    consecutive units."""
    steps_per_image: int
    steps_per_unit: int
    units_per_split: int


def _sequence_target_splits(problem: ConvProblem, step: int = SEQUENCE_STEP) -> int:
    """Splits that give TARGET_CTAS stage-1 CTAs, as many as the batch's steps allow."""
    steps = problem.batch * sequence_steps(problem, step)
    wanted = min(steps, cdiv(TARGET_CTAS, cdiv(problem.out_channels, WARPS)), shared.MAX_SPLIT_K)
    # rounded down to a power of two (fitted with the 2-D rule, session 20: 0.959 of the best swept split's time
    # on the 18 in-sample and fitting 1-D shapes, 0.936 before; L4096 C841 k15 ran 2x slower at 6 splits than at 2)
    return pow2_nearest(wanted, down=True)


def sequence_schedule(problem: ConvProblem, split_k: int, step: int = SEQUENCE_STEP) -> SequenceSchedule:
    """The units follow from the problem (whole images where the batch has an image for each of
    _sequence_target_splits, else images cut into that many units in all), the units a split from
    ``split_k``: a pinned split_k past the units leaves splits that write zeros."""
    steps = sequence_steps(problem, step)
    units_per_image = min(steps, cdiv(_sequence_target_splits(problem, step), problem.batch))
    steps_per_unit = cdiv(steps, units_per_image)
    units_per_image = cdiv(steps, steps_per_unit)
    return SequenceSchedule(steps, steps_per_unit, cdiv(problem.batch * units_per_image, split_k))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (channel blocks of WARPS, splits, 1); stage 2: the shared reduction's."""
    return (cdiv(problem.out_channels, WARPS), spec.split_k, 1), shared.reduce_grid(problem)


def workspace_nbytes(problem: ConvProblem, spec: KernelSpec) -> int:
    return shared.workspace_nbytes(problem, spec)


@functools.cache
def _cubin(dtype: str, arch: str) -> bytes:
    return build_cubin(SOURCE.read_bytes(), dtype, arch, SOURCE.name)


def build_cubin(source: bytes, dtype: str, arch: str, name: str = "kernels.cu") -> bytes:
    """``source`` built by NVRTC for sm_``arch`` with ``dtype``'s defines (uncached: tools build older
    sources of the family with it)."""
    return nvrtc.build_cubin(source, arch, DTYPES[dtype], name)


def cooperative_layout(problem: ConvProblem, strides, channels: int) -> bool:
    """Whether operands of these element strides (input n, c, spatial..., then grad_output's) can be
    read by the cooperative kernel of ``channels`` a CTA: adjacent channels adjacent in memory (channel
    stride 1) and every vector of ``channels`` starting on a multiple of ``channels`` elements. The data
    pointers' alignment is checked a call (it is not part of the prepared call's key)."""
    sizes = (*problem.input_shape, *problem.grad_output_shape)
    rank = len(problem.input_shape)
    channel_dims = (1, rank + 1)
    # the n and spatial strides of dims longer than 1 (a size-1 dim's stride never multiplies an index)
    steps = [stride for i, (stride, size) in enumerate(zip(strides, sizes)) if i not in channel_dims and size != 1]
    return (channels in COOPERATIVE_CHANNEL_COUNTS and problem.out_channels % channels == 0
            and all(strides[i] == 1 for i in channel_dims) and all(s % channels == 0 for s in steps))


@functools.cache
def _function(dtype: str, arch: str, device_index: int, name: str):
    """Kernel ``name`` loaded into ``device_index``'s primary context (torch's): (module, function)."""
    return nvrtc.load_function(_cubin(dtype, arch), device_index, name, f"{SOURCE.name}, sm_{arch}")


_ARG_TYPES = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 13 + (ctypes.c_longlong,) * 8  # as KERNEL_PARAMS
_SEQUENCE_ARG_TYPES = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 9 + (ctypes.c_longlong,) * 6  # as SEQ_PARAMS


def _stage1_scalars(problem: ConvProblem, spec: KernelSpec, strides, step: int) -> tuple[tuple, tuple]:
    """The stage-1 kernels' arguments after the three pointers, and the ctypes of all of them."""
    if problem.spatial_dims == 1:
        schedule = sequence_schedule(problem, spec.split_k, step)
        scalars = (problem.batch, problem.out_channels, *problem.input_size, *problem.output_size,
                   *problem.filter_size, problem.padding[0][0], *schedule, *strides)
        return scalars, _SEQUENCE_ARG_TYPES
    (fy, fx), (h, w), (oh, ow) = problem.filter_size, problem.input_size, problem.output_size
    scalars = (problem.batch, problem.out_channels, h, w, oh, ow, fy, fx, problem.padding[0][0],
               problem.padding[1][0], *problem.dilation, images_per_split(problem, spec), *strides)
    return scalars, _ARG_TYPES


class _Stage1(NamedTuple):
    """One stage-1 kernel bound for a launch (the 2-D kernels take KERNEL_PARAMS, the 1-D ones SEQ_PARAMS)."""
    name: str
    function: object
    grid: tuple
    block: tuple
    alignment: int  # bytes both data pointers must be aligned to


def prepare(problem, spec, target, input, grad_output, out, cooperative_channels=None,
            sequence_step=None) -> BoundLaunch:
    """The bound launch; ``cooperative_channels`` overrides COOPERATIVE_CHANNELS (benchmarks: 0 runs the
    kernel for any strides), ``sequence_step`` SEQUENCE_STEP (one of SEQUENCE_STEPS)."""
    step = sequence_step or SEQUENCE_STEP
    if step not in SEQUENCE_STEPS:
        raise ValueError(f"sequence_step={sequence_step}: the source has steps {SEQUENCE_STEPS}")
    validate(problem, spec, target)
    # the kernel reads any strides in place (every layout; the prepared call is bound to these strides:
    # dispatch keys its prepared calls by them, a patched layer's remembered call checks them).
    # channels_last in place measured 1.05-1.9x faster than copying to NCHW first on all 8 layers timed
    # (H100, session 12: RepLKNet-31B 31x31 56x56 N=32 200.6 us against 328.4; NCHW operands 128 us;
    # tools/proto_shifted_mma.py --layouts channels_last), although its row loads touch a sector a lane.
    # Where the channels_last strides allow, the cooperative kernel loads a vector of channels a position.
    strides = (*input.stride(), *grad_output.stride())
    device_index = input.device.index
    channels = COOPERATIVE_CHANNELS if cooperative_channels is None else cooperative_channels
    cooperative = None
    if channels and cooperative_layout(problem, strides, channels):
        name = stage1_kernel_name(problem, channels, step)
        cooperative = _Stage1(name, _function(problem.dtype, target.arch, device_index, name)[1],
                              (problem.out_channels // channels, spec.split_k, 1), (32 * channels, 1, 1),
                              2 * channels)
    scalars, arg_types = _stage1_scalars(problem, spec, strides, step)
    packed = nvrtc.PackedArguments(arg_types, scalars)  # both kernels take the same parameter list
    stage1_grid, _ = grids(problem, spec)
    shared.check_grid(stage1_grid, target, spec.kernel_name())
    name = stage1_kernel_name(problem, 0, step)
    general = _Stage1(name, _function(problem.dtype, target.arch, device_index, name)[1], stage1_grid,
                      (32 * WARPS, 1, 1), 1)

    def first_stage(x, dy, partials, stream):
        x_ptr, dy_ptr = x.data_ptr(), dy.data_ptr()
        chosen = general
        if cooperative is not None and x_ptr % cooperative.alignment == 0 and dy_ptr % cooperative.alignment == 0:
            chosen = cooperative
        packed.launch(chosen.function, chosen.grid, chosen.block, stream, (x_ptr, dy_ptr, partials.data_ptr()),
                      chosen.name)
        return chosen.name

    # the native backward's stage 1: the cooperative kernel where both pointers are aligned for it, else
    # the general one (as first_stage chooses)
    native_stage1 = [packed.native_launch(kernel.function, kernel.grid, kernel.block, kernel.alignment,
                                          kernel.alignment)
                     for kernel in (cooperative, general) if kernel is not None]
    return nvrtc.bound_two_stages(problem, spec, input, out, first_stage, name, native_stage1)


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    bound = prepare(problem, spec, target, input, grad_output, out)
    bound.run(input, grad_output, out, workspace)
    return list(bound.kernels)


def compile_kernels(problem, spec, target):
    """Nothing for Triton to compile ahead of time: NVRTC builds the kernel on first use (cached per
    dtype and architecture for the process)."""
    validate(problem, spec, target)
    return []
