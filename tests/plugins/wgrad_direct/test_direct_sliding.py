"""The sliding kernel (block_n = 1): generated per filter, checked in the interpreter like the tile
kernel (float64 reference, NaN-poisoned dW and workspace, the kernel that ran), and compiled."""

import math

import pytest

import convwgrad
from convwgrad.plugins.wgrad_direct import launcher, sliding
from convwgrad.provider import ConvProblem, NoCandidateError, Tile
from support import assert_close_to_reference, run_checked

pytestmark = pytest.mark.usefixtures("no_tf32")
FAMILY = "wgrad_direct"

CASES = {
    "3x3-tail": (dict(batch=2, groups=13, in_channels=13, input_size=(7, 9), filter_size=3, padding=1), 16, 2),
    "5x5-s2-d2-asym": (dict(batch=1, groups=8, in_channels=8, input_size=(11, 13), filter_size=5, stride=2,
                            dilation=2, padding=((1, 3), (4, 2))), 8, 4),
    "7x7-wide": (dict(batch=1, groups=16, in_channels=16, input_size=(8, 19), filter_size=7, padding=3), 16, 4),
    "kpg2": (dict(batch=2, groups=4, in_channels=4, out_channels=8, input_size=(6, 12), filter_size=3, padding=1), 8, 1),
    "1d-k4-causal": (dict(batch=2, groups=8, in_channels=8, input_size=(21,), filter_size=4, padding=((3, 0),)), 8, 8),
    "1d-k15": (dict(batch=1, groups=8, in_channels=8, input_size=(30,), filter_size=15, padding=7), 8, 4),
    "3d": (dict(batch=1, groups=8, in_channels=8, input_size=(3, 4, 9), filter_size=3, padding=1), 8, 2),
}


@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sliding_matches_reference(case, split_k):
    shape, block_c, block_w = CASES[case]
    dtype, layout = [("bf16", "channels_last"), ("fp16", "contiguous"), ("fp32", "channels_last")][
        (sorted(CASES).index(case) + split_k) % 3]
    p = ConvProblem.build(**shape, dtype=dtype, layout=layout)
    tile = Tile(block_m=block_c, block_n=1, block_k=block_w, num_warps=1, num_stages=1)
    outcome = run_checked(p, family=FAMILY, tile=tile, split_k=split_k)
    assert outcome.launches[0].kernels[0] == sliding.KERNEL_NAME
    assert outcome.plan.grid[0][2] == 1  # every tap in one program
    assert_close_to_reference(outcome, p)


def test_generated_source_loads_each_column_once_per_filter_row():
    """7x7 at 8 columns a step: 14 distinct input columns a filter row (not 56), 8 dY columns, in
    each of the two bodies (unmasked and masked); 49 x 8 FMAs a body."""
    text = sliding._source(1, 7, 7, 1, 1, 8, False)
    assert text.count("xv_") - text.count("* dv_") == 2 * 7 * 14  # loads (each xv_ name once assigned)
    assert text.count("dv_") - text.count("* dv_") == 2 * 8
    assert text.count("* dv_") == 2 * 49 * 8


def test_sliding_refusals():
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(12, 12), filter_size=11, padding=5,
                          dtype="bf16", layout="channels_last")
    with pytest.raises(NoCandidateError, match="unrolls all 121 taps, over 81"):
        convwgrad.plan(p, "sm_90", family=FAMILY, tile=Tile(block_m=32, block_n=1, block_k=1, num_warps=1))
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(12, 12), filter_size=9, padding=4,
                          dtype="bf16", layout="channels_last")
    with pytest.raises(NoCandidateError, match="block_k=16 x 81 taps = 1296 unrolled FMAs a step, over"):
        convwgrad.plan(p, "sm_90", family=FAMILY, tile=Tile(block_m=32, block_n=1, block_k=16, num_warps=1))
    with pytest.raises(NoCandidateError, match="holds 162 fp32 accumulators a thread"):
        convwgrad.plan(p, "sm_90", family=FAMILY, tile=Tile(block_m=64, block_n=1, block_k=4, num_warps=1))


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_sliding_compiles_without_scratch(target):
    """bf16 channels_last 3x3 at 8 channels a thread: 16-byte loads on sm_90; no scratch anywhere."""
    p = ConvProblem.build(batch=32, groups=256, in_channels=256, input_size=(28, 28), filter_size=3, padding=1,
                          dtype="bf16", layout="channels_last")
    cpt = 8
    warp = 32 if target == "sm_90" else 64
    tile = Tile(block_m=cpt * warp, block_n=1, block_k=4, num_warps=1, num_stages=1)
    (stage1, *_) = convwgrad.aot.compile(p, target, family=FAMILY, tile=tile)
    isa = stage1.isa()
    assert stage1.function == sliding.KERNEL_NAME and isa.scratch_bytes == 0, isa
    assert isa.matrix_count == 0
    if target == "sm_90":
        assert set(isa.global_loads) == {16}, isa
        assert not any(op in stage1.asm["ptx"] for op in ("ld.local", "st.local"))
    else:
        assert "global_load_dwordx4" in stage1.asm["amdgcn"]
    assert math.prod(p.filter_size) * tile.block_m / (warp * tile.num_warps) == launcher.accumulators_per_thread(
        convwgrad.plan(p, target, family=FAMILY, tile=tile).spec, convwgrad.provider.PROFILES[target], p)
