"""The kernels compile for gfx950 (MFMA) and sm_90 (mma) on a machine with no GPU."""

import pytest

from convwgrad import aot
from convwgrad.provider import ConvProblem

TARGET_MATRIX_OP = {"gfx950": "v_mfma", "sm_90": "mma"}


def mobilenet_layer(dtype):
    return ConvProblem.build(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3,
                             padding=1, dtype=dtype, layout="channels_last")


@pytest.mark.parametrize("target", ["gfx950", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_matrix_instructions_in_main_loop(target, dtype):
    kernels = aot.compile(mobilenet_layer(dtype), target, family="wgrad_splitk", split_k=4)
    assert [k.name.rsplit(".", 1)[1] for k in kernels] == ["stage1", "stage2"]
    stage1, stage2 = (k.isa() for k in kernels)
    assert stage1.isa == ("amdgcn" if target == "gfx950" else "ptx")
    ops = [op for op in stage1.matrix_instructions if op.startswith(TARGET_MATRIX_OP[target])]
    assert ops and sum(stage1.matrix_instructions[o] for o in ops) >= 1, stage1
    assert stage2.matrix_count == 0  # the reduction is a plain stream
    assert sum(stage1.global_loads.values()) > 0 and stage1.scratch_bytes == 0 or target == "sm_90", stage1


def test_one_stage_compiles_for_both_targets():
    p = ConvProblem.build(batch=8, groups=4, in_channels=16, out_channels=32, input_size=(14, 14),
                          filter_size=3, padding=1, dtype="bf16")
    for target in ("gfx950", "sm_90"):
        (kernel,) = aot.compile(p, target, family="wgrad_splitk", split_k=1)
        assert kernel.name.endswith("_1stage.stage1")
        assert kernel.isa().matrix_count > 0


def test_aten_family_has_nothing_to_compile():
    assert aot.compile(mobilenet_layer("bf16"), "sm_90", family="aten") == []


def test_isa_summary_counts_vector_loads():
    from convwgrad.provider.aot import summarize_isa

    amd = summarize_isa({"amdgcn": "  global_load_dwordx4 v[0:3], v[4:5], off\n  buffer_load_ushort v1, v2, s[0:3], 0 offen\n"
                         "  v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], 0\n; NumVgprs: 40\n; ScratchSize: 0\n"})
    assert amd.global_loads == {16: 1, 2: 1} and amd.matrix_count == 1 and amd.registers == 40
    ptx = summarize_isa({"ptx": "\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];\n"
                         "\tcp.async.cg.shared.global [ %r5 + 0 ], [ %rd2 + 0 ], 0x10, %r6;\n"
                         "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {...};\n"})
    assert ptx.global_loads == {16: 2} and ptx.matrix_count == 1
