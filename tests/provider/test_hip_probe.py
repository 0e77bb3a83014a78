"""The ROCm probe through hip-python, exercised with a stand-in `hip` module (no ROCm here)."""

import enum
import sys
import types

import pytest

from convwgrad.provider import TargetInfo, hip_probe


def fake_hip(values, *, fail=None, arch=b"gfx950:sramecc+:xnack-"):
    class Error(enum.Enum):
        hipSuccess = 0
        hipErrorInvalidDevice = 101

    attributes = enum.Enum("hipDeviceAttribute_t", {name: i for i, name in enumerate(values)})

    def get_attribute(attribute, device):
        if attribute.name == fail:
            return Error.hipErrorInvalidDevice, 0
        return Error.hipSuccess, values[attribute.name]

    def get_properties(device):
        return Error.hipSuccess, types.SimpleNamespace(gcnArchName=arch)

    hip = types.SimpleNamespace(hipDeviceAttribute_t=attributes, hipError_t=Error,
                                hipDeviceGetAttribute=get_attribute, hipGetDeviceProperties=get_properties)
    package = types.ModuleType("hip")
    package.hip = hip
    return package


VALUES = {"hipDeviceAttributeMultiprocessorCount": 256, "hipDeviceAttributeWarpSize": 64,
          "hipDeviceAttributeNumberOfXccs": 8}


def test_probe_reads_cus_xccs_warp_and_arch(monkeypatch):
    monkeypatch.setitem(sys.modules, "hip", fake_hip(VALUES))
    target = hip_probe(0)
    assert isinstance(target, TargetInfo)
    assert (target.name, target.backend, target.compute_units, target.l2_domains, target.warp_size) == \
        ("gfx950", "hip", 256, 8, 64)


def test_probe_without_the_xcc_attribute_assumes_one_domain(monkeypatch):
    values = {k: v for k, v in VALUES.items() if k != "hipDeviceAttributeNumberOfXccs"}
    monkeypatch.setitem(sys.modules, "hip", fake_hip(values, arch=b"gfx90a"))
    target = hip_probe(0)
    assert target.l2_domains == 1 and target.arch == "gfx90a"


@pytest.mark.parametrize("failing", ["hipDeviceAttributeMultiprocessorCount", "hipDeviceAttributeWarpSize"])
def test_probe_errors_become_unavailable_reasons(monkeypatch, failing):
    monkeypatch.setitem(sys.modules, "hip", fake_hip(VALUES, fail=failing))
    result = hip_probe(0)
    assert isinstance(result, str) and result.startswith("unavailable:") and failing in result
