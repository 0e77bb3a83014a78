"""plan(), explain(), kernel specs and target profiles, on offline profiles: no kernel is compiled or run."""

from __future__ import annotations

import itertools
import math
import pickle
import re

import attrs
import pytest
import torch

from convwgrad.provider import (
    PROFILES,
    ConvProblem,
    KernelSpec,
    NoCandidateError,
    Tile,
    build_plugin_manager,
    candidates,
    current_target,
    explain,
    hip_probe,
    plan,
    use_plugin_manager,
)
from convwgrad.provider.manager import DISABLE_ENV
from convwgrad.provider.problem import DTYPES
from convwgrad.provider.target import GRID_LIMITS, TargetInfo, resolve_target


@pytest.fixture(autouse=True)
def pm(monkeypatch):
    """A fresh manager with the built-ins only, current for the test."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    manager = build_plugin_manager(load_entrypoints=False)
    with use_plugin_manager(manager):
        yield manager


#: MobileNetV2's 144-channel depthwise 3x3 at 56x56, batch 32.
MBV2 = ConvProblem.build(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, padding=1,
                         dtype=torch.bfloat16, layout="channels_last")
#: ResNeXt-style grouped layer, 4 channels a group: not depthwise, so not the merged family's.
GROUPED = ConvProblem.build(batch=4, groups=8, in_channels=32, input_size=(14, 14), filter_size=3, padding=1,
                            dtype=torch.bfloat16, layout="channels_last")
#: K_gemm = 64: one block_k=64 step, two of 32.
SMALL = ConvProblem.build(batch=1, groups=1, in_channels=8, input_size=(8, 8), filter_size=3, padding=1)


# --------------------------------------------------------------- kernel names
def _spec_space():
    tiles = [
        None,
        Tile(block_m=16, block_n=16, block_k=64),
        Tile(block_m=16, block_n=16, block_k=64, num_warps=8),
        Tile(block_m=16, block_n=16, block_k=64, num_stages=3),
        Tile(block_m=16, block_n=64, block_k=32, num_warps=4, num_stages=3),
        Tile(block_m=64, block_n=16, block_k=32, num_warps=4, num_stages=3),
        Tile(block_m=32, block_n=32, block_k=128, num_warps=2, num_stages=1),
    ]
    for family, dtype, tile, split_k, gm, tf32, wide in itertools.product(
        ("wgrad_splitk", "aten"), DTYPES, tiles, (1, 2, 3, 4), (1, 2, 4), (False, True), (False, True)
    ):
        yield KernelSpec(family=family, dtype=dtype, tile=tile, split_k=split_k, group_merge=gm,
                         allow_tf32=tf32, wide_index=wide)


def test_kernel_names_unique_iff_specs_distinct():
    specs = list(_spec_space())
    assert len(specs) == 2 * 3 * 7 * 4 * 3 * 2 * 2
    by_name: dict[str, KernelSpec] = {}
    for spec in specs:
        name = spec.kernel_name()
        assert by_name.setdefault(name, spec) == spec, f"{name} names both {by_name[name]} and {spec}"
    assert len(by_name) == len(set(specs)) == len(specs)
    # equal specs (rebuilt, or evolved back) have equal names and hashes
    for spec in specs[::97]:
        twin = attrs.evolve(attrs.evolve(spec, split_k=spec.split_k + 1), split_k=spec.split_k)
        assert twin == spec and hash(twin) == hash(spec) and twin.kernel_name() == spec.kernel_name()


def test_kernel_name_parts():
    spec = KernelSpec(family="wgrad_splitk", dtype="fp32", tile=Tile(block_m=16, block_n=32, block_k=64),
                      split_k=3, group_merge=2, allow_tf32=True, wide_index=True)
    assert spec.kernel_name() == "wgrad_splitk_fp32_m16n32k64w4s2_spk3_2stage_gm2_tf32_i64"
    assert KernelSpec(family="aten", dtype="bf16").kernel_name() == "aten_bf16_spk1_1stage"
    assert spec.two_stage and not attrs.evolve(spec, split_k=1).two_stage


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_m=24, block_n=16, block_k=16), r"block_m must be a power of two, got 24"),
    (dict(block_m=16, block_n=0, block_k=16), r"block_n must be a positive int, got 0"),
    (dict(block_m=16, block_n=16, block_k=-2), r"block_k must be a positive int, got -2"),
    (dict(block_m=16, block_n=16, block_k=16, num_warps=3), r"num_warps must be a power of two, got 3"),
    (dict(block_m=16, block_n=16, block_k=16, num_stages=0), r"num_stages must be a positive int, got 0"),
], ids=["block_m", "block_n", "block_k", "num_warps", "num_stages"])
def test_tile_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Tile(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(split_k=0), r"split_k must be a positive int, got 0"),
    (dict(group_merge=0), r"group_merge must be a positive int, got 0"),
    (dict(dtype="fp64"), r"^dtype 'fp64' is not supported; supported dtypes: fp16, bf16, fp32$"),
], ids=["split_k", "group_merge", "dtype"])
def test_spec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KernelSpec(**{"family": "aten", "dtype": "bf16", **kwargs})


# --------------------------------------------------------------- offline plans
def _check_geometry(p, problem):
    """Every grid axis within the target's limits; the workspace holds split_k fp32 copies of dW."""
    assert len(p.grid) == (2 if p.two_stage else 1)
    for grid in p.grid:
        assert len(grid) == 3
        assert all(1 <= size <= limit for size, limit in zip(grid, p.target.max_grid)), grid
    assert p.grid[0][0] == problem.groups // p.group_merge * p.split_k
    if p.split_k > 1:
        assert p.workspace_nbytes == p.split_k * math.prod(problem.weight_size) * 4
    else:
        assert p.workspace_nbytes == 0


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_mobilenetv2_depthwise_plan(target):
    """The merged family ranks above split-K and takes a depthwise layer (pinned: on CUDA the
    measured rule sends 3x3 depthwise to cuDNN; selectors tests cover that rule)."""
    p = plan(MBV2, target, family="wgrad_merged")
    assert p.target == PROFILES[target]
    assert p.family == "wgrad_merged"
    assert p.rule.startswith("priority: wgrad_merged")
    assert p.spec.dtype == "bf16"
    assert p.group_merge > 1 and MBV2.groups % p.group_merge == 0
    _check_geometry(p, MBV2)
    # split-K fills the device: more programs than compute units
    assert math.prod(p.grid[0]) >= p.target.compute_units


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_mobilenetv2_depthwise_plan_splitk(target):
    p = plan(MBV2, target, family="wgrad_splitk")
    assert p.family == "wgrad_splitk"
    assert p.rule.startswith("priority: wgrad_splitk")  # the pin leaves aten out, so no measured rule
    assert p.spec.dtype == "bf16" and p.group_merge == 1
    assert p.split_k > 1
    _check_geometry(p, MBV2)
    assert math.prod(p.grid[0]) >= p.target.compute_units


def test_without_merged_family(monkeypatch):
    """Split-K alone: taken on gfx950; on CUDA the measured rule prefers aten."""
    monkeypatch.setenv(DISABLE_ENV, "convwgrad.plugins.wgrad_merged")
    with use_plugin_manager(build_plugin_manager(load_entrypoints=False)):
        assert plan(MBV2, "gfx950").family == "wgrad_splitk"
        cuda = plan(MBV2, "sm_90")
    assert cuda.family == "aten"
    assert cuda.rule.startswith("measured: aten is faster than wgrad_splitk on cuda")


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_split_k_fills_the_target_waves(target):
    """The split-K selector sizes the grid by the target's wave of resident programs."""
    from convwgrad.selectors.splitk import TARGET_WAVES, wave_programs

    for family in ("wgrad_merged", "wgrad_splitk"):
        p = plan(MBV2, target, family=family)
        assert math.prod(p.grid[0]) >= TARGET_WAVES * wave_programs(p.spec, p.target)
        assert math.prod(p.grid[0]) % p.target.l2_domains == 0


@pytest.mark.parametrize("family", ["wgrad_merged", "wgrad_splitk"])
@pytest.mark.parametrize("split_k", [1, 2, 3, 4, 7, 16])
def test_split_k_pin_is_honoured(family, split_k):
    p = plan(MBV2, "gfx950", family=family, split_k=split_k)
    assert (p.family, p.split_k, p.two_stage) == (family, split_k, split_k > 1)
    _check_geometry(p, MBV2)


def test_split_k_pin_alone():
    p = plan(MBV2, "sm_90", split_k=4)
    assert p.split_k == 4
    assert all(spec.split_k == 4 for spec, _ in candidates(MBV2, "sm_90", split_k=4))


def test_tile_pin_is_honoured():
    tile = Tile(block_m=32, block_n=32, block_k=32, num_warps=8, num_stages=2)
    p = plan(MBV2, "sm_90", family="wgrad_splitk", tile=tile)
    assert p.spec.tile == tile
    assert tile.name in p.kernel_name


def test_family_pin_aten():
    p = plan(MBV2, "sm_90", family="aten")
    assert (p.family, p.grid, p.workspace_nbytes, p.split_k) == ("aten", (), 0, 1)


@pytest.mark.parametrize("group_merge", [2, 4, 8, 16])
def test_group_merge_pin(group_merge):
    p = plan(MBV2, "sm_90", group_merge=group_merge)
    assert (p.family, p.group_merge) == ("wgrad_merged", group_merge)
    _check_geometry(p, MBV2)


def test_group_merge_pin_no_family_admits():
    with pytest.raises(NoCandidateError) as info:
        plan(MBV2, "sm_90", group_merge=3)
    message = str(info.value)
    assert "group_merge=3 is not a power of two" in message
    assert "group_merge=3: this family computes one group per program" in message
    assert "group_merge=3: aten does not merge groups" in message
    with pytest.raises(NoCandidateError, match=r"merging needs depthwise groups"):
        plan(SMALL, "sm_90", group_merge=2)


def test_split_k_beyond_k_steps_lists_every_refusal():
    with pytest.raises(NoCandidateError) as info:
        plan(SMALL, "sm_90", split_k=4)
    err = info.value
    assert isinstance(err, ValueError)
    message = str(err)
    assert "pins {'split_k': 4}" in message
    assert SMALL.describe() in message
    assert {spec.family for spec, _ in err.candidates} == {"wgrad_merged", "wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk", "wgrad_direct", "wgrad_staged",
                                                      "aten_channels_last", "aten"}
    for spec, verdict in err.candidates:
        assert not verdict
        assert spec.kernel_name() in message
        for reason in verdict.reasons:
            assert reason in message
    assert "exceeds the 1 block_k=64 steps of K_gemm=64" in message
    assert "exceeds the 2 block_k=32 steps of K_gemm=64" in message
    assert "aten computes dW in one call and cannot split K" in message


def test_aten_pinned_split_k_raises_with_aten_reason():
    with pytest.raises(NoCandidateError, match=r"split_k=2: aten computes dW in one call and cannot split K") as info:
        plan(MBV2, "sm_90", family="aten", split_k=2)
    assert [spec.family for spec, _ in info.value.candidates] == ["aten"]


@pytest.mark.parametrize("family", ["aten", "aten_channels_last"])
def test_a_tile_pinned_on_a_family_without_tiles_is_refused_not_dropped(family):
    """A tile pin reaches every candidate: one aten computes in a single call refuses it by name (it
    was once dropped silently, and the plan came back with tile=None)."""
    problem = attrs.evolve(MBV2, layout="contiguous")
    with pytest.raises(NoCandidateError, match="aten takes no tile"):
        plan(problem, "sm_90", family=family, tile=Tile(block_m=16, block_n=16, block_k=16))


@pytest.mark.parametrize("family, problem", [
    ("wgrad_splitk", MBV2), ("wgrad_merged", MBV2), ("wgrad_direct", MBV2),
    ("wgrad_shifted", attrs.evolve(MBV2, filter_size=(13, 13), padding=((6, 6), (6, 6)))),
])
def test_a_tile_not_of_powers_of_two_is_refused_by_arange_families(family, problem):
    """Tile takes any positive block_n / block_k (the staged family unrolls 14-column strips); the
    families whose kernels make tl.arange ranges of them refuse other sizes by name."""
    with pytest.raises(NoCandidateError, match=r"powers of two: block_n=14"):
        plan(problem, "sm_90", family=family, tile=Tile(block_m=16, block_n=14, block_k=16))


@pytest.mark.parametrize("pins, error, match", [
    (dict(splitk=2), TypeError, r"unknown pin\(s\) \['splitk'\]"),
    (dict(block_k=64), TypeError, r"unknown pin\(s\) \['block_k'\]"),
    (dict(family="cudnn"), ValueError, r"family='cudnn' is not registered; known: .*wgrad_splitk, wgrad_direct, wgrad_staged, aten_channels_last, aten"),
    (dict(split_k=0), ValueError, r"split_k=0: must be a positive int"),
    (dict(group_merge=-1), ValueError, r"group_merge=-1: must be a positive int"),
    (dict(tile=(16, 16, 16)), TypeError, r"tile pin must be a Tile"),
], ids=["misspelt", "not-a-pin", "family", "split_k", "group_merge", "tile"])
def test_bad_pins(pins, error, match):
    with pytest.raises(error, match=match):
        plan(MBV2, "sm_90", **pins)
    with pytest.raises(error, match=match):
        explain(MBV2, "sm_90", **pins)


def test_unknown_target_profile():
    with pytest.raises(ValueError, match=r"unknown target profile 'sm_1000'"):
        plan(MBV2, "sm_1000")


@pytest.mark.parametrize("target", [5, 0, True, 2.5, ["sm_90"]], ids=["int", "zero", "bool", "float", "list"])
def test_target_of_a_wrong_type_is_named(target):
    """Fuzzing, issue 9: plan(p, 5) asked torch for cuda:5 and raised 'Cannot access accelerator device'."""
    with pytest.raises(TypeError, match=r"^target must be a TargetInfo, a profile name \(sm_90, .*\), a torch.device "
                                        r"or a device string \(cuda, cpu\), or None; got " + re.escape(repr(target))):
        plan(MBV2, target)


@pytest.mark.parametrize("target, match", [
    ("cuda:x", r"^target='cuda:x' is not a device: "),
    pytest.param("cuda", r"^target='cuda': this process has no CUDA \(or ROCm\) device$",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this process has a GPU")),
    pytest.param(torch.device("cuda", 1), r"^target=device\(type='cuda', index=1\): this process has no CUDA",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this process has a GPU")),
])
def test_target_device_this_process_lacks_is_named(target, match):
    with pytest.raises(ValueError, match=match):
        plan(MBV2, target)


# --------------------------------------------------------------- CPU and interpreter
def test_cpu_without_interpreter_falls_back_to_aten(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert current_target("cpu").name == "cpu"
    assert not current_target("cpu").runs_triton
    for device in (torch.device("cpu"), "cpu", "cpu:0"):
        for problem in (MBV2, GROUPED):
            p = plan(problem, device)
            assert p.target.name == "cpu"
            assert p.family == "aten"
            assert p.rule.startswith("fallback")
            assert "wgrad_splitk" in p.rule


@pytest.mark.parametrize("value", ["0", ""])
def test_interpreter_off_values(monkeypatch, value):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert current_target("cpu").name == "cpu"


def test_cpu_with_interpreter_chooses_triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert current_target("cpu").name == "interpreter"
    assert current_target(torch.device("cpu")).backend == "interpreter"
    for device in (torch.device("cpu"), "cpu", "cpu:0"):
        p = plan(GROUPED, device)
        assert p.target.name == "interpreter"
        assert p.family == "wgrad_splitk"
        assert plan(MBV2, device).family == "wgrad_merged"
    # the env var is read at call time
    monkeypatch.delenv("TRITON_INTERPRET")
    assert plan(GROUPED, torch.device("cpu")).family == "aten"


def test_resolve_target():
    assert resolve_target("gfx950") is PROFILES["gfx950"]
    assert resolve_target(PROFILES["sm_90"]) is PROFILES["sm_90"]
    custom = TargetInfo(name="mine", backend="cuda", arch="80", compute_units=8)
    assert plan(MBV2, custom).target is custom


# --------------------------------------------------------------- explain
@pytest.mark.parametrize("target", ["sm_90", "gfx950", "cpu"])
@pytest.mark.parametrize("problem", [MBV2, GROUPED], ids=["depthwise", "grouped"])
def test_explain_lists_every_candidate(problem, target, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    exp = explain(problem, target)
    text = str(exp)
    lines = text.splitlines()
    judged = candidates(problem, target)
    assert sorted(exp.candidates, key=repr) == sorted(judged, key=repr)
    assert {spec.family for spec, _ in judged} == {"wgrad_merged", "wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk", "wgrad_direct", "wgrad_staged",
                                                      "aten_channels_last", "aten"}
    listed = lines[lines.index("candidates (by family priority):") + 1: lines.index(next(
        l for l in lines if l.startswith("choice:")))]
    assert len(listed) == len(judged)
    for spec, verdict in judged:
        line = next(l for l in listed if f" {spec.kernel_name()}: " in l)
        assert line.split(": ", 1)[1].startswith("admitted" if verdict else "refused: ")
    assert sum(l.startswith(" * ") for l in listed) == 1
    order = ["wgrad_merged", "wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk", "wgrad_direct", "wgrad_staged", "aten_channels_last", "aten"]
    ranks = [order.index(next(f for f in order if l[3:].startswith(f + "_"))) for l in listed]
    assert ranks == sorted(ranks)
    assert "\nchoice:  " + exp.plan.kernel_name in text
    assert "\nrule:    " + exp.plan.rule in text
    assert text.startswith("problem: " + problem.describe())
    assert exp.plan == plan(problem, target)


def test_explain_without_choice():
    exp = explain(SMALL, "sm_90", split_k=4)
    assert exp.plan is None
    text = str(exp)
    assert "choice:  none" in text
    assert "no kernel admits" in text
    for spec, verdict in exp.candidates:
        assert text.count(f"{spec.kernel_name()}: {verdict}") == 2  # in the list and again in the error


# --------------------------------------------------------------- targets
def test_profiles():
    gfx950 = PROFILES["gfx950"]
    assert (gfx950.compute_units, gfx950.l2_domains, gfx950.warp_size, gfx950.backend) == (256, 8, 64, "hip")
    sm90 = PROFILES["sm_90"]
    assert (sm90.compute_units, sm90.warp_size, sm90.backend, sm90.arch) == (132, 32, "cuda", "90")
    for info in PROFILES.values():
        assert info.max_grid == GRID_LIMITS == (2**31 - 1, 65535, 65535)
    assert PROFILES["interpreter"].runs_triton and not PROFILES["cpu"].runs_triton
    assert "8 L2 domains" in str(gfx950) and "warp 64" in str(gfx950)


def test_hip_probe_unavailable_here():
    result = hip_probe()
    assert isinstance(result, str) and result.startswith("unavailable:")
    assert hip_probe(7).startswith("unavailable:")


# --------------------------------------------------------------- grid limits
def test_grid_axis_over_limit_falls_back_to_aten():
    # N_gemm = cpg * 33 * 33 = 4096 * 1089 = 4_460_544; at block_n = 64 that is 69_696 tiles > 65_535 on axis 1
    big = ConvProblem.build(batch=1, groups=1, in_channels=4096, out_channels=16, input_size=(33, 33),
                            filter_size=33, dtype="bf16")
    assert big.gemm_n == 4_460_544
    assert -(-big.gemm_n // 64) > GRID_LIMITS[1]
    judged = candidates(big, "sm_90")
    splitk = [(s, v) for s, v in judged if s.family == "wgrad_splitk"]
    assert splitk and all(s.tile.block_n == 64 for s, _ in splitk)
    for spec, verdict in splitk:
        assert not verdict
        assert any(r.startswith("grid axis 1 = 69696 exceeds the limit 65535") for r in verdict.reasons)
    p = plan(big, "sm_90")
    assert p.family == "aten"
    assert p.rule.startswith("fallback")
    assert "grid axis 1 = 69696 exceeds the limit 65535 of sm_90" in str(explain(big, "sm_90"))


# --------------------------------------------------------------- repeatability
def test_plan_repeatedly():
    problem = ConvProblem.build(batch=16, groups=32, in_channels=32, input_size=(28, 28), filter_size=3,
                                padding=1, dtype="fp16", layout="channels_last")
    first = plan(problem, "sm_90")
    plans = [plan(problem, "sm_90") for _ in range(1000)]
    assert all(p == first for p in plans)
    assert len({hash(p.spec) for p in plans}) == 1


def test_no_candidate_error_pickles():
    """It crosses process boundaries (benchmark workers) intact."""
    with pytest.raises(NoCandidateError) as info:
        plan(SMALL, "sm_90", split_k=4)
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value)


def test_explanation_prints_the_same_outside_its_manager():
    from convwgrad.provider.hookspecs import hookimpl
    from convwgrad.provider.spec import Verdict

    class Late:
        @hookimpl
        def convwgrad_register_families(self, registry):
            registry.add("late", priority=50, description="only in this manager")

        @hookimpl
        def convwgrad_candidate_specs(self, problem, target):
            return [KernelSpec(family="late", dtype=problem.dtype)]

        @hookimpl
        def convwgrad_support(self, problem, spec, target):
            if spec.family == "late":
                return Verdict.refuse("late refuses everything")

    other = build_plugin_manager(load_entrypoints=False)
    other.register(Late())
    with use_plugin_manager(other):
        exp = explain(GROUPED, "gfx950")
        inside = str(exp)
    assert inside.splitlines()[4].startswith("   late_bf16")  # highest priority, listed first
    assert str(exp) == inside


@pytest.mark.parametrize("wanted,limit,down,expected", [
    (0.3, None, False, 1), (1, None, False, 1), (2.8, None, False, 2), (2.9, None, False, 4),  # ratio: 2.83 between
    (11, None, False, 8), (12, None, False, 16), (12, None, True, 8), (63.9, None, True, 32),
    (100, 64, False, 64), (100, 40, False, 32), (3, 0, False, 1), (6, 5, False, 4),
])
def test_pow2_nearest_by_ratio_within_the_limit(wanted, limit, down, expected):
    from convwgrad.provider.spec import pow2_nearest

    assert pow2_nearest(wanted, limit=limit, down=down) == expected
