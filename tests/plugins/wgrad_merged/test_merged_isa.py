"""The merged kernel's ISA for gfx950 and sm_90: 16-byte operand loads at Gm = 8 (bf16), matrix ops."""

import pytest

from convwgrad import aot
from convwgrad.provider import ConvProblem

MATRIX = {"gfx950": "v_mfma", "sm_90": "mma"}


def layer(dtype="bf16"):
    return ConvProblem.build(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3,
                             padding=1, dtype=dtype, layout="channels_last")


@pytest.mark.parametrize("target", ["gfx950", "sm_90"])
def test_gm8_bf16_loads_are_16_bytes_where_gm1_loads_2(target):
    merged = aot.compile(layer(), target, family="wgrad_merged", group_merge=8, split_k=4)[0].isa()
    gm1 = aot.compile(layer(), target, family="wgrad_splitk", split_k=4)[0].isa()
    # Every global load of the merged stage-1 kernel is a 16-byte vector (its only loads are
    # the two operands in the main loop); the Gm = 1 kernel's are all 2-byte.
    assert set(merged.global_loads) == {16} and merged.global_loads[16] >= 2, merged
    assert set(gm1.global_loads) == {2} and gm1.global_loads[2] >= 2, gm1
    assert sum(n for op, n in merged.matrix_instructions.items() if op.startswith(MATRIX[target])) > 0
    assert merged.scratch_bytes == 0


@pytest.mark.parametrize("target", ["gfx950", "sm_90"])
def test_two_stage_merged_compiles(target):
    kernels = aot.compile(layer("fp16"), target, family="wgrad_merged", group_merge=16, split_k=8)
    assert [k.name.rsplit(".", 1)[1] for k in kernels] == ["stage1", "stage2"]
    assert "_gm16" in kernels[0].name and kernels[0].isa().matrix_count > 0
