"""The direct kernel's ISA for sm_90 and gfx950 (compiled offline, no GPU): 16-byte input loads in
channels_last bf16 with C % 8 == 0, no matrix instructions, no scratch or local memory."""

import re

import pytest

from convwgrad import aot
from convwgrad.provider import ConvProblem

LAYERS = {
    "convnext-7x7-c96": dict(batch=64, groups=96, in_channels=96, input_size=(56, 56), filter_size=7, padding=3),
    "mobilenetv2-3x3-c144": dict(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, padding=1),
}
#: Registers a thread the default tiles stay under (sm_90: 4-warp programs at <= 168 leave room for
#: 3 a SM; gfx950: VGPRs of 512 a lane).
MAX_REGISTERS = {"sm_90": 168, "gfx950": 256}


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_channels_last_bf16_loads_are_16_bytes(layer, target):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout="channels_last")
    kernels = aot.compile(p, target, family="wgrad_direct")
    assert [k.function for k in kernels][0] == "_wgrad_direct_kernel"
    isa = kernels[0].isa()
    assert isa.global_loads.get(16, 0) >= 4, isa  # the input tile's vectors, in each loop variant
    assert 2 not in isa.global_loads, isa  # no element-wide loads of an operand
    assert 16 * isa.global_loads[16] >= 0.75 * sum(w * n for w, n in isa.global_loads.items()), isa
    assert isa.matrix_count == 0
    assert isa.scratch_bytes == 0, isa
    assert isa.registers is not None and isa.registers <= MAX_REGISTERS[target], isa
    if target == "sm_90":
        ptx = kernels[0].asm["ptx"]
        assert "ld.global.v4" in ptx
        assert not re.search(r"\b(ld|st)\.local\b", ptx), "the kernel spills to local memory"
    else:
        assert "global_load_dwordx4" in kernels[0].asm["amdgcn"]


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_nchw_and_one_stage_compile(target):
    """NCHW (vectors along ow, narrow input loads) and split_k = 1 (dW stored directly) compile
    without scratch."""
    p = ConvProblem.build(**LAYERS["mobilenetv2-3x3-c144"], dtype="fp16", layout="contiguous")
    kernels = aot.compile(p, target, family="wgrad_direct", split_k=1)
    assert [k.name.rsplit(".", 1)[1] for k in kernels] == ["stage1"]
    assert kernels[0].isa().scratch_bytes == 0
