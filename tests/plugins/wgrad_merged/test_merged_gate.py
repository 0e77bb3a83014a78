"""Host-side checks of the merged-group family: the gate, merged vs true dims, names."""

import itertools
import re

import pytest

import convwgrad
from convwgrad.plugins import wgrad_merged
from convwgrad.plugins.wgrad_merged.launcher import group_merge_available, merged_dims, validate
from convwgrad.provider import PROFILES, ConvProblem, KernelSpec, NoCandidateError, Tile

TARGETS = [PROFILES["sm_90"], PROFILES["gfx950"], PROFILES["interpreter"]]


def problem(groups=16, cpg=1, kpg=1, size=(14, 14), k=3, dtype="bf16"):
    return ConvProblem.build(batch=4, groups=groups, in_channels=groups * cpg, out_channels=groups * kpg,
                             input_size=size, filter_size=k, padding=k // 2, dtype=dtype, layout="channels_last")


PROBLEMS = [problem(g, cpg, kpg, size, k, dtype) for g, cpg, kpg, size, k, dtype in [
    (16, 1, 1, (14, 14), 3, "bf16"), (12, 1, 1, (9, 9), 5, "fp16"), (144, 1, 1, (7, 7), 7, "fp32"),
    (8, 2, 1, (6, 6), 3, "bf16"), (8, 1, 2, (6, 6), 3, "bf16"), (58, 1, 1, (8, 8), 3, "bf16"),
    (64, 1, 1, (5, 5, 5), 3, "bf16"), (32, 1, 1, (30,), 31, "bf16"), (1, 1, 1, (6, 6), 3, "fp32"),
]]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_gate_agrees_with_support_and_validation(target):
    pm = convwgrad.provider.get_plugin_manager()
    for p, gm in itertools.product(PROBLEMS, [1, 2, 3, 4, 8, 16, 32, 64, 128]):
        spec = KernelSpec(family="wgrad_merged", dtype=p.dtype, group_merge=gm,
                          tile=wgrad_merged.tile_for(p, gm, 64, target))
        gate = group_merge_available(p, spec, target)
        verdict = pm.hook.convwgrad_support(problem=p, spec=spec, target=target)
        assert not gate or not verdict, (p.describe(), gm, gate, verdict)
        assert all(reason in verdict.reasons for reason in gate)
        if gate:
            with pytest.raises(ValueError, match="cannot run"):
                validate(p, spec, target)
        else:
            validate(p, spec, target)
            assert verdict, (p.describe(), gm, verdict)


@pytest.mark.parametrize("case, gm, reason", [
    (dict(groups=12), 8, "group_merge=8 does not divide groups=12"),
    (dict(groups=8, cpg=2), 2, "merging needs depthwise groups"),
    (dict(groups=8, kpg=2), 2, "a channel multiplier (kpg > 1) runs in the split-K family"),
    (dict(groups=12), 3, "group_merge=3 is not a power of two"),
    (dict(groups=256), 128, "exceeds the family's limit 64"),
    (dict(groups=16), 1, "split-K family's"),
])
def test_gate_refuses_with_reason(case, gm, reason):
    p = problem(**case)
    spec = KernelSpec(family="wgrad_merged", dtype="bf16", group_merge=gm, tile=wgrad_merged.tile_for(p, gm, 64, TARGETS[0]))
    assert any(reason in r for r in group_merge_available(p, spec, TARGETS[0])), group_merge_available(p, spec, TARGETS[0])
    with pytest.raises(NoCandidateError, match=re.escape(reason.split(":")[0][:30])):
        convwgrad.plan(p, "sm_90", group_merge=gm, family="wgrad_merged")


def test_gate_refuses_targets_without_matrix_units():
    p = problem()
    spec = KernelSpec(family="wgrad_merged", dtype="bf16", group_merge=8, tile=Tile(block_m=16, block_n=128, block_k=64))
    assert any("no matrix units" in r for r in group_merge_available(p, spec, PROFILES["cpu"]))


def test_pin_refused_degree_raises_value_error_with_gate_reason():
    with pytest.raises(ValueError, match="group_merge=8 does not divide groups=12"):
        convwgrad.plan(problem(groups=12), "gfx950", group_merge=8)


def test_merged_and_true_dims_are_separate():
    p = problem(groups=144, k=3)
    dims = merged_dims(p, 8)
    assert (dims.grid_M, dims.grid_N, dims.grid_groups) == (8, 72, 18)
    assert (dims.true_M, dims.true_N) == (1, 9)
    chosen = convwgrad.plan(p, "sm_90", family="wgrad_merged", group_merge=8, split_k=4)
    assert chosen.grid[0][0] == 18 * 4
    assert chosen.workspace_nbytes == 4 * 144 * 9 * 4  # the true dW, not the merged GEMM


def test_kernel_names_unique_across_degrees_and_gm1_unchanged():
    p = problem(groups=64)
    names = {}
    for gm, spk in itertools.product([1, 2, 4, 8, 16, 32], [1, 2, 5]):
        family = "wgrad_splitk" if gm == 1 else "wgrad_merged"
        chosen = convwgrad.plan(p, "gfx950", family=family, group_merge=gm, split_k=spk)
        assert chosen.kernel_name not in names, (chosen.kernel_name, names.get(chosen.kernel_name))
        names[chosen.kernel_name] = (gm, spk)
        assert ("_gm" in chosen.kernel_name) == (gm > 1)
        assert chosen.kernel_name.startswith("wgrad_splitk_bf16_m16n16k32w4s2_spk") or gm > 1


def test_bench_sweep_lists_merged_degrees_without_collisions():
    from convwgrad.bench import sweep_specs

    specs = sweep_specs(problem(groups=16), PROFILES["gfx950"], splits=(1, 2))
    names = [s.kernel_name() for s in specs]
    assert len(names) == len(set(names))
    assert {s.group_merge for s in specs if s.family == "wgrad_merged"} == {2, 4, 8, 16}


def test_explain_says_how_nchw_is_handled():
    p = ConvProblem.build(batch=2, groups=16, in_channels=16, input_size=(6, 6), filter_size=3, padding=1,
                          dtype="bf16", layout="contiguous")
    assert "loads stay element-wide; use channels_last" in str(convwgrad.explain(p, "sm_90"))


@pytest.mark.parametrize("target", ["interpreter", "sm_90"])
@pytest.mark.parametrize("tile, reasons", [
    (Tile(block_m=4096, block_n=4096, block_k=16), ["block_m=4096 exceeds the family's largest block_m 64",
                                                    "block_n=4096 exceeds the family's largest block_n 128",
                                                    "512 taps a tile, over 32"]),
    (Tile(block_m=16, block_n=128, block_k=512), ["block_k=512 exceeds the family's largest block_k 256"]),
], ids=["4096x4096", "block_k-512"])
def test_oversized_tile_is_refused_with_reasons(target, tile, reasons):
    """Fuzzing, issue 9: support() checked only the smallest tile, so these crashed at launch."""
    with pytest.raises(NoCandidateError) as info:
        convwgrad.plan(problem(groups=16), target, family="wgrad_merged", group_merge=8, tile=tile)
    for reason in reasons:
        assert reason in str(info.value)


def test_taps_per_tile_are_bounded():
    """Gm = 2 at 64 taps a tile spilled on sm_90; 32 taps is the family's limit."""
    p = problem(groups=16, k=9)
    with pytest.raises(NoCandidateError, match=r"block_n=128 at group_merge=2 is 64 taps a tile, over 32"):
        convwgrad.plan(p, "sm_90", family="wgrad_merged", group_merge=2, tile=Tile(block_m=16, block_n=128, block_k=64))
    tile = Tile(block_m=16, block_n=64, block_k=64)
    assert convwgrad.plan(p, "sm_90", family="wgrad_merged", group_merge=2, tile=tile).spec.tile == tile


@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: p.describe())
def test_offered_tiles_are_within_the_bounds(p):
    for target in TARGETS:
        for spec in wgrad_merged.candidate_specs(p, target):
            assert not any("exceeds the family's largest" in r or "taps a tile" in r
                           for r in wgrad_merged.not_supported_reasons(p, spec, target)), spec.kernel_name()


@pytest.mark.parametrize("size, k, first", [
    ((1024,), 4, 32),   # Mamba's k = 4: 32 first (SHORT_SEQUENCE_TAPS_FOR_32)
    ((1024,), 3, 32),
    ((1024,), 15, 16),  # longer 1-D filters keep 16 first
    ((14, 14), 2, 16),  # 2x2 = 4 taps in 2-D: the fill rule decides, not the sequence one
    ((14, 14), 3, 32),  # 3x3: 32 fills the merged-column tiles better (FILL_MARGIN_FOR_32)
])
def test_preferred_degree_order(size, k, first):
    p = problem(groups=256, size=size, k=k)
    degrees = wgrad_merged.preferred_degrees(p)
    assert degrees[0] == first and sorted(degrees) == sorted(wgrad_merged.DEGREES), degrees
    assert wgrad_merged.candidate_specs(p, PROFILES["sm_90"])[0].group_merge == first
