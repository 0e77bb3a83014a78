"""Launcher of the staged family: the gate, work units, grids, arguments, the split policy.

Tile fields, as this family reads them (it has no GEMM tile; see :mod:`.kernels`):

- ``block_m``: channels per program, one a thread: ``num_warps`` x the warp size (32, or 64 on gfx950);
- ``block_n``: output columns a thread (BW, the strip width);
- ``block_k``: output rows a work unit (the row chunk a program walks with one pipeline start);
- ``num_warps``; ``num_stages``: the copy pipeline's depth + 1 (copies issued ``num_stages - 1``
  steps ahead of the step that reads them).

A split is one program's run of consecutive work units (image, row chunk, strip); its fp32
partial goes to the shared (split, K, taps) workspace, reduced in order by the shared stage 2.
"""

from __future__ import annotations

import math

import torch

from convwgrad.provider.aot import Constexpr
from convwgrad.provider.blocks import launch as shared
from convwgrad.provider.problem import INT32_OFFSET_LIMIT, ConvProblem
from convwgrad.provider.spec import BoundLaunch, KernelSpec, cdiv
from convwgrad.provider.target import interpreter_enabled

from . import kernels

#: Largest tile the gate admits (channels a program, columns a thread, rows a unit): 4 warps;
#: 16 columns (16 x 49 taps unrolled is already 784 FMAs a step); 64 rows.
MAX_BLOCKS = (128, 16, 64)
#: Filters up to 9x9: the body unrolls FY x FX x BW FMAs a step (9 x 9 x 8 = 648, the sliding
#: kernel's bound); larger filters are the shifted family's ground.
MAX_FILTER = 9
#: Strides 1 and 2 (the rows a step adds are copied one at a time; 2 covers the published layers).
MAX_STRIDE = 2
#: sm_90's opt-in maximum of shared memory a block, 227 KB (Triton opts a kernel in above the
#: 48 KB default); a tile whose rings need more cannot launch.
MAX_SHARED_BYTES = 227 * 1024


def _depth(spec: KernelSpec) -> int:
    return spec.tile.num_stages - 1


#: Targets whose asynchronous global -> shared copies the kernel uses: NVIDIA's cp.async (sm_80+)
#: and CDNA4's global_load_lds (gfx950; compiled offline with Triton 3.9, not run on hardware).
HIP_ARCHS = ("gfx950",)


def kernel_key(problem: ConvProblem, spec: KernelSpec, target) -> tuple:
    fy, fx = problem.filter_size
    tile = spec.tile
    return fy, fx, problem.stride[0], tile.block_n, tile.num_warps, _depth(spec), problem.dtype, target.backend


def kernel_for(problem: ConvProblem, spec: KernelSpec, target):
    return kernels.staged_kernel(*kernel_key(problem, spec, target))


def units(problem: ConvProblem, spec: KernelSpec) -> tuple[int, int, int]:
    """(row chunks, strips, work units) of one channel block (any rank, for the split hook that
    also sizes specs the gate refuses; the kernel runs 2-D problems only)."""
    *rows, ow = problem.output_size
    oh = math.prod(rows)
    chunks = cdiv(oh, spec.tile.block_k)
    strips = cdiv(ow, spec.tile.block_n)
    return chunks, strips, problem.batch * chunks * strips


def staged_available(problem: ConvProblem, spec: KernelSpec, target) -> list[str]:
    """Why the staged kernel cannot run ``spec`` on ``problem``; [] when it can. The one gate:
    support() and validate() both call it."""
    reasons = []
    if target.backend not in ("cuda", "hip"):
        reasons.append(f"target {target.name}: the staged kernel is Gluon with asynchronous copies (CUDA sm_80+, "
                       f"gfx950); Gluon has no interpreter")
    elif target.backend == "cuda" and int(target.arch) < 80:
        reasons.append(f"target {target.name}: cp.async needs sm_80 or newer")
    elif target.backend == "hip" and target.arch not in HIP_ARCHS:
        reasons.append(f"target {target.name}: the global -> LDS copies it uses are CDNA4's ({', '.join(HIP_ARCHS)})")
    if problem.spatial_dims != 2:
        reasons.append(f"spatial_dims={problem.spatial_dims}: the staged kernel computes 2-D convolutions only")
    if problem.cpg != 1 or problem.kpg != 1:
        reasons.append(f"cpg={problem.cpg}, kpg={problem.kpg}: the staged kernel computes depthwise problems "
                       f"(one input and one output channel a group)")
    if problem.layout != "channels_last":
        reasons.append(f"layout={problem.layout}: the staged kernel copies channels_last rows ([columns, "
                       f"channels]); NCHW is not written")
    if problem.dtype not in kernels.GLUON_DTYPES:
        reasons.append(f"dtype={problem.dtype}: bf16, fp16 and fp32 only")
    elif problem.in_channels * problem.element_size % kernels.COPY_BYTES:
        reasons.append(f"in_channels={problem.in_channels}: a column of {problem.in_channels} x "
                       f"{problem.element_size} bytes is not a whole number of 16-byte copies")
    elif problem.spatial_dims == 2:
        unit = kernels.STRIDE_UNIT
        for name, size in (("input", problem.input_size[1]), ("grad_output", problem.output_size[1])):
            if size * problem.in_channels % unit:
                reasons.append(f"{name} row of {size} columns x {problem.in_channels} channels: not a multiple of "
                               f"{unit} elements, which its 16-byte copies need")
    if problem.spatial_dims == 2:
        fy, fx = problem.filter_size
        if max(fy, fx) > MAX_FILTER:
            reasons.append(f"filter_size={problem.filter_size}: up to {MAX_FILTER}x{MAX_FILTER} (every tap is "
                           f"unrolled); large filters are the shifted family's")
        sh, sw = problem.stride
        if sh != sw or sh > MAX_STRIDE:
            reasons.append(f"stride={problem.stride}: equal strides of at most {MAX_STRIDE}")
        if any(d != 1 for d in problem.dilation):
            reasons.append(f"dilation={problem.dilation}: undilated filters only")
        image = problem.in_channels * math.prod(problem.input_size)
        if image >= INT32_OFFSET_LIMIT:
            reasons.append(f"one image holds {image} elements: offsets within an image are 32-bit")
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: the staged family takes no merge degree")
    if spec.allow_tf32:
        reasons.append("allow_tf32=True: the staged family has no matrix-unit path, it accumulates fp32 FMAs")
    tile = spec.tile
    if tile is None:
        return reasons + ["needs a tile"]
    if tile.block_m != target.warp_size * tile.num_warps:
        reasons.append(f"tile {tile.name}: block_m (channels a program) must be {target.warp_size} x num_warps "
                       f"(one channel a thread), not {tile.block_m} with {tile.num_warps} warps")
    if tile.num_stages < 2:
        reasons.append(f"tile {tile.name}: num_stages={tile.num_stages}, the copies need at least 2 (copies one "
                       f"step ahead)")
    if not reasons:
        key = kernel_key(problem, spec, target)[:-1]
        reasons += kernels.layout_reasons(*key, warp=target.warp_size)
        nbytes = kernels.shared_bytes(*key, warp=target.warp_size)
        if nbytes > MAX_SHARED_BYTES:
            reasons.append(f"tile {tile.name}: {nbytes} bytes of rings, over the {MAX_SHARED_BYTES} a block has")
    return reasons


def validate(problem: ConvProblem, spec: KernelSpec, target) -> None:
    """Raise ValueError with the gate's reasons before anything is launched or compiled."""
    shared.raise_refusals(problem, spec, staged_available(problem, spec, target))


def grids(problem: ConvProblem, spec: KernelSpec) -> tuple[tuple[int, int, int], ...]:
    """Stage 1: (channel blocks, splits, 1); stage 2, if any: the shared reduction's."""
    if spec.tile is None:
        return ()
    stage1 = (cdiv(problem.out_channels, spec.tile.block_m), spec.split_k, 1)
    if not spec.two_stage:
        return (stage1,)
    return stage1, shared.reduce_grid(problem)


def reduction_steps(problem: ConvProblem, spec: KernelSpec) -> int:
    """What a split divides: work units (a split with none would write a zero partial)."""
    return units(problem, spec)[2]


#: The default tiles (as measured best on the H200, tools/proto_staged.py, graph replay beside
#: cuDNN in one process; notes/PERF.md "Session 8"). SMALL_FILTER_TILE (session 7), 3x3 and fp32: 8
#: output columns a thread, 16-row units, copies two steps ahead for 3x3 (MobileNetV2 56x56 C144
#: N=32: 24.2 us, 1.72x cuDNN; 14 columns lost there, 32.2 us). WIDE_STRIP_TILE (session 8,
#: ``--sweep grid`` then ``--sweep fewer``), 16-bit 5x5 and up: 14 columns a thread (ConvNeXt-T's
#: 56/28/14 widths are multiples of 14; a wider strip reads less halo a column), 14-row units, one
#: step ahead: ConvNeXt-T N=64 7x7 56x56 C96 83.9 us (1.53x cuDNN; the session-7 tile 108.6), 28x28
#: C192 48.0 (1.17x; 70.9), 14x14 C384 33.2 (1.35x; 54.7), 7x7 C768 32.8 (0.94x; 46.7);
#: EfficientNet-B0 N=32 5x5 28x28 C240 25.8 (1.15x), 14x14 C672 18.6 (1.64x). fp32 stays on the
#: narrow strip: 14 columns of fp32 7x7 need 150 registers (sm_90), over the 128 of 2 programs a SM.
SMALL_FILTER_TILE = dict(block_n=8, block_k=16, num_stages=3)
WIDE_STRIP_TILE = dict(block_n=14, block_k=14, num_stages=2)
WIDE_STRIP_FROM_ROWS = 5


def default_tile_shape(problem: ConvProblem) -> dict:
    """block_n, block_k and num_stages of the default tile (see WIDE_STRIP_TILE)."""
    fy = problem.filter_size[0]
    if fy >= WIDE_STRIP_FROM_ROWS and problem.element_size <= 2:
        return WIDE_STRIP_TILE
    return {**SMALL_FILTER_TILE, "num_stages": 3 if fy < WIDE_STRIP_FROM_ROWS else 2}


#: Programs a SM the split policy aims for (one-warp programs), measured best on the H200
#: (tools/proto_staged.py, notes/PERF.md "Session 8"). With wide strips, by filter rows: fewer,
#: longer programs won as filters grow, each paying a pipeline start, its strips' halo and a
#: 32 x FY x FX fp32 partial for stage 2: 5x5 8 (EfficientNet-B0 28x28 C240: 25.8 us against 30.8
#: at 4); 7x7 and up 4 (ConvNeXt-T 28x28 C192: 48.0 us against 56.8 at 8; 14x14 C384: 33.2 / 38.7;
#: 2 a SM lost on every layer). Narrow strips: 19 (session 7, ConvNeXt 56x56 7x7 and MobileNetV2
#: 56x56 3x3, ~18 programs a SM resident; 4 a SM took 46 us against 24 on the 3x3 layer).
WIDE_STRIP_PROGRAMS_PER_CU = ((7, 4), (5, 8))
NARROW_STRIP_PROGRAMS_PER_CU = 19


def programs_per_cu(problem: ConvProblem, spec: KernelSpec) -> int:
    if spec.tile.block_n >= WIDE_STRIP_TILE["block_n"]:
        rows = problem.filter_size[0]
        for from_rows, count in WIDE_STRIP_PROGRAMS_PER_CU:
            if rows >= from_rows:
                return count
    return NARROW_STRIP_PROGRAMS_PER_CU


def choose_split_k(problem: ConvProblem, spec: KernelSpec, target, base_programs: int, max_split_k: int) -> int:
    """Fill programs_per_cu programs a compute unit (one wave), the units dealt out evenly: the
    split is the number of runs of ceil(units / wanted) units, so no split is left empty."""
    wanted = cdiv(programs_per_cu(problem, spec) * target.compute_units, max(1, base_programs))
    total = units(problem, spec)[2]
    split = cdiv(total, cdiv(total, max(1, min(wanted, max_split_k))))
    return max(1, min(split, max_split_k))


def stage1_args(problem, spec, x, dy, out, out_strides, *, interpreted: bool) -> list[tuple[str, object]]:
    split_stride, k_stride, _c_stride, _z_stride, y_stride, x_stride = out_strides  # cpg == 1
    chunks, strips, total = units(problem, spec)
    (h, w), (oh, ow) = problem.input_size, problem.output_size
    xs, dys = x.stride(), dy.stride()
    return [
        ("X", x), ("DY", dy), ("OUT", out),
        ("H", h), ("W", w), ("OH", oh), ("OW", ow),
        ("PAD_H", problem.padding[0][0]), ("PAD_W", problem.padding[1][0]),
        ("C", Constexpr(problem.in_channels)),
        ("ROW_CHUNK", spec.tile.block_k), ("CHUNKS", chunks), ("STRIPS", strips), ("UNITS", total),
        ("UNITS_PER_SPLIT", cdiv(total, spec.split_k)),
        ("stride_xn", xs[0]), ("stride_xh", xs[2]), ("stride_xw", Constexpr(xs[3])),
        ("stride_dyn", dys[0]), ("stride_dyh", dys[2]), ("stride_dyw", Constexpr(dys[3])),
        ("stride_os", split_stride), ("stride_ok", k_stride), ("stride_oy", y_stride), ("stride_ox", x_stride),
    ]


def operand_reasons(**tensors: torch.Tensor) -> list[str]:
    """What the 16-byte copies need of the tensors themselves (checked once a prepared call):
    dense channels, every stride and the data pointer a multiple of 16 bytes."""
    reasons = []
    for name, t in tensors.items():
        if t.device.type == "meta":
            continue
        unit = kernels.STRIDE_UNIT
        n, c, h, w = t.stride()
        if c != 1 or w != t.shape[1]:
            reasons.append(f"{name} strides {t.stride()}: the staged kernel reads dense channels_last rows")
        elif w * t.element_size() % kernels.COPY_BYTES or any(s % unit for s in (n, h)):
            reasons.append(f"{name} strides {t.stride()}: the 16-byte copies need the column stride a multiple "
                           f"of 16 bytes and the row and image strides of {unit} elements")
        if t.data_ptr() % kernels.COPY_BYTES:
            reasons.append(f"{name} data pointer {t.data_ptr():#x}: not 16-byte aligned")
    return reasons


def _checked(problem, spec, target, input, grad_output):
    validate(problem, spec, target)
    if interpreter_enabled():  # a CUDA target planned offline, launched with the interpreter on
        raise ValueError(f"{spec.kernel_name()}: TRITON_INTERPRET=1 is set and Gluon kernels have no interpreter")
    reasons = operand_reasons(input=input, grad_output=grad_output)
    if reasons:
        raise ValueError(f"{spec.kernel_name()} cannot run these operands of {problem.describe()}: "
                         + "; ".join(reasons))


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    _checked(problem, spec, target, input, grad_output)
    return shared.run_stages(problem, spec, target, input, grad_output, out, workspace,
                             kernel=kernel_for(problem, spec, target), make_args=stage1_args, grids=grids,
                             validate=validate)


def prepare(problem, spec, target, input, grad_output, out):
    _checked(problem, spec, target, input, grad_output)
    bound = shared.prepare_stages(problem, spec, target, input, grad_output, out,
                                  kernel=kernel_for(problem, spec, target), make_args=stage1_args, grids=grids,
                                  validate=validate)
    inner = bound.run

    def run(x, dy, out, workspace):
        # a prepared call is keyed on shapes and strides, not addresses: an unaligned view would
        # send the launch to the JIT, whose copies cannot be narrower than 4 bytes (compile error)
        if (x.data_ptr() | dy.data_ptr()) % kernels.COPY_BYTES:
            raise ValueError(f"{spec.kernel_name()}: " + "; ".join(operand_reasons(input=x, grad_output=dy)))
        return inner(x, dy, out, workspace)

    # the native launches take 16-byte aligned operands only (KernelLaunch's binary), which covers COPY_BYTES
    return BoundLaunch(run=run, kernels=bound.kernels, native=bound.native)


def compile_kernels(problem, spec, target):
    validate(problem, spec, target)
    return shared.compile_stages(problem, spec, target, kernel=kernel_for(problem, spec, target),
                                 make_args=stage1_args, validate=validate)
