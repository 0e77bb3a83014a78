"""Launcher of the short-1-D family: the gate, the split policy, the run-time build (NVRTC, one build
a filter: taps, left padding and dilation are defines) and the launches (the driver API for stage 1, the
shared ordered reduction for stage 2).

Why CUDA C++ and not Triton: a lane's taps read grad_output shifted by 1-9 positions. Triton has no
way to shift a register tile, so each tap becomes its own load of a shifted, unaligned tile (the
direct and merged families do that: 4 narrow loads and their masks an element for k = 4, and the
merged family ran Mamba's k = 4 layer at 3.3x its memory floor on the H100, session 16). Here a lane
holds 16-byte vectors and takes its neighbours' elements by warp shuffles, so an element costs
its two loads' share and its FMAs. The gfx950 story: the same kernel is plain CUDA (no MMA, no
inline PTX but the fp16 conversion) and would port to HIP with hiprtc (wave64: 64 lanes a chunk);
not written, so this family refuses HIP and the merged family serves it there.
"""

from __future__ import annotations

import ctypes
import functools
import pathlib

import torch

from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.blocks import nvrtc
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.spec import BoundLaunch, KernelSpec, cdiv

SOURCE = pathlib.Path(__file__).with_name("kernels.cu")
#: Warps (channels) a CTA, as the source's WARPS.
WARPS = 4
#: Positions a lane loads a step (one 16-byte vector of a 2-byte dtype), as the source's V, and a warp's
#: step (CHUNK = 32 V).
VECTOR = 8
CHUNK = 32 * VECTOR
#: A lane reads grad_output offsets PAD - DIL (TAPS - 1) .. 7 + PAD from its own 8 positions: its vector
#: and at most one neighbour's on each side, so PAD <= 8 and DIL (TAPS - 1) - PAD <= 8.
MAX_REACH = VECTOR
#: Longest filter: 9 taps at PAD 4 reach 4 positions each way (the source's window holds up to 24
#: positions; longer filters run on the matrix units, the shifted-MMA family's sequence kernels).
MAX_TAPS = 9
#: Both 2-byte dtypes (the kernel converts each element to fp32 and accumulates fp32).
DTYPES = {"bf16": (), "fp16": ("-DELEM_IS_FP16",)}
#: Stage-1 CTAs a wave: 6 CTAs of 4 warps an SM (the source's MIN_CTAS: <= 80 registers; at 8, <= 64, the
#: element-load kernels of the wider windows spilled) on 132 SMs. The splits take whole waves (floor, not
#: ceiling: a second wave of a few CTAs would double the time). Chosen from the build, not measured yet.
CTAS_PER_SM = 6
TARGET_CTAS = 132 * CTAS_PER_SM
#: The stage-1 kernels by (input in 16-byte loads, grad_output in 16-byte loads), as the source's SHORT1D_KERNEL.
KERNELS = {(True, True): "wgrad_short1d_kernel", (True, False): "wgrad_short1d_xvec_kernel",
           (False, True): "wgrad_short1d_dyvec_kernel", (False, False): "wgrad_short1d_strided_kernel"}
KERNEL_NAMES = tuple(KERNELS.values())
_ARG_TYPES = ((ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 5 + (ctypes.c_longlong,) * 7)  # as SHORT1D_PARAMS


def _bindings():
    """(driver, nvrtc) from cuda-bindings or the reason they are missing (the shared block's; a function of
    this module so that tests can take them away from this family alone)."""
    return nvrtc.bindings()


def short1d_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why the kernel cannot run ``spec`` on ``problem``; [] when it can. The one gate: support() and
    prepare() both call it."""
    reasons = []
    if target.backend != "cuda":
        reasons.append(f"target {target.name}: the kernel is CUDA C++ built by NVRTC; no interpreter, and no "
                       f"HIP port (the merged family serves 1-D filters there)")
    elif int(target.arch) < 70:
        reasons.append(f"target {target.name}: warp shuffles with a member mask need sm_70 or newer")
    elif _bindings()[1]:
        reasons.append(_bindings()[1])
    if problem.spatial_dims != 1:
        reasons.append(f"spatial_dims={problem.spatial_dims}: the kernel computes 1-D convolutions only")
    if problem.cpg != 1 or problem.kpg != 1:
        reasons.append(f"cpg={problem.cpg}, kpg={problem.kpg}: depthwise problems only (one input and one output "
                       f"channel a group)")
    if problem.dtype not in DTYPES:
        reasons.append(f"dtype={problem.dtype}: bf16 and fp16 only (16-byte vectors of 8 elements)")
    if problem.spatial_dims == 1:
        (k,), (stride,), (dil,), (left, _) = problem.filter_size, problem.stride, problem.dilation, problem.padding[0]
        if stride != 1:
            reasons.append(f"stride={tuple(problem.stride)}: stride 1 only (a lane's positions are adjacent)")
        if k > MAX_TAPS:
            reasons.append(f"filter_size={tuple(problem.filter_size)}: at most {MAX_TAPS} taps (longer filters are "
                           f"the shifted-MMA family's)")
        if left > MAX_REACH:
            reasons.append(f"padding left={left}: at most {MAX_REACH} (a lane reads grad_output up to "
                           f"padding + 7 positions past its first, within its right neighbour's vector)")
        if dil * (k - 1) - left > MAX_REACH:
            reasons.append(f"dilation={dil}, filter_size={k}, padding left={left}: the filter reaches "
                           f"{dil} x ({k} - 1) - {left} = {dil * (k - 1) - left} positions before a lane's, at "
                           f"most {MAX_REACH} (its left neighbour's vector)")
        if max(problem.input_size[0], problem.output_size[0]) + CHUNK >= 2**31:
            reasons.append(f"input length {problem.input_size[0]}: the kernel indexes positions with 32-bit ints")
    if spec.tile is None or spec.split_k < 2:
        reasons.append(f"split_k={spec.split_k}: the kernel writes fp32 partials, so it runs in two stages "
                       f"(split_k >= 2)")
    return reasons


def validate(problem, spec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, short1d_available(problem, spec, target))


def chunks_per_image(problem: ConvProblem) -> int:
    """Steps of CHUNK input positions a warp takes over one image's sequence."""
    return cdiv(problem.input_size[0], CHUNK)


def choose_split_k(problem: ConvProblem) -> int:
    """Splits of the (image, chunk) index: whole waves of TARGET_CTAS CTAs (floor), at most one a chunk,
    at least two (the second stage casts the fp32 partials)."""
    ctas_per_split = cdiv(problem.out_channels, WARPS)
    chunks = problem.batch * chunks_per_image(problem)
    splits = max(1, TARGET_CTAS // ctas_per_split)
    return max(2, min(splits, chunks, shared.MAX_SPLIT_K))


def chunks_per_split(problem: ConvProblem, split_k: int) -> int:
    return cdiv(problem.batch * chunks_per_image(problem), split_k)


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (channel blocks of WARPS, splits, 1); stage 2: the shared reduction's."""
    return (cdiv(problem.out_channels, WARPS), spec.split_k, 1), shared.reduce_grid(problem)


def workspace_nbytes(problem: ConvProblem, spec: KernelSpec) -> int:
    return shared.workspace_nbytes(problem, spec)


def build_options(problem: ConvProblem) -> tuple[str, ...]:
    """The defines of ``problem``'s build: dtype, taps, left padding, dilation."""
    (k,), (dil,), (left, _) = problem.filter_size, problem.dilation, problem.padding[0]
    return (*DTYPES[problem.dtype], f"-DTAPS={k}", f"-DPAD={left}", f"-DDIL={dil}")


@functools.cache
def _cubin(arch: str, options: tuple[str, ...]) -> bytes:
    return nvrtc.build_cubin(SOURCE.read_bytes(), arch, options, SOURCE.name)


@functools.cache
def function(arch: str, options: tuple[str, ...], device_index: int, name: str):
    """Kernel ``name`` of the build ``options`` loaded into ``device_index``'s primary context: (module,
    function)."""
    return nvrtc.load_function(_cubin(arch, options), device_index, name, f"{SOURCE.name} {' '.join(options)}")


def vector_operand(sizes, strides) -> bool:
    """Whether an operand of these sizes and element strides (n, c, l) can be read in 16-byte vectors:
    unit stride along the sequence and every row starting on a multiple of VECTOR elements (a size-1
    dim's stride never multiplies an index). Its data pointer's alignment is checked a call."""
    (sn, sc, sl), (n, c, _) = strides, sizes
    return sl == 1 and all(s % VECTOR == 0 for s, size in ((sn, n), (sc, c)) if size != 1)


def stage1_kernel_name(input_vectors: bool, grad_output_vectors: bool) -> str:
    return KERNELS[(input_vectors, grad_output_vectors)]


def prepare(problem, spec, target, input, grad_output, out) -> BoundLaunch:
    """The bound launch: 16-byte loads of each operand whose strides and pointer allow, element loads of
    the other (KERNELS)."""
    validate(problem, spec, target)
    strides = (*input.stride(), *grad_output.stride())
    device_index = input.device.index
    options = build_options(problem)
    # per operand: 16-byte loads where its strides allow (and, a call, its pointer); the kernels for each
    # pair are loaded on first use
    x_vectors = vector_operand(problem.input_shape, strides[:3])
    dy_vectors = vector_operand(problem.grad_output_shape, strides[3:])
    functions = {}

    def stage1(pair):
        if pair not in functions:
            functions[pair] = function(target.arch, options, device_index, KERNELS[pair])[1]
        return functions[pair]

    stage1((x_vectors, dy_vectors))   # built and loaded here, not in a launch (a capture may follow)
    scalars = (problem.batch, problem.out_channels, *problem.input_size, *problem.output_size,
               chunks_per_image(problem), chunks_per_split(problem, spec.split_k), *strides)
    packed = nvrtc.PackedArguments(_ARG_TYPES, scalars)
    stage1_grid, _ = grids(problem, spec)
    shared.check_grid(stage1_grid, target, spec.kernel_name())

    def first_stage(x, dy, partials, stream):
        x_ptr, dy_ptr = x.data_ptr(), dy.data_ptr()
        pair = (x_vectors and x_ptr % 16 == 0, dy_vectors and dy_ptr % 16 == 0)
        packed.launch(stage1(pair), stage1_grid, (32 * WARPS, 1, 1), stream, (x_ptr, dy_ptr, partials.data_ptr()),
                      KERNELS[pair])
        return KERNELS[pair]

    # the native backward takes the vector kernels' pair only, for pointers aligned to their 16-byte loads
    # (another alignment: the Python path, which picks the element-load kernel)
    native_stage1 = [packed.native_launch(stage1((x_vectors, dy_vectors)), stage1_grid, (32 * WARPS, 1, 1),
                                          16 if x_vectors else 1, 16 if dy_vectors else 1)]
    return nvrtc.bound_two_stages(problem, spec, input, out, first_stage, KERNELS[(x_vectors, dy_vectors)],
                                  native_stage1)


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    bound = prepare(problem, spec, target, input, grad_output, out)
    bound.run(input, grad_output, out, workspace)
    return list(bound.kernels)


def compile_kernels(problem, spec, target):
    """Nothing for Triton to compile ahead of time: NVRTC builds the kernels on first use (cached per
    build options and architecture for the process)."""
    validate(problem, spec, target)
    return []
