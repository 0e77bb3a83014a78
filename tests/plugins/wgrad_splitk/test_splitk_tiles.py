"""Host-side bounds of the split-K family's tiles: a pinned or tuned tile past what the kernel
is built for is refused with a reason (fuzzing, issue 9: a 4096 x 4096 tile crashed at launch)."""

import pytest

import convwgrad
from convwgrad.plugins import wgrad_splitk
from convwgrad.provider import NoCandidateError, Tile, candidates
from convwgrad.provider.spec import block_size_reasons

P = convwgrad.ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(6, 6), filter_size=3, padding=1)


@pytest.mark.parametrize("target", ["interpreter", "sm_90", "gfx950"])
def test_oversized_tile_is_refused_with_reasons(target):
    with pytest.raises(NoCandidateError) as info:
        convwgrad.plan(P, target, family="wgrad_splitk", tile=Tile(block_m=4096, block_n=4096, block_k=16))
    message = str(info.value)
    assert "block_m=4096 exceeds the family's largest block_m 64" in message
    assert "block_n=4096 exceeds the family's largest block_n 64" in message


def test_block_k_128_is_refused_it_spilled_registers():
    with pytest.raises(NoCandidateError, match=r"block_k=128 exceeds the family's largest block_k 64"):
        convwgrad.plan(P, "sm_90", family="wgrad_splitk", tile=Tile(block_m=16, block_n=16, block_k=128))


def test_fp32_tile_area_is_bounded_but_not_bf16():
    tile = Tile(block_m=16, block_n=64, block_k=64)
    assert convwgrad.plan(P, "sm_90", family="wgrad_splitk", tile=tile).spec.tile == tile  # bf16
    fp32 = convwgrad.ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(6, 6), filter_size=3,
                                       padding=1, dtype="fp32")
    with pytest.raises(NoCandidateError, match=r"fp32 block_k x block_n = 64 x 64 exceeds 2048"):
        convwgrad.plan(fp32, "sm_90", family="wgrad_splitk", tile=tile)


def test_largest_tile_is_admitted():
    big = convwgrad.ConvProblem.build(batch=4, groups=2, in_channels=64, out_channels=128, input_size=(8, 8),
                                      filter_size=3, padding=1)
    tile = Tile(block_m=64, block_n=64, block_k=64)
    assert convwgrad.plan(big, "sm_90", family="wgrad_splitk", tile=tile).spec.tile == tile


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", [dict(groups=8, in_channels=8), dict(groups=2, in_channels=512, out_channels=256),
                                   dict(groups=4, in_channels=16, out_channels=1024)], ids=["dw", "wide-n", "wide-m"])
def test_offered_tiles_are_within_the_bounds(shape, dtype):
    """The bounds are the family's own offers: support() never refuses a tile candidate_specs made."""
    p = convwgrad.ConvProblem.build(batch=2, input_size=(9, 9), filter_size=3, padding=1, dtype=dtype, **shape)
    offered = [spec for spec, _ in candidates(p, "sm_90", family="wgrad_splitk")]
    assert offered
    for spec in offered:
        assert block_size_reasons(spec.tile, wgrad_splitk.MAX_BLOCKS) == [], spec.kernel_name()
        assert wgrad_splitk.fp32_tile_fits(spec.dtype, spec.tile.block_k, spec.tile.block_n)
