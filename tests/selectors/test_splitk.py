"""The split-K policy: waves of resident programs, groups-aware, clamp first, then L2-domain snap."""

import attrs
import pytest

from convwgrad.provider import PROFILES, ConvProblem, KernelSpec, Tile, plan
from convwgrad.selectors.splitk import (
    MAX_BLOCKS_PER_SPLIT,
    MIN_BLOCKS_PER_SPLIT,
    SPLIT_LADDER,
    TARGET_WAVES,
    cap,
    choose_split_k,
    on_ladder,
    snap,
    wanted,
    wave_programs,
)

TILE = Tile(block_m=16, block_n=16, block_k=64)


def spec(group_merge=1):
    return KernelSpec(family="wgrad_splitk", dtype="bf16", tile=TILE, group_merge=group_merge)


def depthwise(channels, hw, batch=32):
    return ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(hw, hw),
                             filter_size=3, padding=1)


def test_wave_is_compute_units_times_resident_programs():
    assert wave_programs(spec(), PROFILES["sm_90"]) == 132 * (64 // 4)
    assert wave_programs(spec(), PROFILES["gfx950"]) == 256 * (32 // 4)


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_small_grid_is_split_to_the_target_waves(target):
    t = PROFILES[target]
    p = depthwise(32, 56)  # base grid: 32 programs
    split = choose_split_k(p, spec(), t, 32)
    assert split * 32 >= TARGET_WAVES * wave_programs(spec(), t)
    assert (split * 32) % t.l2_domains == 0


def test_long_reduction_under_a_wave_is_split_to_bounded_slices():
    t = PROFILES["sm_90"]
    p = depthwise(64, 112)  # K_gemm = 32 * 112 * 112: 6272 steps of 64
    steps = -(-p.gemm_k // TILE.block_k)
    few_programs = wave_programs(spec(), t) // 2
    assert wanted(spec(), t, few_programs, steps) == -(-steps // MAX_BLOCKS_PER_SPLIT)
    # a base grid of a full wave or more gets no split for the reduction's length alone
    assert wanted(spec(), t, wave_programs(spec(), t), steps) == 1


def test_grouped_problem_with_one_tile_does_not_ask_for_hundreds_of_slices():
    t = PROFILES["sm_90"]
    p = ConvProblem.build(batch=32, groups=1024, in_channels=1024, input_size=(14, 14), filter_size=3, padding=1)
    assert choose_split_k(p, spec(), t, base_programs=1024) <= 4
    # a long reduction splits only as far as MAX_BLOCKS_PER_SPLIT asks, on the ladder: tens, not hundreds
    p = ConvProblem.build(batch=32, groups=1024, in_channels=1024, input_size=(56, 56), filter_size=3, padding=1)
    steps = -(-p.gemm_k // TILE.block_k)
    assert -(-steps // MAX_BLOCKS_PER_SPLIT) == 49
    assert choose_split_k(p, spec(), t, base_programs=1024) == max(SPLIT_LADDER) == 32


def test_on_ladder_rounds_by_ratio_within_the_cap():
    assert on_ladder(49, limit=1000) == 32
    assert on_ladder(7, limit=1000) == 4 and on_ladder(9, limit=1000) == 16  # 8 is nearer 4 and 16 alike: ratio 2
    assert on_ladder(2, limit=1000) in (1, 4) and on_ladder(3, limit=1000) == 4
    assert on_ladder(16, limit=10) == 4  # 16 is over the cap
    assert on_ladder(3, limit=3) == 1  # below the ladder's second step: no split rather than an illegal one
    assert choose_split_k(depthwise(4096, 56), spec(), PROFILES["sm_90"], 4096) == 1


def test_shallow_k_caps_the_split():
    t = PROFILES["gfx950"]
    p = depthwise(8, 4, batch=1)  # K_gemm = 16: one 64-wide step
    assert choose_split_k(p, spec(), t, 8) == 1
    p = depthwise(8, 16, batch=4)  # K_gemm = 1024: 16 steps -> at most 16 / MIN_BLOCKS_PER_SPLIT
    assert cap(p, spec(), t) == 16 // MIN_BLOCKS_PER_SPLIT
    assert choose_split_k(p, spec(), t, 8) == 16 // MIN_BLOCKS_PER_SPLIT


def test_large_group_count_against_the_grid_limit():
    small_grid = attrs.evolve(PROFILES["sm_90"], max_grid=(1000, 65535, 65535))
    p = depthwise(300, 56)
    assert cap(p, spec(), small_grid) == 1000 // 300
    assert choose_split_k(p, spec(), small_grid, 300) * 300 <= 1000
    merged = spec(group_merge=4)  # the group axis holds G / Gm programs
    assert cap(p, merged, small_grid) == 1000 // 75


def test_clamp_first_then_snap():
    # wanted 100 over a cap of 20, odd base, 8 domains: step 8; 24 is over the cap, so 16.
    assert snap(min(100, 20), base_programs=3, domains=8, limit=20) == 16
    # a cap below one full step keeps the legal unsnapped degree
    assert snap(min(100, 5), base_programs=3, domains=8, limit=5) == 5
    # an even base needs a smaller step: gcd(18, 8) = 2 -> multiples of 4
    assert snap(9, base_programs=18, domains=8, limit=64) == 12
    # one domain: nothing to snap
    assert snap(9, base_programs=3, domains=1, limit=64) == 9


def test_dense_problem_keeps_the_plain_formula():
    t = PROFILES["gfx950"]
    dense = ConvProblem.build(batch=32, groups=1, in_channels=64, out_channels=64, input_size=(28, 28),
                              filter_size=3, padding=1)
    base = 3
    steps = -(-dense.gemm_k // TILE.block_k)
    limit = cap(dense, spec(), t)
    expected = on_ladder(min(wanted(spec(), t, base, steps), limit), limit)
    assert choose_split_k(dense, spec(), t, base) == expected


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
    chosen = plan(large_filter, "sm_90")  # measured: shifted 455 us, merged 3143, cuDNN 8085 at N=16
    assert chosen.family == "wgrad_shifted" and chosen.rule.startswith("measured: wgrad_shifted is faster")
    assert chosen.spec.group_merge == 8 and chosen.spec.tile.num_stages == 1  # the measured fastest tile
    nchw = attrs.evolve(large_filter, layout="contiguous")
    assert plan(nchw, "sm_90").family == "wgrad_shifted" and plan(nchw, "sm_90").spec.group_merge == 1
    assert plan(large_filter, "gfx950").family == "wgrad_merged"  # nothing measured there
    assert plan(large_filter, "interpreter").family == "wgrad_merged"
    assert plan(attrs.evolve(large_filter, dtype="fp32"), "sm_90").family != "wgrad_shifted"  # not measured
    eleven = ConvProblem.build(batch=32, groups=128, in_channels=128, input_size=(56, 56), filter_size=11,
                               padding=5, layout="channels_last")
    chosen = plan(eleven, "sm_90")  # bf16 channels_last 9x9-11x11: the in-sample random shapes (session 18)
    assert chosen.family == "wgrad_shifted" and "in-sample random shapes" in chosen.rule, chosen.rule
    assert plan(attrs.evolve(eleven, dtype="fp16"), "sm_90").family == "wgrad_merged"  # fp16 not measured there
    assert plan(attrs.evolve(eleven, layout="contiguous"), "sm_90").family == "wgrad_merged"  # nor NCHW
    seven = ConvProblem.build(batch=32, groups=128, in_channels=128, input_size=(56, 56), filter_size=7,
                              padding=3, layout="channels_last")
    assert plan(seven, "sm_90").family != "wgrad_shifted"  # below the smallest filter measured (9x9)
    odd_channels = ConvProblem.build(batch=32, groups=100, in_channels=100, input_size=(56, 56), filter_size=31,
                                     padding=15, layout="channels_last")
    chosen = plan(odd_channels, "sm_90")  # element loads: measured on the fitting set (session 19)
    assert chosen.family in ("wgrad_shifted", "wgrad_shifted_mma"), chosen.rule
    assert chosen.family == "wgrad_shifted_mma" or "C=100 not a multiple of 8" in chosen.rule, chosen.rule
    odd_seven = attrs.evolve(odd_channels, filter_size=(7, 7), padding=((3, 3), (3, 3)))
    assert plan(odd_seven, "sm_90").family != "wgrad_shifted"  # odd channels below 9x9: not measured
    conv1d = ConvProblem.build(batch=32, groups=256, in_channels=256, input_size=(512,), filter_size=31, padding=15)
    assert plan(conv1d, "sm_90").family == "wgrad_merged"
    grouped = ConvProblem.build(batch=32, groups=32, in_channels=128, input_size=(28, 28), filter_size=3, padding=1)
    assert plan(grouped, "sm_90").family == "aten"  # split-K measured slower on CUDA
    dilated = ConvProblem.build(batch=32, groups=384, in_channels=384, input_size=(14, 14), filter_size=3,
                                padding=3, dilation=3, layout="channels_last")
    chosen = plan(dilated, "sm_90")  # merged's kernel is faster, the patched layer as a whole was not
    assert chosen.family == "aten" and "dilated layer measured slower" in chosen.rule
    assert plan(dilated, "gfx950").family == "wgrad_merged"
    small = ConvProblem.build(batch=1, groups=640, in_channels=640, input_size=(7, 7), filter_size=13,
                              padding=6, layout="channels_last")
    chosen = plan(small, "sm_90")  # 5.3e6 MACs: saves less kernel time than it costs host time
    assert chosen.family == "aten" and "below 1.2e+07" in chosen.rule
    assert plan(small, "gfx950").family == "wgrad_merged"  # measured on CUDA only
    unaligned = ConvProblem.build(batch=32, groups=40, in_channels=40, input_size=(112, 112), filter_size=11,
                                  padding=5, layout="channels_last", dtype="fp16")  # fp16: not the shifted family's class
    chosen = plan(unaligned, "sm_90")
    assert chosen.family == "aten" and "C=40 not a multiple of 16" in chosen.rule
    assert plan(attrs.evolve(unaligned, dtype="bf16"), "sm_90").family == "wgrad_shifted"  # C % 8 == 0: measured
    on_amd = plan(small_filter, "gfx950")
    assert on_amd.family == "wgrad_merged" and on_amd.rule.startswith("priority:")
    pinned = plan(small_filter, "sm_90", family="wgrad_merged")
    assert pinned.family == "wgrad_merged"


@pytest.fixture(autouse=True)
def _without_the_shifted_mma_family(monkeypatch):
    """These rules are the Triton families' and cuDNN's: the shifted-MMA family (CUDA C++, admitted only where
    cuda-bindings is installed, as on the GPU machine) takes some of their layers there, and its class is
    tests/plugins/wgrad_shifted_mma/test_shifted_mma_gate.py's. Refused here as on CI."""
    from convwgrad.plugins.wgrad_shifted_mma import launcher
    from convwgrad.provider.plan import clear_plan_cache

    monkeypatch.setattr(launcher, "_bindings", lambda: (None, "cuda-bindings left out by this test module"))
    clear_plan_cache()
    yield
    monkeypatch.undo()
    clear_plan_cache()


def unireplknet_dilated(batch, size, channels, k, dilation, dtype="bf16", layout="channels_last"):
    return ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(size, size),
                             filter_size=k, padding=dilation * (k // 2), dilation=dilation, dtype=dtype, layout=layout)


@pytest.mark.parametrize("batch, size, channels, k, dilation, expected", [
    (128, 28, 160, 7, 2, "wgrad_shifted"),  # 7.9e8 MACs: measured 5.4x cuDNN, the N=128 step faster
    (128, 14, 320, 7, 2, "wgrad_shifted"),  # 3.9e8
    (128, 7, 640, 7, 2, "aten"),            # 2.0e8: below the bound
    (32, 28, 160, 7, 2, "aten"),            # 2.0e8: N=32's host-bound step lost with it routed
    (128, 28, 160, 3, 3, "wgrad_merged"),   # 3x3 d3, 1.4e8: merged 3.8-5.5x cuDNN, the N=128 step 1.30x
    (128, 14, 320, 3, 4, "wgrad_merged"),   # 7.2e7
    (128, 7, 640, 3, 5, "aten"),            # 3.6e7: below DILATED_MERGED_FROM_MACS
    (32, 28, 160, 3, 3, "aten"),            # 3.6e7: N=32's branches stay with cuDNN
    (512, 28, 160, 3, 3, "wgrad_merged"),   # 5.8e8, 9 taps: merged, not shifted (1.2-1.5x shifted there)
    (128, 28, 160, 5, 1, "aten"),           # undilated 5x5: cuDNN's class
])
def test_dilated_depthwise_routing_follows_the_model_measurement(batch, size, channels, k, dilation, expected):
    chosen = plan(unireplknet_dilated(batch, size, channels, k, dilation), "sm_90")
    assert chosen.family == expected, chosen.rule
    if expected == "wgrad_shifted":
        assert "dilated 2-D depthwise filters of >= 49 taps" in chosen.rule
    if expected == "wgrad_merged":
        assert "dilated 2-D depthwise below 49 taps" in chosen.rule


def test_small_dilated_merged_class_is_measured_bf16_channels_last_on_cuda_only():
    from convwgrad.selectors.routing import DILATED_MERGED_FROM_MACS

    per_sample = 160 * 28 * 28 * 9
    at = unireplknet_dilated(DILATED_MERGED_FROM_MACS // per_sample + 1, 28, 160, 3, 3)
    below = attrs.evolve(at, batch=at.batch - 1)
    assert at.flops // 2 >= DILATED_MERGED_FROM_MACS > below.flops // 2
    assert plan(at, "sm_90").family == "wgrad_merged" and plan(below, "sm_90").family == "aten"
    for problem in (attrs.evolve(at, dtype="fp16"), attrs.evolve(at, dtype="fp32"),
                    attrs.evolve(at, layout="contiguous")):
        assert plan(problem, "sm_90").family == "aten", problem.describe()
    one_d = ConvProblem.build(batch=128, groups=160, in_channels=160, input_size=(784,), filter_size=3, padding=3,
                              dilation=3, dtype="bf16", layout="channels_last")  # 1-D: merged by priority, no note
    assert "UniRepLKNet-T" not in plan(one_d, "sm_90").rule
    assert "UniRepLKNet-T" not in plan(at, "gfx950").rule  # measured on CUDA


def test_small_dilated_rule_matches_the_measured_experiment():
    """The rule gives merged exactly the layers tools/route_experiments.py:small_dilated_to_merged gave it
    in the measured UniRepLKNet-T runs (bf16 channels_last, N = 32 and 128)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "tools" / "route_experiments.py"
    spec = importlib.util.spec_from_file_location("route_experiments", path)
    experiments = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiments)
    applies = experiments.small_dilated_to_merged.applies
    for batch in (32, 128):
        for size, channels in ((56, 80), (28, 160), (14, 320), (7, 640)):
            for k, dilation in ((3, 3), (3, 4), (3, 5), (5, 2), (7, 2)):
                problem = unireplknet_dilated(batch, size, channels, k, dilation)
                if plan(problem, "sm_90").family == "wgrad_shifted":
                    continue  # the built-in 7x7 d2 rule, which the experiment ran on top of
                routed = plan(problem, "sm_90").family == "wgrad_merged"
                assert routed == applies(problem), problem.describe()


@pytest.mark.parametrize("batch, size, channels, k, stride, expected", [
    (64, 56, 96, 7, 1, "aten_channels_last"),    # ConvNeXt-T: 4.36x torch's NCHW path
    (64, 7, 768, 7, 1, "aten_channels_last"),    # 1.2e8: 8.96x, the smallest measured
    (128, 28, 240, 5, 1, "aten_channels_last"),  # EfficientNet-B0: 2.33x
    (128, 56, 144, 3, 1, "aten"),                # 3x3: 1.17x, not routed
    (128, 112, 96, 3, 2, "aten"),                # 3x3 stride 2: 0.59x
    (128, 14, 672, 5, 2, "aten"),                # stride 2: not measured
    (8, 14, 672, 5, 1, "aten"),                  # 2.6e7: below RELAYOUT_FROM_MACS
    (32, 56, 128, 9, 1, "wgrad_merged"),         # 9x9: not measured for the copies; merged by priority
])
def test_nchw_relayout_routing_follows_the_measurement(batch, size, channels, k, stride, expected):
    problem = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(size, size),
                                filter_size=k, padding=k // 2, stride=stride, dtype="bf16", layout="contiguous")
    chosen = plan(problem, "sm_90")
    assert chosen.family == expected, chosen.rule
    if expected == "aten_channels_last":
        assert "copied to channels_last for cuDNN" in chosen.rule
        for other in (attrs.evolve(problem, dtype="fp16"), attrs.evolve(problem, dtype="fp32"),
                      attrs.evolve(problem, layout="channels_last")):
            assert plan(other, "sm_90").family != "aten_channels_last", other.describe()
        assert plan(problem, "gfx950").family != "aten_channels_last"


def test_dilated_shifted_bound_splits_adjacent_batches():
    from convwgrad.selectors.routing import DILATED_SHIFTED_FROM_MACS

    per_sample = 160 * 28 * 28 * 49  # multiply-adds a sample of the 28x28 C160 7x7 d2 branch
    at = ConvProblem.build(batch=DILATED_SHIFTED_FROM_MACS // per_sample + 1, groups=160, in_channels=160,
                           input_size=(28, 28), filter_size=7, padding=6, dilation=2, dtype="bf16",
                           layout="channels_last")
    below = attrs.evolve(at, batch=at.batch - 1)
    assert at.flops // 2 >= DILATED_SHIFTED_FROM_MACS > below.flops // 2
    assert plan(at, "sm_90").family == "wgrad_shifted" and plan(below, "sm_90").family == "aten"


def test_dilated_shifted_class_is_measured_bf16_channels_last_on_cuda_only():
    for problem in (unireplknet_dilated(128, 28, 160, 7, 2, dtype="fp32"),
                    unireplknet_dilated(128, 28, 160, 7, 2, dtype="fp16"),
                    unireplknet_dilated(128, 28, 160, 7, 2, layout="contiguous"),
                    unireplknet_dilated(128, 28, 100, 7, 2)):  # C % 8: the channel blocks do not fit
        assert plan(problem, "sm_90").family != "wgrad_shifted", problem.describe()
    assert plan(unireplknet_dilated(128, 28, 160, 7, 2), "gfx950").family == "wgrad_merged"


@pytest.mark.parametrize("channels, k, expected", [
    (144, 3, 16),   # 32 would fill the tiles better, but does not divide 144
    (96, 3, 32),    # 9 taps: 288 of 384 columns real at 32, 144 of 256 at 16
    (96, 13, 16),   # 13x13: both fill > 0.95, so 16, the matrix unit's minimum M
    (1024, 31, 16),
    (116, 3, 4), (58, 3, 2), (40, 13, 8),
])
def test_merge_degree_prefers_16_and_32_where_it_fills_the_tiles(channels, k, expected):
    problem = ConvProblem.build(batch=32, groups=channels, in_channels=channels, input_size=(14, 14),
                                filter_size=k, padding=k // 2)
    chosen = plan(problem, "gfx950", family="wgrad_merged")
    assert chosen.group_merge == expected


def test_staged_graph_class_eager_experiment_takes_the_graph_route_class():
    """tools/route_experiments.py:staged_graph_class_eager gives eager calls the layers the router gives the
    staged family for graph launches, and no others (the experiment session 21 timed in eager steps)."""
    import importlib.util
    import pathlib

    from convwgrad.provider.target import PROFILES, launched

    path = pathlib.Path(__file__).parents[2] / "tools" / "route_experiments.py"
    spec = importlib.util.spec_from_file_location("route_experiments", path)
    experiments = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiments)
    applies = experiments.staged_graph_class_eager.applies
    graph = launched(PROFILES["sm_90"], "graph")
    seen = set()
    for size, channels, k, stride in ((112, 32, 3, 1), (56, 144, 3, 2), (14, 672, 5, 2), (56, 96, 7, 1),
                                      (7, 768, 7, 1), (7, 960, 3, 1), (56, 96, 9, 1), (28, 160, 13, 1)):
        problem = ConvProblem.build(batch=128, groups=channels, in_channels=channels, input_size=(size, size),
                                    filter_size=k, stride=stride, padding=k // 2, dtype="bf16", layout="channels_last")
        staged_for_graphs = plan(problem, graph).family == "wgrad_staged"  # 9x9: the eager route's too
        assert applies(problem) == staged_for_graphs, problem.describe()
        seen.add(staged_for_graphs)
        if k <= 7:
            assert plan(problem, "sm_90").family != "wgrad_staged"  # the built-in eager route keeps cuDNN
    assert seen == {True, False}
