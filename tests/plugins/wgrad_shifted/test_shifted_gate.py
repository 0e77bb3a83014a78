"""Host-side checks of the shifted-view family: the gate and its reasons, tiles, axes, routing."""

import itertools

import pytest
import torch

import convwgrad
from convwgrad.plugins import wgrad_shifted
from convwgrad.plugins.wgrad_shifted import launcher
from convwgrad.provider import PROFILES, ConvProblem, KernelSpec, NoCandidateError, Tile

FAMILY = "wgrad_shifted"
TARGETS = [PROFILES["sm_90"], PROFILES["gfx950"], PROFILES["interpreter"]]


def problem(groups=16, cpg=1, kpg=1, size=(14, 14), k=7, dtype="bf16", **kwargs):
    kwargs.setdefault("padding", k // 2 if isinstance(k, int) else tuple(f // 2 for f in k))
    return ConvProblem.build(batch=4, groups=groups, in_channels=groups * cpg, out_channels=groups * kpg,
                             input_size=size, filter_size=k, dtype=dtype, layout="channels_last", **kwargs)


PROBLEMS = [
    problem(), problem(k=31, size=(56, 56)), problem(k=13, size=(7, 7)), problem(kpg=2), problem(cpg=2),
    problem(size=(5, 5, 5), k=3), problem(size=(64,), k=31), problem(dtype="fp32"), problem(k=(1, 9)),
    problem(k=5, stride=2), problem(k=3, stride=5), problem(k=3, dilation=4, padding=4), problem(groups=7, k=9),
]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_gate_agrees_with_support_and_validation(target):
    pm = convwgrad.provider.get_plugin_manager()
    for p in PROBLEMS:
        for spec in wgrad_shifted.candidate_specs(p, target):
            gate = launcher.shifted_available(p, spec, target)
            verdict = pm.hook.convwgrad_support(problem=p, spec=spec, target=target)
            assert all(reason in verdict.reasons for reason in gate), (p.describe(), gate, verdict)
            if gate:
                with pytest.raises(ValueError, match="cannot run"):
                    launcher.validate(p, spec, target)
            else:
                launcher.validate(p, spec, target)


@pytest.mark.parametrize("case, reason", [
    (dict(cpg=2), "cpg=2: the shifted view computes one input channel per output channel"),
    (dict(size=(5, 5, 5), k=3), "spatial_dims=3 (filter_size=(3, 3, 3)): a depth shift is not implemented"),
    (dict(k=3, stride=5), "stride=5 along rows exceeds 4"),
    (dict(k=(1, 3), stride=(1, 5), padding=(0, 1)), "stride=5 along width exceeds 4"),
])
def test_refusals_name_field_and_value(case, reason):
    with pytest.raises(NoCandidateError) as info:
        convwgrad.plan(problem(**case), "sm_90", family=FAMILY)
    assert reason in str(info.value)


def test_fp32_needs_tf32_on_gpu_targets():
    p = problem(dtype="fp32")
    previous = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        with pytest.raises(NoCandidateError, match="dtype=fp32 on sm_90 without TF32"):
            convwgrad.plan(p, "sm_90", family=FAMILY)
        with pytest.raises(NoCandidateError, match="dtype=fp32 on gfx950 without TF32"):
            convwgrad.plan(p, "gfx950", family=FAMILY)
        torch.backends.cudnn.allow_tf32 = True
        chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
        assert chosen.spec.allow_tf32 and chosen.kernel_name.endswith("_tf32")
    finally:
        torch.backends.cudnn.allow_tf32 = previous


@pytest.mark.parametrize("case, gm, reason", [
    (dict(), 3, "group_merge=3: a channel block must be a power of two <= 16"),
    (dict(groups=64), 32, "group_merge=32: a channel block must be a power of two <= 16"),
    (dict(kpg=2), 2, "group_merge=2 with kpg=2: a channel block needs depthwise channels"),
    (dict(groups=12), 8, "group_merge=8 does not divide out_channels=12"),
])
def test_channel_blocks_refused_with_reasons(case, gm, reason):
    with pytest.raises(NoCandidateError, match=reason):
        convwgrad.plan(problem(**case), "sm_90", family=FAMILY, group_merge=gm)


def test_channel_block_offered_first_for_channels_last_only():
    specs = wgrad_shifted.candidate_specs(problem(k=31, size=(56, 56)), PROFILES["sm_90"])
    assert [s.group_merge for s in specs] == [8, 8, 1, 1, 1, 1]
    assert convwgrad.plan(problem(k=31, size=(56, 56)), "sm_90", family=FAMILY).group_merge == 8
    nchw = ConvProblem.build(batch=2, groups=16, in_channels=16, input_size=(9, 9), filter_size=5, padding=2,
                             dtype="bf16", layout="contiguous")
    assert {s.group_merge for s in wgrad_shifted.candidate_specs(nchw, PROFILES["sm_90"])} == {1}
    assert {s.group_merge for s in wgrad_shifted.candidate_specs(problem(groups=12), PROFILES["sm_90"])} == {1}


def test_targets_without_matrix_units_are_refused():
    spec = wgrad_shifted.candidate_specs(problem(), PROFILES["sm_90"])[0]
    assert any("no matrix units" in r for r in launcher.shifted_available(problem(), spec, PROFILES["cpu"]))


@pytest.mark.parametrize("tile, reason", [
    (Tile(block_m=128, block_n=16, block_k=64), "block_m=128 exceeds the family's largest block_m 64"),
    # block_n >= 128 selects the outer-product kernel (launcher.OUTER_MIN_BLOCK_N), whose largest is 256
    (Tile(block_m=16, block_n=512, block_k=64), "block_n=512 exceeds the family's largest block_n 256"),
    (Tile(block_m=16, block_n=16, block_k=256), "block_k=256 exceeds the family's largest block_k 128"),
    (Tile(block_m=8, block_n=16, block_k=64), "tl.dot needs tile dims >= 16: block_m=8"),
])
def test_oversized_or_undersized_tiles_are_refused(tile, reason):
    with pytest.raises(NoCandidateError, match=reason):
        convwgrad.plan(problem(), "sm_90", family=FAMILY, tile=tile)


def test_split_beyond_the_reduction_steps_is_refused():
    p = ConvProblem.build(batch=1, groups=2, in_channels=2, input_size=(7, 7), filter_size=3, padding=1,
                          dtype="bf16", layout="channels_last")
    tile = Tile(block_m=16, block_n=16, block_k=64)  # 7 rows of 7 -> 9 rows a step: 1 step
    assert launcher.tile_geometry(p, convwgrad.plan(p, "sm_90", family=FAMILY, tile=tile).spec).steps == 1
    with pytest.raises(NoCandidateError, match="split_k=2 exceeds the 1 reduction steps of block_k=64"):
        convwgrad.plan(p, "sm_90", family=FAMILY, tile=tile, split_k=2)


@pytest.mark.parametrize("p", [p for p in PROBLEMS if p.spatial_dims < 3 and p.cpg == 1], ids=lambda p: p.describe())
def test_offered_tiles_cover_the_filter_without_extra_ky_tiles(p):
    axes = launcher.kernel_axes(p)
    for spec in wgrad_shifted.candidate_specs(p, PROFILES["sm_90"]):
        geometry = launcher.tile_geometry(p, spec)
        assert geometry.kx_block * geometry.kx_tiles >= axes.columns.filter
        assert geometry.fold * spec.tile.block_n * geometry.ky_tiles >= axes.rows.filter
        assert geometry.ky_tiles == 1 or axes.rows.filter > wgrad_shifted.MAX_BLOCK_N * geometry.fold
        assert not any("exceeds the family's largest" in r for r in wgrad_shifted.not_supported_reasons(
            p, spec, PROFILES["sm_90"]))


def test_tile_shapes_for_replknet_layers():
    """31x31: 32 x 32 unfolded, or kx 32 x 2 folds = 64 rows over 16 ky columns; 13x13: 16 x 16, or
    4 folds of 16 kx over 4 ky (a 16-column minimum); 1-D k=31: 16 folds of one column."""
    assert wgrad_shifted.tile_shapes(problem(k=31, size=(56, 56))) == [(32, 32), (64, 16)]
    assert wgrad_shifted.tile_shapes(problem(k=13, size=(7, 7))) == [(16, 16), (64, 16)]
    assert wgrad_shifted.tile_shapes(problem(k=31, size=(64,))) == [(16, 16), (64, 16)]


def test_axes_map_1d_and_1xk_to_rows():
    assert launcher.kernel_axes(problem(size=(64,), k=31)).columns == launcher.DUMMY
    axes = launcher.kernel_axes(problem(k=(1, 9), size=(6, 20)))
    assert axes.swapped and (axes.rows.filter, axes.rows.size, axes.columns.filter) == (9, 20, 1)


def test_routed_only_where_measured():
    """Opt-in: never chosen by priority (merged and split-K keep what they had); the router gives
    it a problem only in the class measured faster on CUDA, with that rule; a pin runs it anywhere."""
    from convwgrad.selectors.routing import opt_in_measured_faster

    routed = 0
    for p, target in itertools.product(PROBLEMS, ["sm_90", "gfx950", "interpreter"]):
        chosen = convwgrad.plan(p, target)
        if opt_in_measured_faster(p, PROFILES[target], FAMILY):
            assert target == "sm_90" and chosen.rule.startswith("measured:"), chosen.rule
            routed += chosen.family == FAMILY
        else:
            assert chosen.family != FAMILY
    assert routed  # the class is not empty among these problems
    odd = problem(groups=7, k=9)  # merged refuses 7 groups; before this family, split-K or aten took it
    assert convwgrad.plan(odd, "gfx950").family == "wgrad_splitk"
    pinned = convwgrad.plan(odd, "gfx950", family=FAMILY)
    assert pinned.family == FAMILY and pinned.rule.startswith("pinned: wgrad_shifted is opt-in, routed only where measured faster")


def test_explain_lists_the_family_and_its_layout_note():
    text = str(convwgrad.explain(problem(k=31, size=(56, 56)), "sm_90", family=FAMILY))
    assert "wgrad_shifted_bf16_m32n32k64" in text and "loads are element-wide, strided by C" in text
    assert "wgrad_shifted_bf16_m32n32k16w4s1_spk" in text and "_gm8" in text  # 1 stage: measured faster


def _full(batch, channels, size, k, stride=1):
    return ConvProblem.build(batch=batch, groups=channels, in_channels=channels, out_channels=channels,
                             input_size=size, filter_size=k, stride=stride, padding=k // 2, dtype="bf16",
                             layout="channels_last")


@pytest.mark.parametrize("p, expected", [
    # 31x31 s2 on a 4x4 output plane, C=120: 15 programs unsplit, so 4 a unit of the H100's 132 asks for ~35;
    # the busiest tile has 64 steps, and 32 is the nearest power of two (the shared policy chose 4: 2x slower)
    (_full(32, 120, (7, 7), 31, stride=2), 32),
    # C=1536 31x31 s2, 7x7 plane: 192 programs (~2.75 splits) but 224 steps, ~7 a split of 32 -> 8
    (_full(32, 1536, (14, 14), 31, stride=2), 8),
    # 31x31 112x112 C1024 N=8: 6272 steps want 196 splits; 64 MiB of partials hold 16 of this dW
    (_full(8, 1024, (112, 112), 31), 16),
], ids=["small-plane", "many-channels", "workspace-bound"])
def test_split_policy_fills_the_units_and_bounds_steps_and_workspace(p, expected):
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    assert chosen.split_k == expected, chosen.spec
    steps = launcher.tile_geometry(p, chosen.spec).steps
    assert chosen.split_k <= min(steps, launcher.MAX_POLICY_SPLIT)  # never an empty split, never unmeasured
    assert chosen.split_k * p.weight_size[0] * p.weight_size[2] * p.weight_size[3] * 4 <= launcher.MAX_SPLIT_WORKSPACE_BYTES


def test_split_pins_still_override_the_policy():
    p = _full(32, 120, (7, 7), 31, stride=2)
    assert convwgrad.plan(p, "sm_90", family=FAMILY, split_k=2).split_k == 2


def test_small_layer_host_rule_holds_for_eager_calls_only():
    """Below routing.MIN_TRITON_MACS an eager call stays with cuDNN (the patched layer's host time); replayed
    from a CUDA graph it costs none, and the family measured faster in kernel time takes it."""
    from convwgrad.provider.target import launched
    from convwgrad.selectors.routing import MIN_TRITON_MACS

    small = ConvProblem.build(batch=32, groups=32, in_channels=32, input_size=(7, 7), filter_size=11, padding=5,
                              dtype="bf16", layout="channels_last")   # rand-083: shifted 5.35x cuDNN in kernel time
    assert small.flops // 2 < MIN_TRITON_MACS
    eager = convwgrad.plan(small, PROFILES["sm_90"])
    assert eager.family == "aten" and "below" in eager.rule, eager.rule
    graph = convwgrad.plan(small, launched(PROFILES["sm_90"], "graph"))
    assert graph.family == FAMILY and graph.rule.startswith("measured:"), graph.rule
