"""The simple split-K policy: fill the device, never an empty split, never past the grid limit."""

import pytest

from convwgrad.provider import PROFILES, ConvProblem, KernelSpec, Tile, plan
from convwgrad.selectors.splitk import MIN_BLOCKS_PER_SPLIT, TARGET_WAVES, choose_split_k

TILE = Tile(block_m=16, block_n=16, block_k=64)


def spec(dtype="bf16"):
    return KernelSpec(family="wgrad_splitk", dtype=dtype, tile=TILE)


def depthwise(channels, hw, batch=32):
    return ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(hw, hw),
                             filter_size=3, padding=1)


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_small_grid_is_split_to_fill_waves(target):
    t = PROFILES[target]
    p = depthwise(32, 56)  # base grid 32 programs
    split = choose_split_k(p, spec(), t, p.groups)
    assert split == -(-TARGET_WAVES * t.compute_units // 32)


def test_large_group_count_is_not_split():
    p = depthwise(4096, 56)
    assert choose_split_k(p, spec(), PROFILES["sm_90"], p.groups) == 1


def test_shallow_k_caps_the_split():
    p = depthwise(8, 4, batch=1)  # K_gemm = 16: one 64-wide step
    assert choose_split_k(p, spec(), PROFILES["gfx950"], p.groups) == 1
    p = depthwise(8, 16, batch=4)  # K_gemm = 1024: 16 steps -> at most 16 / MIN_BLOCKS_PER_SPLIT
    assert choose_split_k(p, spec(), PROFILES["gfx950"], p.groups) == 16 // MIN_BLOCKS_PER_SPLIT


@pytest.mark.parametrize("channels", [1, 7, 64, 1000, 65537])
def test_planned_split_within_grid_and_k(channels):
    t = PROFILES["sm_90"]
    chosen = plan(depthwise(channels, 28), t, family="wgrad_splitk")
    assert all(size <= limit for size, limit in zip(chosen.grid[0], t.max_grid))
    assert chosen.split_k <= -(-chosen.problem.gemm_k // chosen.spec.tile.block_k)


def test_routing_rules_fire_and_say_so():
    small_filter = depthwise(144, 56)
    on_cuda = plan(small_filter, "sm_90")
    assert on_cuda.family == "aten" and on_cuda.rule.startswith("measured:")
    large_filter = ConvProblem.build(batch=32, groups=128, in_channels=128, input_size=(56, 56),
                                     filter_size=31, padding=15, layout="channels_last")
    assert plan(large_filter, "sm_90").family == "wgrad_merged"
    conv1d = ConvProblem.build(batch=32, groups=256, in_channels=256, input_size=(512,), filter_size=31, padding=15)
    assert plan(conv1d, "sm_90").family == "wgrad_merged"
    grouped = ConvProblem.build(batch=32, groups=32, in_channels=128, input_size=(28, 28), filter_size=3, padding=1)
    assert plan(grouped, "sm_90").family == "aten"  # split-K measured slower on CUDA
    on_amd = plan(small_filter, "gfx950")
    assert on_amd.family == "wgrad_merged" and on_amd.rule.startswith("priority:")
    pinned = plan(small_filter, "sm_90", family="wgrad_merged")
    assert pinned.family == "wgrad_merged"
