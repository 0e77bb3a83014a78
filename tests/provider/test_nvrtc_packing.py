"""The NVRTC families' launch arguments, packed once (blocks.nvrtc.PackedArguments): what the void* array
addresses is what the kernel's parameter list says, pointers rewritten per launch, nothing else moved."""

import ctypes
import threading

import pytest

from convwgrad.provider.blocks import nvrtc

TYPES = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 2 + (ctypes.c_longlong,) * 2


def test_the_array_addresses_the_pointers_then_the_scalars():
    packed = nvrtc.PackedArguments(TYPES, (7, -3, 2**40, -(2**33)))
    assert packed.values() == [0, 0, 0, 7, -3, 2**40, -(2**33)]
    array = (ctypes.c_void_p * len(TYPES)).from_address(packed.address)
    assert ctypes.c_int.from_address(array[3]).value == 7  # the address is a ready void**


def test_a_launch_writes_the_pointer_slots_under_the_lock(monkeypatch):
    seen = []

    class Driver:
        class CUresult:
            CUDA_SUCCESS = 0

        @staticmethod
        def cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            array = (ctypes.c_void_p * len(TYPES)).from_address(params)
            seen.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, extra,
                         [ctypes.c_void_p.from_address(array[i]).value for i in range(3)],
                         ctypes.c_longlong.from_address(array[5]).value))
            return (0,)

    monkeypatch.setattr(nvrtc, "bindings", lambda: ((Driver, None), None))
    packed = nvrtc.PackedArguments(TYPES, (1, 2, 3, 4))
    packed.launch("f", (4, 2, 1), (128, 1, 1), 99, (0x1000, 0x2000, 0x3000), "k")
    packed.launch("f", (4, 2, 1), (128, 1, 1), 99, (0x4000, 0x5000, 0x6000), "k")
    assert seen[0] == ("f", (4, 2, 1), (128, 1, 1), 0, 99, 0, [0x1000, 0x2000, 0x3000], 3)
    assert seen[1][6] == [0x4000, 0x5000, 0x6000] and packed.values()[3:] == [1, 2, 3, 4]
    threads = [threading.Thread(target=packed.launch, args=("f", (1, 1, 1), (32, 1, 1), 0, (i, i, i), "k"))
               for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(set(call[6])) == 1 for call in seen[2:])  # no launch saw another's pointers


def test_a_failed_launch_names_the_kernel(monkeypatch):
    class Driver:
        class CUresult:
            CUDA_SUCCESS = 0

        @staticmethod
        def cuLaunchKernel(*args):
            return (700,)

    monkeypatch.setattr(nvrtc, "bindings", lambda: ((Driver, None), None))
    with pytest.raises(RuntimeError, match="short1d_x: cuLaunchKernel: 700"):
        nvrtc.PackedArguments(TYPES, (1, 2, 3, 4)).launch("f", (1, 1, 1), (32, 1, 1), 0, (1, 2, 3), "short1d_x")


def test_a_mismatched_parameter_list_is_refused():
    with pytest.raises(ValueError, match="7 argument types for 3 pointers and 3 scalars"):
        nvrtc.PackedArguments(TYPES, (1, 2, 3))
