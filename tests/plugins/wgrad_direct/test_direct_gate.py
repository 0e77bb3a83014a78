"""Host-side checks of the direct family: the gate, refusals with reasons, tiles, the split policy."""

import itertools
import re

import pytest

import convwgrad
from convwgrad.plugins import wgrad_direct
from convwgrad.plugins.wgrad_direct import launcher
from convwgrad.plugins.wgrad_direct.launcher import direct_available, validate
from convwgrad.provider import PROFILES, ConvProblem, KernelSpec, NoCandidateError, Tile

TARGETS = [PROFILES["sm_90"], PROFILES["gfx950"], PROFILES["interpreter"]]
FAMILY = "wgrad_direct"


def problem(groups=16, cpg=1, kpg=1, size=(14, 14), k=3, dtype="bf16", layout="channels_last", batch=4):
    return ConvProblem.build(batch=batch, groups=groups, in_channels=groups * cpg, out_channels=groups * kpg,
                             input_size=size, filter_size=k, padding=k // 2, dtype=dtype, layout=layout)


PROBLEMS = [problem(g, cpg, kpg, size, k, dtype, layout) for g, cpg, kpg, size, k, dtype, layout in [
    (16, 1, 1, (14, 14), 3, "bf16", "channels_last"), (12, 1, 1, (9, 9), 5, "fp16", "contiguous"),
    (144, 1, 1, (7, 7), 7, "fp32", "channels_last"), (8, 2, 1, (6, 6), 3, "bf16", "channels_last"),
    (8, 1, 2, (6, 6), 3, "bf16", "contiguous"), (58, 1, 1, (8, 8), 9, "bf16", "channels_last"),
    (64, 1, 1, (5, 5, 5), 3, "bf16", "channels_last"), (32, 1, 1, (30,), 31, "bf16", "channels_last"),
    (1, 1, 1, (6, 6), 3, "fp32", "contiguous"),
]]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_gate_agrees_with_support_and_validation(target):
    pm = convwgrad.provider.get_plugin_manager()
    tiles = [wgrad_direct.tile_for(PROBLEMS[0], target), Tile(block_m=1024, block_n=16, block_k=1),
             Tile(block_m=64, block_n=64, block_k=64)]
    for p, gm, tile in itertools.product(PROBLEMS, [1, 2], tiles):
        spec = KernelSpec(family=FAMILY, dtype=p.dtype, group_merge=gm, tile=tile)
        gate = direct_available(p, spec, target)
        verdict = pm.hook.convwgrad_support(problem=p, spec=spec, target=target)
        assert all(reason in verdict.reasons for reason in gate)
        if gate:
            assert not verdict
            with pytest.raises(ValueError, match="cannot run"):
                validate(p, spec, target)
        else:
            validate(p, spec, target)
            # admitted, or refused only by the shared tile bounds (tiled_kernel_reasons) past the gate
            assert verdict or all("exceeds the family's largest" in r for r in verdict.reasons), verdict


@pytest.mark.parametrize("case, pins, reason", [
    (dict(groups=8, cpg=2), {}, "cpg=2: the direct family computes depthwise and channel-multiplier"),
    (dict(groups=16), dict(group_merge=4), "group_merge=4: the direct family blocks channels by tile.block_m"),
    (dict(groups=16), dict(tile=Tile(block_m=1024, block_n=16, block_k=1)), "block_m=1024 exceeds the family's largest block_m 512"),
    (dict(groups=16), dict(tile=Tile(block_m=64, block_n=128, block_k=1)), "block_n=128 exceeds the family's largest block_n 64"),
    (dict(groups=16), dict(tile=Tile(block_m=64, block_n=64, block_k=8)), "holds 256 fp32 accumulators a thread on sm_90, over 128"),
    (dict(groups=16, batch=1, size=(4, 4)), dict(split_k=64), "split_k=64 exceeds the 4 block_k=4 steps"),
])
def test_refusals_name_field_and_value(case, pins, reason):
    p = problem(**case)
    with pytest.raises(NoCandidateError, match=re.escape(reason)):
        convwgrad.plan(p, "sm_90", family=FAMILY, **pins)


def test_small_blocks_are_legal_without_tl_dot():
    """No tl.dot: a 1-channel, 1-tap, 1-column tile is admitted (the shared min of 16 is tl.dot's)."""
    p = problem(k=1)
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY, tile=Tile(block_m=1, block_n=1, block_k=1), split_k=1)
    assert chosen.grid == ((16, 1, 1),)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("k", [3, 5, 7, 9])
def test_default_tiles(layout, k):
    """channels_last blocks channels in 16-byte vectors that divide C; NCHW blocks columns first;
    both near 32 accumulators a thread; taps past 64 go to more programs along grid axis 2."""
    p = ConvProblem.build(batch=32, groups=96, in_channels=96, input_size=(56, 56), filter_size=k, padding=k // 2,
                          dtype="bf16", layout=layout)
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    tile = chosen.spec.tile
    if layout == "channels_last":
        assert tile.block_m == 32 and 96 % tile.block_m == 0
    else:
        assert tile.block_k == 64 and tile.block_m == max(1, 32 * 128 // (tile.block_n * 64))
    assert launcher.accumulators_per_thread(chosen.spec, chosen.target) == 32
    assert chosen.grid[0][2] == -(-k * k // 64)


def test_split_policy_fills_the_gpu_and_keeps_splits_long():
    p = ConvProblem.build(batch=64, groups=96, in_channels=96, input_size=(56, 56), filter_size=7, padding=3,
                          dtype="bf16", layout="channels_last")
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    programs = chosen.grid[0][0] * chosen.grid[0][1] * chosen.grid[0][2]
    assert programs >= launcher.TARGET_PROGRAMS_PER_CU * 132 * 0.99
    assert chosen.workspace_nbytes == chosen.split_k * 96 * 49 * 4
    tiny = problem(batch=1, size=(4, 4))
    assert convwgrad.plan(tiny, "sm_90", family=FAMILY).split_k == 1  # 4 rows: no split of 16 segments
    assert launcher.total_steps(tiny, convwgrad.plan(tiny, "sm_90", family=FAMILY).spec) < 2 * launcher.MIN_STEPS_PER_SPLIT


def test_registered_below_the_other_triton_families():
    names = convwgrad.provider.families().names()
    assert FAMILY in names
    assert names.index("wgrad_merged") < names.index("wgrad_splitk") < names.index(FAMILY) < names.index("aten")
    p = problem()
    assert convwgrad.plan(p, "sm_90").family != FAMILY
    text = str(convwgrad.explain(p, "sm_90", family=FAMILY))
    assert "wgrad_direct_bf16_" in text and "choice:  wgrad_direct" in text


@pytest.mark.parametrize("size, k, stride, dilation, pad, block_w", [
    (56, 7, 1, 1, 3, 1), (56, 3, 1, 1, 1, 4), (57, 3, 2, 1, 1, 2), (31, 3, 1, 3, 3, 2), (8, 9, 1, 1, 4, 1),
    (19, 4, 1, 1, (3, 0), 4),
])
def test_inner_columns_exact(size, k, stride, dilation, pad, block_w):
    """The interior segment range is exactly the segments whose every (tap, column) reads inside."""
    pad = pad if isinstance(pad, tuple) else (pad, pad)
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(size,), filter_size=k, stride=stride,
                          dilation=dilation, padding=(pad,), dtype="bf16", layout="channels_last")
    lo, hi = launcher.inner_columns(p, block_w)
    out_w = p.output_size[0]
    inside = [b for b in range(-(-out_w // block_w))
              if (b + 1) * block_w <= out_w
              and all(0 <= (b * block_w + w) * stride - pad[0] + t * dilation < size
                      for w in range(block_w) for t in range(k))]
    assert list(range(lo, hi)) == inside
