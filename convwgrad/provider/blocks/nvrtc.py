"""CUDA C++ kernels built at run time: NVRTC builds a source for the device's architecture, the
driver API loads it into torch's context and launches it on torch's stream.

For the families whose kernels are CUDA C++ (``wgrad_shifted_mma``, ``wgrad_short1d``): each keeps
its source, its defines and its argument types; the build, the load and the launch are here, one
copy. cuda-bindings (``cuda.bindings.driver`` / ``.nvrtc``) is optional: :func:`bindings` gives the
reason it is missing, which the families' gates return as their refusal.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import torch


@functools.cache
def bindings():
    """(driver, nvrtc) from cuda-bindings, or (None, the reason they are missing)."""
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:
        return None, (f"cuda-bindings is not importable ({exc}): the kernel is CUDA C++ built by NVRTC and "
                      f"launched by the driver API")
    return (driver, nvrtc), None


def build_cubin(source: bytes, arch: str, options=(), name: str = "kernels.cu") -> bytes:
    """``source`` built by NVRTC for sm_``arch`` with ``options`` (defines): the cubin. Uncached
    (callers cache per configuration; tools build older sources with it). A failed build raises
    with NVRTC's log."""
    (_, nvrtc), _ = bindings()
    err, program = nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], [])
    flags = [f"--gpu-architecture=sm_{arch}".encode(), *(o.encode() for o in options)]
    (err,) = nvrtc.nvrtcCompileProgram(program, len(flags), flags)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        raise RuntimeError(f"NVRTC could not build {name} for sm_{arch} ({' '.join(options)}): "
                           f"{log.rstrip(bytes(1)).decode()}")
    _, size = nvrtc.nvrtcGetCUBINSize(program)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(program, cubin)
    return cubin


def load_function(cubin: bytes, device_index: int, name: str, what: str):
    """(module, function ``name``) of ``cubin`` loaded into ``device_index``'s primary context
    (torch's); ``what`` names the source in errors. Keep the module referenced with the function."""
    (driver, _), _ = bindings()
    with torch.cuda.device(device_index):  # cudaSetDevice makes the primary context current
        # ...once the runtime has made it: in a process whose first CUDA work is this load (a test worker
        # that has only queried the device) cuModuleLoadData found no context (H100, session 16)
        torch.cuda.synchronize(device_index)
        err, module = driver.cuModuleLoadData(cubin)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuModuleLoadData({what}): {err}")
        err, function = driver.cuModuleGetFunction(module, name.encode())
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuModuleGetFunction({name}): {err}")
    return module, function


def local_memory_bytes(function) -> int:
    """Bytes of local memory (spills, stack arrays) a thread of ``function`` uses: 0 for a kernel
    whose registers hold everything."""
    (driver, _), _ = bindings()
    err, local = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuFuncGetAttribute(LOCAL_SIZE_BYTES): {err}")
    return local


class PackedArguments:
    """A kernel's arguments as ctypes values packed once, with the ``void*`` array over them that
    cuLaunchKernel reads: a launch writes the pointer slots and passes the array's address (cuda-bindings
    takes an int ``kernelParams`` as a ready ``void**``). The launch that packed a tuple of (values, types)
    on every call took ~24 us a launch under cProfile on the GPU machine (12 launches a UniRepLKNet-T step in
    NCHW, session 19); this one's cost there is not measured yet. The driver copies the parameters when
    the call is made (a CUDA-graph capture included), so the slots are free again on return. The first ``pointers`` arguments are the per-call device pointers, the rest
    the prepared call's fixed scalars. Slots are written and read under a lock: two threads launching one
    prepared call (autograd's device threads, a data loader's) never see each other's pointers."""

    def __init__(self, arg_types, scalars, pointers: int = 3):
        if len(arg_types) != pointers + len(scalars):
            raise ValueError(f"{len(arg_types)} argument types for {pointers} pointers and {len(scalars)} scalars")
        self._slots = [kind(0) for kind in arg_types[:pointers]]
        self._values = self._slots + [kind(value) for kind, value in zip(arg_types[pointers:], scalars)]
        self._array = (ctypes.c_void_p * len(self._values))(*(ctypes.addressof(v) for v in self._values))
        self.address = ctypes.addressof(self._array)
        self._lock = threading.Lock()

    def native_launch(self, function, grid, block, input_alignment: int, grad_output_alignment: int) -> tuple:
        """A launch of ``function`` with these arguments as :attr:`BoundLaunch.native` describes one:
        the pointer slots are the call's input, grad_output and workspace (stage 1's partials)."""
        from convwgrad.provider.spec import LaunchOperand

        operands = (LaunchOperand.INPUT, LaunchOperand.GRAD_OUTPUT, LaunchOperand.WORKSPACE)
        if len(self._slots) != len(operands):
            raise ValueError(f"a native launch binds {len(operands)} pointers, these arguments {len(self._slots)}")
        params = [(int(operand), 8, 0) for operand in operands]
        params += [(int(LaunchOperand.LITERAL), ctypes.sizeof(value), value.value)
                   for value in self._values[len(self._slots):]]
        return (int(function), tuple(grid), tuple(block), 0, input_alignment, grad_output_alignment, tuple(params))

    def values(self) -> list[int]:
        """The arguments as the array addresses them (for tests)."""
        return [ctypes.cast(self._array[i], ctypes.POINTER(type(v))).contents.value or 0
                for i, v in enumerate(self._values)]

    def launch(self, function, grid, block, stream: int, pointers, what: str) -> None:
        """One launch of ``function`` on ``stream`` with ``pointers`` in the pointer slots."""
        (driver, _), _ = bindings()
        with self._lock:
            for slot, value in zip(self._slots, pointers):
                slot.value = value
            (err,) = driver.cuLaunchKernel(function, *grid, *block, 0, stream, self.address, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what}: cuLaunchKernel: {err}")


def bound_two_stages(problem, spec, input, out, stage1, first_kernel: str, native_stage1=None):
    """The BoundLaunch of a CUDA C++ stage 1 writing fp32 partials (split, C, taps) and the shared ordered
    reduction as stage 2. ``stage1(x, dy, partials, stream)`` launches the first stage on torch's raw
    ``stream`` and returns the name of the kernel it chose (the run's ``kernels[0]``; ``first_kernel``
    before any run). ``native_stage1``: the launches stage 1 may take, as :attr:`BoundLaunch.native`
    describes a stage (:meth:`PackedArguments.native_launch`), or None (no native launch). Stage 2 is bound to ``out``'s strides (a patched layer's dW comes in the weight's
    strides), as in launch.prepare_stages; ``out=None``: a contiguous dW allocated at run time."""
    from convwgrad.provider.blocks import launch as shared
    from convwgrad.provider.layout import current_cuda_device
    from convwgrad.provider.spec import BoundLaunch, LaunchOperand

    device_index = input.device.index
    bound_out = out if out is not None else torch.empty(problem.weight_size, dtype=input.dtype, device="meta")
    stage2 = tuple(v.value if hasattr(v, "value") else v
                   for _, v in shared.stage2_args(problem, spec, bound_out, bound_out)[2:])
    second = shared.KernelLaunch(shared._splitk_reduce_kernel, shared.reduce_grid(problem), stage2,
                                 shared.REDUCE_WARPS, 1, device_index if shared.direct_launch_supported() else None)
    nbytes = shared.workspace_nbytes(problem, spec)
    size, dtype = problem.weight_size, input.dtype
    kernels = [first_kernel, shared._splitk_reduce_kernel.__name__]

    def launch_stages(x, dy, out, workspace):
        partials = (workspace if workspace.numel() % 4 == 0 else workspace[:nbytes]).view(torch.float32)
        # the raw handle, without the Stream object torch.cuda.current_stream builds (~8 us a call there)
        kernels[0] = stage1(x, dy, partials, torch._C._cuda_getCurrentRawStream(device_index))
        second(partials, out)

    def run(x, dy, out, workspace):
        if out is None:
            out = torch.empty(size, dtype=dtype, device=x.device)
        if current_cuda_device() != device_index:
            with torch.cuda.device(device_index):
                launch_stages(x, dy, out, workspace)
        else:
            launch_stages(x, dy, out, workspace)
        return out

    def native():
        if native_stage1 is None:
            return None
        reduce = second.native_launch((LaunchOperand.WORKSPACE, LaunchOperand.OUT))
        return None if reduce is None else (tuple(native_stage1), (reduce,))

    return BoundLaunch(run=run, kernels=kernels, native=native)
