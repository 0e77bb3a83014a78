"""CUDA C++ kernels built at run time: NVRTC builds a source for the device's architecture, the
driver API loads it into torch's context and launches it on torch's stream.

For the families whose kernels are CUDA C++ (``wgrad_shifted_mma``, ``wgrad_short1d``): each keeps
its source, its defines and its argument types; the build, the load and the launch are here, one
copy. cuda-bindings (``cuda.bindings.driver`` / ``.nvrtc``) is optional: :func:`bindings` gives the
reason it is missing, which the families' gates return as their refusal.
"""

from __future__ import annotations

import functools

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


def launch(function, grid, block, stream: int, args, arg_types, what: str) -> None:
    """One launch of ``function`` on ``stream`` (torch's raw stream handle), no dynamic shared
    memory; ``args`` the kernel's arguments in order, ``arg_types`` their ctypes."""
    (driver, _), _ = bindings()
    (err,) = driver.cuLaunchKernel(function, *grid, *block, 0, stream, (tuple(args), tuple(arg_types)), 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: cuLaunchKernel: {err}")
