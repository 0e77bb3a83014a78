"""Shared launch building blocks of the tiled dW families: workspace layout, arguments,
grid and offset checks, the wide-index policy, and the two-stage prepare/run/compile.

A family that writes dW, or fp32 partials into the (split, K, N_gemm) workspace reduced by
:func:`~convwgrad.provider.blocks.jit._splitk_reduce_kernel`, supplies its own stage-1
kernel, its argument list (``make_args``) and its grids; everything else is here, once.
"""

from __future__ import annotations

import math
import re

import torch

from convwgrad.provider.aot import CompiledKernel, Constexpr, triton_compile
from convwgrad.provider.layout import TORCH_DTYPES, current_cuda_device, to_layout
from convwgrad.provider.problem import INT32_OFFSET_LIMIT, ConvProblem
from convwgrad.provider.spec import BoundLaunch, KernelSpec, LaunchOperand, cdiv
from convwgrad.provider.target import TargetInfo, interpreter_enabled

from .jit import _splitk_reduce_kernel

try:
    from triton import knobs as _triton_knobs
except ImportError:  # Triton before 3.4: no direct launch
    _triton_knobs = None

#: Stage 2 is a stream over split_k * |dW| fp32 partials. Largest dW elements a program (4 a
#: thread at 8 warps: 16-byte loads) ...
REDUCE_BLOCK = 1024
#: ... halved down to REDUCE_MIN_BLOCK (one 128-byte line a split row) until the grid has
#: REDUCE_PROGRAMS programs (~2 a SM of a 132-SM H200): a depthwise 7x7 dW of 96 channels is
#: 4704 elements, 5 programs of 1024, and a 598-way split then took 72 us (session 8, in ConvNeXt-T).
REDUCE_MIN_BLOCK = 32
REDUCE_PROGRAMS = 256
#: Partials a program loads a step ([splits, elements]): 16 a thread at 8 warps, four 16-byte
#: loads in flight a thread.
REDUCE_TILE = 4096
REDUCE_WARPS = 8
#: BLOCK_K steps the matrix units accumulate before the sum is promoted into a
#: separate fp32 accumulator. At ~2**-23 truncation bias per step (seen on H200:
#: 1.2% error after 1e5 steps of one chain), 64 steps bound the bias near 1e-5.
PROMOTE_STEPS = 64
#: Largest split-K degree a family writing this workspace accepts: it is split_k * |dW| fp32.
MAX_SPLIT_K = 1024
#: Offsets at or above this need 64-bit index arithmetic.
INT32_LIMIT = INT32_OFFSET_LIMIT


def padded3(values, fill):
    """A 1-, 2- or 3-tuple of spatial values left-padded to 3 with ``fill``."""
    values = tuple(values)
    return (fill,) * (3 - len(values)) + values


def k_blocks(problem: ConvProblem, spec: KernelSpec) -> int:
    return cdiv(problem.gemm_k, spec.tile.block_k)


def k_per_split(problem: ConvProblem, spec: KernelSpec) -> int:
    """Reduction length per split, whole BLOCK_K steps, so every split but the last is full."""
    return cdiv(k_blocks(problem, spec), spec.split_k) * spec.tile.block_k


def reduce_block(problem: ConvProblem) -> int:
    """dW elements a stage-2 program sums (see REDUCE_PROGRAMS)."""
    total, block = math.prod(problem.weight_size), REDUCE_BLOCK
    while block > REDUCE_MIN_BLOCK and cdiv(total, block) < REDUCE_PROGRAMS:
        block //= 2
    return block


def reduce_split_block(problem: ConvProblem, split_k: int) -> int:
    """Splits a stage-2 program loads a step: REDUCE_TILE partials, no more rows than splits."""
    return max(1, min(REDUCE_TILE // reduce_block(problem), 1 << (max(1, split_k) - 1).bit_length()))


def reduce_grid(problem: ConvProblem) -> tuple[int, int, int]:
    """Stage 2's grid: dW / reduce_block programs."""
    return (cdiv(math.prod(problem.weight_size), reduce_block(problem)), 1, 1)


def workspace_nbytes(problem: ConvProblem, spec: KernelSpec) -> int:
    """fp32 partials, one dW per split, sized by the true dW; 0 for one stage."""
    return spec.split_k * math.prod(problem.weight_size) * 4 if spec.two_stage else 0


def _strides5(tensor: torch.Tensor) -> tuple[int, ...]:
    """(n, c, d, h, w) strides of an (N, C, *spatial) tensor; 0 for the dims it lacks."""
    n, c, *spatial = tensor.stride()
    return (n, c, *padded3(spatial, 0))


def _workspace_strides(problem: ConvProblem) -> tuple[int, ...]:
    """(split, k, c, z, y, x) strides of the contiguous (split, K, cpg*FZ*FY*FX) workspace."""
    fz, fy, fx = padded3(problem.filter_size, 1)
    per_split = math.prod(problem.weight_size)
    return (per_split, problem.gemm_n, fz * fy * fx, fy * fx, fx, 1)


def _dot_precision(spec: KernelSpec) -> str:
    return "tf32" if spec.allow_tf32 else "ieee"


def geometry_args(problem: ConvProblem) -> list[tuple[str, int]]:
    """Spatial sizes, filter, stride, padding before and dilation, padded to 3-D: the
    arguments from D to DIL_W that every stage-1 kernel takes in this order."""
    return [
        *zip(("D", "H", "W"), padded3(problem.input_size, 1)),
        *zip(("OD", "OH", "OW"), padded3(problem.output_size, 1)),
        *zip(("FZ", "FY", "FX"), padded3(problem.filter_size, 1)),
        *zip(("STRIDE_D", "STRIDE_H", "STRIDE_W"), padded3(problem.stride, 1)),
        *zip(("PAD_D", "PAD_H", "PAD_W"), padded3([lo for lo, _ in problem.padding], 0)),
        *zip(("DIL_D", "DIL_H", "DIL_W"), padded3(problem.dilation, 1)),
    ]


def operand_stride_args(x, dy) -> list[tuple[str, int]]:
    return [
        *zip(("stride_xn", "stride_xc", "stride_xd", "stride_xh", "stride_xw"), _strides5(x)),
        *zip(("stride_dyn", "stride_dyc", "stride_dyd", "stride_dyh", "stride_dyw"), _strides5(dy)),
    ]


def tile_option_args(spec: KernelSpec, *, interpreted: bool) -> list[tuple[str, Constexpr]]:
    """The constexprs every stage-1 kernel ends with, BLOCK_M to PROMOTE_STEPS."""
    return [
        ("BLOCK_M", Constexpr(spec.tile.block_m)),
        ("BLOCK_N", Constexpr(spec.tile.block_n)),
        ("BLOCK_K", Constexpr(spec.tile.block_k)),
        ("DOT_PRECISION", Constexpr(_dot_precision(spec))),
        ("IS_UPCAST_OPERANDS", Constexpr(interpreted and spec.dtype == "bf16")),
        ("IS_WIDE_INDEX", Constexpr(spec.wide_index)),
        ("PROMOTE_STEPS", Constexpr(PROMOTE_STEPS)),
    ]


def stage2_args(problem: ConvProblem, spec: KernelSpec, workspace, out) -> list[tuple[str, object]]:
    return [
        ("WS", workspace), ("OUT", out),
        ("TOTAL", math.prod(problem.weight_size)),
        *zip(("FZ", "FY", "FX"), padded3(problem.filter_size, 1)),
        ("GEMM_N", problem.gemm_n),
        ("SPLIT_K", spec.split_k),
        *zip(("stride_ok", "stride_oc", "stride_oz", "stride_oy", "stride_ox"), _strides5(out)),
        ("BLOCK", Constexpr(reduce_block(problem))),
        ("SPLIT_BLOCK", Constexpr(reduce_split_block(problem, spec.split_k))),
        ("IS_WIDE_INDEX", Constexpr(spec.wide_index)),
    ]


def _values(args):
    return [v.value if isinstance(v, Constexpr) else v for _, v in args]


def needs_wide_index(problem: ConvProblem) -> bool:
    """The wide-index policy: whether an operand's offsets reach 2**31, through its shape or (a
    view) its strides; a spec then sets ``wide_index`` (64-bit offsets). The workspace's split
    offset is always 64-bit, so only one dW's extent counts for it."""
    return problem.needs_wide_index


def _max_offset(tensor: torch.Tensor) -> int:
    return sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def check_offsets(spec: KernelSpec, **tensors: torch.Tensor) -> None:
    """Raise if a 32-bit ``spec`` would be bound to a tensor whose offsets reach INT32_LIMIT."""
    if spec.wide_index:
        return
    for name, tensor in tensors.items():
        if _max_offset(tensor) >= INT32_LIMIT:
            raise ValueError(
                f"{spec.kernel_name()}: {name}'s strides {tensor.stride()} reach offset {_max_offset(tensor)}, "
                f"past int32, but the plan indexes in 32 bits: pose the problem with "
                f"ConvProblem.from_tensors, which reads the strides (or set wide_strides=True)"
            )


def raise_refusals(problem: ConvProblem, spec: KernelSpec, reasons: list[str]) -> None:
    """A family's validate(): raise ValueError naming the kernel, the problem and every reason its
    gate gave, before anything is launched or compiled; nothing where the gate gave none."""
    if reasons:
        raise ValueError(f"{spec.kernel_name()} cannot run {problem.describe()}: " + "; ".join(reasons))


def check_grid(grid, target: TargetInfo, what: str) -> None:
    for axis, (size, limit) in enumerate(zip(grid, target.max_grid)):
        if size > limit:
            raise ValueError(f"{what} grid axis {axis} = {size} exceeds the limit {limit} on {target.name}")


def prepare_stages(problem, spec, target, input, grad_output, out, *, kernel, make_args, grids,
                   validate=None) -> BoundLaunch:
    """Bind a stage-1 ``kernel`` (its arguments from ``make_args``, tensors X, DY, OUT first), and
    the stage-2 reduction when split_k > 1, to the strides of ``input``, ``grad_output`` and
    ``out`` (None: a contiguous dW). ``grids(problem, spec)`` sizes the launches;
    ``validate(problem, spec, target)``, if given, raises before anything is bound. Every check
    and argument is done here once: a run costs the allocation of dW and the launches. Shared by
    every family that writes this workspace layout."""
    interpreted = interpreter_enabled()
    if validate is not None:
        validate(problem, spec, target)
    if out is None:
        out = torch.empty(problem.weight_size, dtype=input.dtype, device="meta")
    check_offsets(spec, input=input, grad_output=grad_output, out=out)
    stage_grids = grids(problem, spec)
    for grid in stage_grids:
        check_grid(grid, target, spec.kernel_name())
    out_strides = _workspace_strides(problem) if spec.two_stage else (0, *_strides5(out))
    stage1 = tuple(_values(make_args(problem, spec, input, grad_output, out, out_strides, interpreted=interpreted))[3:])
    size, dtype, device = problem.weight_size, input.dtype, input.device
    device_index = device.index if device.type == "cuda" else None
    direct = target.backend == "cuda" and device_index is not None and direct_launch_supported()
    first = KernelLaunch(kernel, stage_grids[0], stage1, spec.tile.num_warps, spec.tile.num_stages,
                         device_index if direct else None)

    if spec.two_stage:
        stage2 = tuple(_values(stage2_args(problem, spec, out, out))[2:])
        second = KernelLaunch(_splitk_reduce_kernel, stage_grids[1], stage2, REDUCE_WARPS, 1,
                              device_index if direct else None)
        nbytes = workspace_nbytes(problem, spec)

        def launch_stages(x, dy, out, workspace):
            # the stages address only their nbytes: a larger workspace (the dispatcher's kept one, a
            # caller's) is viewed whole, with no slice (an aten op, a few us of host time a call),
            # unless its length is no whole number of floats
            partials = (workspace if workspace.numel() % 4 == 0 else workspace[:nbytes]).view(torch.float32)
            first(x, dy, partials)
            second(partials, out)

        kernels = (kernel.__name__, _splitk_reduce_kernel.__name__)

        def native():
            stages = (first.native_launch(_STAGE1_INTO_WORKSPACE), second.native_launch(_STAGE2_OPERANDS))
            return None if None in stages else tuple((stage,) for stage in stages)
    else:
        def launch_stages(x, dy, out, workspace):
            first(x, dy, out)

        kernels = (kernel.__name__,)

        def native():
            stage = first.native_launch(_STAGE1_INTO_OUT)
            return None if stage is None else ((stage,),)

    def run(x, dy, out, workspace):
        if out is None:
            out = torch.empty(size, dtype=dtype, device=device)
        if device_index is not None and current_cuda_device() != device_index:
            with torch.cuda.device(device_index):  # Triton launches on the current device
                launch_stages(x, dy, out, workspace)
        else:
            launch_stages(x, dy, out, workspace)
        return out

    return BoundLaunch(run=run, kernels=kernels, native=native)


#: the operands a stage-1 kernel takes first (X, DY, then the partials or dW) and stage 2's (WS, OUT)
_STAGE1_INTO_WORKSPACE = (LaunchOperand.INPUT, LaunchOperand.GRAD_OUTPUT, LaunchOperand.WORKSPACE)
_STAGE1_INTO_OUT = (LaunchOperand.INPUT, LaunchOperand.GRAD_OUTPUT, LaunchOperand.OUT)
_STAGE2_OPERANDS = (LaunchOperand.WORKSPACE, LaunchOperand.OUT)

#: Bytes of a scalar kernel parameter by Triton's type name, as its CUDA launcher passes it (ty_to_cpp:
#: booleans as int32); a kernel with a parameter of any other type (floats) has no native launch.
_SCALAR_BYTES = {"i1": 4, "u1": 4, "i32": 4, "u32": 4, "i64": 8, "u64": 8}
#: Bytes of a PTX entry parameter by its type: what the kernel itself reads, checked against the above.
_PTX_PARAM_BYTES = {"u64": 8, "b64": 8, "s64": 8, "u32": 4, "b32": 4, "s32": 4}
_PTX_PARAM = re.compile(r"\.param\s+\.(\w+)")


def ptx_entry_param_bytes(ptx: str) -> list[int] | None:
    """Bytes of each parameter of the (one) ``.entry`` in ``ptx``; None where it has none, or a
    parameter of a type not in _PTX_PARAM_BYTES."""
    start = ptx.find(".entry")
    if start < 0:
        return None
    end = ptx.find(")", start)
    kinds = _PTX_PARAM.findall(ptx[start:end])
    sizes = [_PTX_PARAM_BYTES.get(kind) for kind in kinds]
    return None if None in sizes else sizes


def triton_native_params(signature, leading, tail, ptx_bytes) -> tuple | None:
    """A compiled Triton kernel's parameters as a native launch passes them: ``signature`` (the
    compiled source's argument types in order, ``"constexpr"`` for those compiled in), the
    ``leading`` operands' LaunchOperands, then ``tail``'s values. Its CUDA launcher passes every
    non-constexpr argument, then its scratch pointers (null where the kernel needs none: the only
    kernels launched this way): ``ptx_bytes``, the kernel's own parameter sizes, must agree with
    that on every parameter, or there is no native launch (None)."""
    values = (*leading, *tail)
    if len(signature) != len(values):
        return None
    params = []
    for index, (kind, value) in enumerate(zip(signature, values)):
        if kind == "constexpr":
            continue
        if kind.startswith("*"):
            if index >= len(leading):
                return None  # a pointer this launch does not know
            params.append((int(value), 8, 0))
        elif kind in _SCALAR_BYTES and type(value) is int:
            params.append((int(LaunchOperand.LITERAL), _SCALAR_BYTES[kind], value))
        else:
            return None
    scratch = len(ptx_bytes) - len(params)
    params += [(int(LaunchOperand.LITERAL), 8, 0)] * scratch
    if scratch < 0 or [nbytes for _, nbytes, _ in params] != list(ptx_bytes):
        return None
    return tuple(params)


#: Triton releases whose JITFunction.run was read to launch the compiled kernel the same way,
#: ``compiled.run(grid_x, grid_y, grid_z, stream, compiled.function, compiled.packed_metadata,
#: launch_metadata, enter_hook, exit_hook, *every bound argument)``: 3.9 here, 3.6 on the H200
#: machine. Any other release launches through the JIT on every call.
DIRECT_LAUNCH_TRITON = ("3.6", "3.9")
#: Releases whose ``compiled.run`` (a CudaLauncher) was read to call its compiled C ``launch`` the
#: same way it does, ``launch(grid_x, grid_y, grid_z, stream, function, cooperative, pdl,
#: global_scratch, profile_scratch, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``,
#: where the kernel needs no scratch: 3.6 (the H200 machine's; 3.9's launcher takes other arguments).
C_LAUNCH_TRITON = ("3.6",)


def _triton_release() -> str:
    import triton

    return ".".join(triton.__version__.split(".")[:2])


def direct_launch_supported() -> bool:
    if _triton_knobs is None:  # the launch hooks the direct launch must honour live there
        return False
    return _triton_release() in DIRECT_LAUNCH_TRITON


def _c_launch(compiled):
    """(launch, cooperative, pdl) of ``compiled``'s CUDA launcher where its compiled C launch can be
    called directly (see C_LAUNCH_TRITON), else None.

    ``CudaLauncher.__call__`` is a Python frame around it that defines two closures and asks two
    allocators for scratch on every launch; kernels with no scratch need none of it."""
    if _triton_release() not in C_LAUNCH_TRITON:
        return None
    run = compiled.run
    launch = getattr(run, "launch", None)
    if (type(run).__name__ != "CudaLauncher" or type(launch).__name__ != "builtin_function_or_method"
            or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1)):
        return None  # a tensor-descriptor wrapper, or a kernel that needs scratch: the launcher's own call
    return launch, run.launch_cooperative_grid, run.launch_pdl


class KernelLaunch:
    """One Triton kernel at a fixed grid, options and trailing arguments, called with its
    leading tensors.

    The first call goes through the JIT (``kernel[grid](...)``), which compiles or finds the
    binary; later calls launch that binary directly, skipping ``JITFunction.run``'s per-call
    binding, specialisation and cache lookup (about 20 us of host time a launch on the H200
    machine's CPU, tools/host_overhead.py). The shortcut is valid because everything the JIT
    specialises on is fixed per prepared call (the ints, the dtypes) except the pointers'
    16-byte alignment, which is checked on every call: a tensor that is not 16-byte aligned, or
    a device_index of None (interpreter, HIP: not checked there) takes the JIT. Launch hooks
    (``knobs.runtime.launch_enter_hook``/``launch_exit_hook``, which profilers set) are honoured
    as the JIT honours them: with their launch metadata.

    Pointers are passed as ints (the addresses the alignment check reads anyway): given a
    tensor, Triton's launcher calls its ``data_ptr()`` and asks the driver whether the address is
    device memory (``cuPointerGetAttribute``) on every launch; a prepared call's tensors were
    checked to be on its device when it was bound. Where :func:`_c_launch` allows, the launcher's
    compiled C function is called without its Python frame."""

    __slots__ = ("kernel", "grid", "tail", "num_warps", "num_stages", "device_index", "compiled", "c_launch",
                 "_native")

    def __init__(self, kernel, grid, tail, num_warps, num_stages, device_index):
        self.kernel, self.grid, self.tail = kernel, grid, tail
        self.num_warps, self.num_stages = num_warps, num_stages
        self.device_index = device_index
        self.compiled = None
        self.c_launch = None
        self._native = None

    def native_launch(self, operands):
        """This launch as :attr:`BoundLaunch.native` describes one, its leading tensors being
        ``operands`` (LaunchOperands), once a launch through the JIT has compiled it for aligned
        pointers; None before, and where the direct C launch is not allowed (:func:`_c_launch`),
        the kernel is cooperative, uses programmatic dependent launch or clusters, or its parameters
        do not read as :func:`triton_native_params` checks them."""
        compiled, c_launch = self.compiled, self.c_launch
        if compiled is None or c_launch is None or c_launch[1] or c_launch[2]:
            return None
        if self._native is None:
            metadata = compiled.metadata
            signature = getattr(getattr(compiled, "src", None), "signature", None)
            try:
                ptx_bytes = ptx_entry_param_bytes(compiled.asm["ptx"])
            except (KeyError, TypeError, AttributeError):
                ptx_bytes = None
            params = (None if signature is None or ptx_bytes is None or getattr(metadata, "num_ctas", 1) != 1
                      else triton_native_params(tuple(signature.values()), operands, self.tail, ptx_bytes))
            self._native = False if params is None else (
                int(compiled.function), tuple(self.grid), (32 * metadata.num_warps, 1, 1), int(metadata.shared),
                16, 16, params)  # aligned pointers: what the binary was specialised for
        return self._native or None

    def __call__(self, *tensors):
        compiled = self.compiled
        if compiled is not None:
            pointers = [t.data_ptr() for t in tensors]
            aligned = 0
            for pointer in pointers:  # a loop, not any(<generator>): this runs on every warm launch
                aligned |= pointer
            if not aligned & 15:
                grid = self.grid
                stream = torch._C._cuda_getCurrentRawStream(self.device_index)
                runtime = _triton_knobs.runtime
                # Triton 3.6+ installs empty HookChains: one that calls nothing is no hook, and its launch
                # metadata (~5 us of Python a launch on the H200 host, tools/backward_host.py) is skipped
                enter = _live_hook(runtime.launch_enter_hook)
                leave = _live_hook(runtime.launch_exit_hook)
                metadata = (None if enter is None and leave is None
                            else compiled.launch_metadata(grid, stream, *tensors, *self.tail))
                c_launch = self.c_launch
                if c_launch is not None:
                    launch, cooperative, pdl = c_launch
                    launch(grid[0], grid[1], grid[2], stream, compiled.function, cooperative, pdl, None, None,
                           compiled.packed_metadata, metadata, enter, leave, *pointers, *self.tail)
                else:
                    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                                 metadata, enter, leave, *pointers, *self.tail)
                return
        compiled = self.kernel[self.grid](*tensors, *self.tail, num_warps=self.num_warps, num_stages=self.num_stages)
        if self.device_index is not None and compiled is not None and not any(t.data_ptr() & 15 for t in tensors):
            self.compiled = compiled  # specialised for aligned pointers: reused only for aligned ones
            self.c_launch = _c_launch(compiled)


def _live_hook(hook):
    """``hook``, or None where it is an empty ``HookChain`` (whose call does nothing)."""
    return None if hook is None or not getattr(hook, "calls", True) else hook


def run_stages(problem, spec, target, input, grad_output, out, workspace, *, kernel, make_args, grids,
               validate=None) -> list[str]:
    """:func:`prepare_stages`, then one run; return the kernels launched."""
    bound = prepare_stages(problem, spec, target, input, grad_output, out, kernel=kernel, make_args=make_args,
                           grids=grids, validate=validate)
    bound.run(input, grad_output, out, workspace)
    return list(bound.kernels)


def _meta(shape, dtype: str, layout: str) -> torch.Tensor:
    return to_layout(torch.empty(shape, dtype=TORCH_DTYPES[dtype], device="meta"), layout)


def compile_stages(problem: ConvProblem, spec: KernelSpec, target: TargetInfo, *, kernel, make_args,
                   validate=None) -> list[CompiledKernel]:
    """Compile stage 1 (and stage 2) for ``target`` with strides of the problem's layout."""
    if validate is not None:
        validate(problem, spec, target)
    x = _meta(problem.input_shape, problem.dtype, problem.layout)
    dy = _meta(problem.grad_output_shape, problem.dtype, problem.layout)
    out = _meta(problem.weight_size, problem.dtype, "contiguous")
    pointer = f"*{problem.dtype}"
    as_types = lambda args, types: [(n, types.get(n, v)) for n, v in args]  # noqa: E731
    out_strides = _workspace_strides(problem) if spec.two_stage else (0, *_strides5(out))
    args = make_args(problem, spec, x, dy, out, out_strides, interpreted=False)
    args = as_types(args, {"X": pointer, "DY": pointer, "OUT": "*fp32" if spec.two_stage else pointer})
    name = spec.kernel_name()
    tile = spec.tile
    compiled = [
        triton_compile(kernel, args, target=target, num_warps=tile.num_warps,
                       num_stages=tile.num_stages, name=f"{name}.stage1")
    ]
    if spec.two_stage:
        args = as_types(stage2_args(problem, spec, out, out), {"WS": "*fp32", "OUT": pointer})
        compiled.append(
            triton_compile(_splitk_reduce_kernel, args, target=target, num_warps=REDUCE_WARPS,
                           num_stages=1, name=f"{name}.stage2")
        )
    return compiled
