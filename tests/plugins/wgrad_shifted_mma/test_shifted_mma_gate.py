"""The shifted-MMA family's gate, split policy, routing rule and CUDA source, on the CPU (its kernel
is CUDA C++ built by NVRTC and runs on a CUDA GPU only: tests/plugins/wgrad_shifted_mma/
test_shifted_mma_gpu.py runs it)."""

import math
import re
import shutil
import subprocess

import attrs
import pytest

import convwgrad
from convwgrad.plugins.wgrad_shifted_mma import launcher
from convwgrad.provider import ConvProblem
from convwgrad.provider.problem import LAYOUTS
from convwgrad.provider.plan import NoCandidateError, clear_plan_cache
from convwgrad.selectors import routing

FAMILY = "wgrad_shifted_mma"
REPLKNET = dict(batch=32, groups=128, in_channels=128, input_size=(56, 56), filter_size=31, padding=15)


def _problem(dtype="bf16", layout="contiguous", **overrides):
    return ConvProblem.build(**{**REPLKNET, **overrides}, dtype=dtype, layout=layout)


def _set_bindings(monkeypatch, found):
    monkeypatch.setattr(launcher, "_bindings", lambda: found)
    clear_plan_cache()  # plans are cached per problem and target, not per installed package


@pytest.fixture
def bindings(monkeypatch):
    """cuda-bindings as if installed (CI has none): the gate's other reasons are what is tested."""
    _set_bindings(monkeypatch, ((object(), object()), None))
    yield
    monkeypatch.undo()
    clear_plan_cache()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [
    REPLKNET,
    dict(batch=3, groups=5, in_channels=5, input_size=(17, 23), filter_size=13, padding=6),
    dict(batch=1, groups=7, in_channels=7, input_size=(64, 64), filter_size=32, padding=0),
    dict(batch=5, groups=9, in_channels=9, input_size=(9, 11), filter_size=(7, 3), padding=((3, 1), (0, 2))),
    dict(batch=4, groups=320, in_channels=320, input_size=(14, 14), filter_size=7, padding=6, dilation=2),
    dict(batch=4, groups=64, in_channels=64, input_size=(7, 7), filter_size=3, padding=5, dilation=5),
    dict(batch=3, groups=8, in_channels=8, input_size=(40, 20), filter_size=(2, 17), padding=((31, 0), (8, 8)),
         dilation=(31, 1)),   # the ring's limit: 31 rows above a step's (32 x 32 tile, undilated columns)
    dict(batch=2, groups=4, in_channels=4, input_size=(5, 64), filter_size=(3, 13), padding=((1, 1), (48, 48)),
         dilation=(1, 8)),    # the staged copy's limit: reads to column 64 + 8 x 12 = 160
], ids=["replknet-31", "odd-13", "k32-valid", "asym", "unirep-k7-d2", "unirep-k3-d5", "span-31", "row-reach-160"])
def test_admitted_with_every_split_holding_images(shape, dtype, layout, bindings):
    p = ConvProblem.build(**shape, dtype=dtype, layout=layout)
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    spec = chosen.spec
    assert spec.family == FAMILY and chosen.two_stage and spec.split_k >= 2
    per = launcher.images_per_split(p, spec)
    assert per * spec.split_k >= p.batch and per * (spec.split_k - 1) < max(p.batch, 2), (spec.split_k, per)
    assert chosen.grid[0] == (math.ceil(p.out_channels / launcher.WARPS), spec.split_k, 1)
    assert chosen.workspace_nbytes == spec.split_k * math.prod(p.weight_size) * 4


@pytest.mark.parametrize("overrides, reason", [
    (dict(dtype="fp32"), "dtype=fp32"),
    (dict(stride=2), "stride=(2, 2): stride 1 only"),
    (dict(dilation=2, padding=30), "dilation=(2, 2), filter_size=(31, 31): the filter spans 2 x (31 - 1) = 60"),
    # 17 rows of dilation 2 span 32 rows above a step's: the ring holds 31 and the next step's row
    (dict(filter_size=17, dilation=2, padding=16), "dilation=(2, 2), filter_size=(17, 17): the filter spans 2 x (17 "
                                                   "- 1) = 32 grad_output rows"),
    (dict(input_size=(20, 40), filter_size=(3, 17), dilation=(1, 2), padding=((1, 1), (16, 16))),
     "dilation=(1, 2), filter_size=(3, 17): a column dilation above 1 runs on the 16 x 16 tap tile only"),
    (dict(input_size=(8, 64), filter_size=(3, 15), dilation=(1, 7), padding=((1, 1), (49, 49))),
     "dilation=(1, 7), filter_size=(3, 15), output width 64: the row reads reach column 64 + 7 x (15 - 1) = 162"),
    (dict(filter_size=33, padding=16), "filter_size=(33, 33)"),
    (dict(input_size=(56, 65)), "input width 65"),
    (dict(groups=64, in_channels=128), "cpg=2"),
    (dict(input_size=(8, 8, 8), filter_size=3, padding=1), "spatial_dims=3"),
    (dict(padding=((40, 0), (15, 15))), "padding top=40"),
])
def test_refused_with_the_field_and_value(overrides, reason, bindings):
    kwargs = {**REPLKNET, **overrides}
    dtype, layout = kwargs.pop("dtype", "bf16"), kwargs.pop("layout", "contiguous")
    p = ConvProblem.build(**kwargs, dtype=dtype, layout=layout)
    with pytest.raises(NoCandidateError, match=re.escape(reason)):
        convwgrad.plan(p, "sm_90", family=FAMILY)


def test_refused_off_cuda_and_without_bindings_and_with_one_split(monkeypatch, bindings):
    p = _problem()
    for target, reason in (("gfx950", "no gfx950 port"), ("cpu", "CUDA C\\+\\+")):
        with pytest.raises(NoCandidateError, match=reason):
            convwgrad.plan(p, target, family=FAMILY)
    with pytest.raises(NoCandidateError, match="split_k=1: the kernel writes fp32 partials"):
        convwgrad.plan(p, "sm_90", family=FAMILY, split_k=1)
    _set_bindings(monkeypatch, (None, "cuda-bindings is not importable (test)"))
    with pytest.raises(NoCandidateError, match="cuda-bindings is not importable"):
        convwgrad.plan(p, "sm_90", family=FAMILY)


@pytest.mark.parametrize("overrides, routed", [
    ({}, True),
    (dict(input_size=(28, 28), filter_size=29, padding=14, groups=256, in_channels=256), True),
    (dict(input_size=(14, 14), filter_size=13, padding=6, groups=320, in_channels=320), True),
    (dict(input_size=(7, 7), filter_size=13, padding=6, groups=1024, in_channels=1024), False),  # measured slower
    (dict(filter_size=11, padding=5), False),   # below the measured taps
    (dict(dtype="fp16"), False),                 # not timed
    (dict(layout="channels_last"), True),
    (dict(input_size=(14, 14), filter_size=27, padding=13, groups=512, in_channels=512, layout="channels_last"), True),
    # 11x11-13x13 channels_last: fastest on the in-sample random shapes (session 18, H100)
    (dict(input_size=(14, 14), filter_size=13, padding=6, groups=320, in_channels=320, layout="channels_last"), True),
    (dict(filter_size=25, padding=12, layout="channels_last"), True),
    (dict(filter_size=7, padding=3, layout="channels_last"), False),   # below the channels_last taps measured
    # 9x9 channels_last with a channel count the staged family refuses (the fitting set, session 19)
    (dict(filter_size=9, padding=4, groups=137, in_channels=137, layout="channels_last"), True),
    # channels_last rows narrower than 14 (the narrow-plane fitting set, session 21): C not a multiple of 8
    # from 9x9 on planes of 7 and up; aligned C only at 11x11+ on 13 columns and 31x31 on 10+
    (dict(input_size=(7, 7), groups=565, in_channels=565, layout="channels_last"), True),
    (dict(input_size=(7, 7), filter_size=9, padding=4, groups=863, in_channels=863, layout="channels_last"), True),
    (dict(input_size=(6, 6), filter_size=9, padding=4, groups=863, in_channels=863, layout="channels_last"), False),
    (dict(input_size=(7, 7), groups=565, in_channels=565), False),   # NCHW narrow rows: measured slower
    (dict(input_size=(7, 7), filter_size=13, padding=6, groups=1024, in_channels=1024, layout="channels_last"), False),
    (dict(input_size=(13, 13), filter_size=11, padding=5, groups=576, in_channels=576, layout="channels_last"), True),
    (dict(input_size=(13, 13), filter_size=9, padding=4, groups=576, in_channels=576, layout="channels_last"), False),
    (dict(input_size=(10, 10), filter_size=13, padding=6, groups=480, in_channels=480, layout="channels_last"), False),
    (dict(input_size=(10, 10), groups=1536, in_channels=1536, layout="channels_last"), True),
])
def test_routed_only_on_its_measured_class(overrides, routed, bindings):
    kwargs = {**REPLKNET, **overrides}
    dtype, layout = kwargs.pop("dtype", "bf16"), kwargs.pop("layout", "contiguous")
    p = ConvProblem.build(**kwargs, dtype=dtype, layout=layout)
    chosen = convwgrad.plan(p, "sm_90")
    assert (chosen.family == FAMILY) == routed, (chosen.family, chosen.rule)
    if routed:
        assert "wgrad_shifted_mma is faster" in chosen.rule and ("H200" in chosen.rule or "H100" in chosen.rule)
        assert ("channels_last" in chosen.rule) == (layout == "channels_last"), chosen.rule
    assert bool(routing._shifted_mma_measured_faster(p)) == routed


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch, size, channels, k, dilation, routed", [
    (32, 56, 80, 3, 4, True),      # 7.2e7 multiply-adds: merged's class; 62.8 us against merged's 97.4 (CL)
    (128, 28, 160, 3, 3, True),    # 1.4e8: merged's class
    (128, 14, 320, 7, 2, True),    # 3.9e8: the Triton shifted family's class; 34.0 us against 41.9 (N=32, CL)
    (32, 28, 160, 3, 3, False),    # 3.6e7: below the bound, cuDNN's (a patched layer's host time)
    (32, 14, 320, 7, 2, False),    # 9.8e7 of 49 taps: below the shifted class's bound
    (128, 7, 640, 3, 5, False),    # rows of 7: lost to cuDNN (34.1 us against 26.0) and below the bound
    (512, 7, 640, 3, 5, False),    # rows of 7, above the bound: still not routed
])
def test_dilated_routed_on_the_classes_taken_from_cudnn_with_rows_of_14(batch, size, channels, k, dilation, routed,
                                                                        layout, bindings):
    p = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(size, size), filter_size=k,
                          padding=dilation * (k // 2), dilation=dilation, dtype="bf16", layout=layout)
    chosen = convwgrad.plan(p, "sm_90")
    assert (chosen.family == FAMILY) == routed, (chosen.family, chosen.rule)
    assert (routing._shifted_mma_measured_faster(p) == routing.SHIFTED_MMA_DILATED_MEASUREMENT) == routed
    if routed:
        assert "dilated depthwise" in chosen.rule and "H100" in chosen.rule
        for other in (attrs.evolve(p, dtype="fp16"), attrs.evolve(p, stride=(2, 2))):
            assert convwgrad.plan(other, "sm_90").family != FAMILY, other.describe()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (the GPU run builds with NVRTC)")
@pytest.mark.parametrize("defines", [[], ["-DELEM_IS_FP16"]], ids=["bf16", "fp16"])
def test_source_builds_for_sm90_without_spills(tmp_path, defines):
    """The kernels' sm_90 build, kernel by kernel: no local memory (spills, stack), and the MMAs and
    ldmatrix of their tap tile."""
    out = tmp_path / "k.cubin"
    build = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "-Xptxas", "-v", *defines, str(launcher.SOURCE),
                            "-o", str(out)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    kernels = launcher.KERNEL_NAMES
    assert build.stderr.count("Compiling entry function") == len(kernels), build.stderr
    assert all(f"'{name}'" in build.stderr for name in kernels), build.stderr
    # every kernel: no spills, no stack
    assert build.stderr.count("0 bytes spill stores, 0 bytes spill loads") == len(kernels), build.stderr
    assert build.stderr.count("0 bytes stack frame") == len(kernels), build.stderr
    ptx = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", *defines, str(launcher.SOURCE), "-o", "-"],
                         capture_output=True, text=True).stdout
    kind = "f16" if defines else "bf16"
    entries = ptx.split(".entry ")[1:]
    assert sorted(entry.split("(", 1)[0].strip() for entry in entries) == sorted(kernels)
    for entry in entries:
        name = entry.split("(", 1)[0].strip()
        mmas = entry.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32")
        if "_seq" in name:   # a 16-position block: one MMA and one ldmatrix.x2; a step's blocks unrolled
            loads = entry.count("ldmatrix.sync.aligned.m8n8.x2.shared.b16")
            blocks = (128 if "_s128" in name else 64) // 16
            assert mmas == blocks and loads == blocks, (name, mmas, loads)
            continue
        loads = entry.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
        # a 16-column block: 32 x 32 taps, 8 MMAs and 2 ldmatrix.x4; 16 x 16 taps, 2 MMAs and 1 ldmatrix.x4
        # (the block loop may be unrolled)
        per_block, per_load = (2, 2) if name.endswith("_t16_kernel") else (8, 4)
        assert mmas >= per_block and mmas % per_block == 0 and loads == mmas // per_load, (name, mmas, loads)


def _strides(problem, layout):
    import torch

    shape = problem.input_shape
    t = torch.empty(shape, device="meta")
    t = t.to(memory_format=torch.channels_last) if layout == "channels_last" else t
    return (*t.stride(), *t.stride())


@pytest.mark.parametrize("channels", launcher.COOPERATIVE_CHANNEL_COUNTS)
def test_cooperative_layout_admits_channels_last_vectors_only(channels):
    """The cooperative kernel needs each position's CTA channels adjacent and vector-aligned."""
    cl = _problem(layout="channels_last")
    assert launcher.cooperative_layout(cl, _strides(cl, "channels_last"), channels)
    assert not launcher.cooperative_layout(cl, _strides(cl, "contiguous"), channels)  # NCHW: channel stride H*W
    odd = _problem(layout="channels_last", groups=2 * channels + 2, in_channels=2 * channels + 2)
    assert not launcher.cooperative_layout(odd, _strides(odd, "channels_last"), channels)  # C not a multiple
    sxn, sxc, sxh, sxw, *dy = _strides(cl, "channels_last")
    padded_rows = (sxn, sxc, sxh + 2, sxw, *dy)  # a view whose rows start off the vector grid
    assert not launcher.cooperative_layout(cl, padded_rows, channels)
    broadcast_dy = (sxn, sxc, sxh, sxw, 0, *dy[1:])  # a grad_output expanded along the batch reads fine
    assert launcher.cooperative_layout(cl, broadcast_dy, channels)
    assert not launcher.cooperative_layout(cl, _strides(cl, "channels_last"), 3)  # no such kernel


@pytest.mark.parametrize("dilation", [1, (2, 1), (1, 2), 3])
@pytest.mark.parametrize("filter_size, small", [(13, True), (16, True), ((16, 3), True), (17, False), ((3, 17), False),
                                                (31, False)])
def test_stage1_kernel_by_filter_and_loads(filter_size, small, dilation, bindings):
    """Filters up to 16 a side take the 16 x 16 tap tile, larger ones 32 x 32; a column dilation above
    1 the _dilated_cols kernels; every name is a kernel of the source."""
    p = _problem(filter_size=filter_size, padding=45, dilation=dilation)   # padding: an output at every dilation
    if p.dilation[1] > 1 and not small:   # dilated columns run on the 16 x 16 tile only: refused
        with pytest.raises(NoCandidateError, match="16 x 16 tap tile only"):
            convwgrad.plan(p, "sm_90", family=FAMILY)
        return
    for channels in (0, *launcher.COOPERATIVE_CHANNEL_COUNTS):
        name = launcher.stage1_kernel_name(p, channels)
        assert name in launcher.KERNEL_NAMES and name.endswith("_t16_kernel") == small
        assert (f"_cl{channels}_" in name) == bool(channels)
        assert ("_dilated_cols_" in name) == (p.dilation[1] > 1)


@pytest.mark.parametrize("channels,size,k,expected", [
    (24, 56, 7, launcher.MAX_SPLIT_2D),    # 6 CTAs a split: the cap
    (1536, 14, 11, 8),                     # 384 CTAs a split: 4224 / 384 = 11 -> 8
    (565, 7, 31, 8),                       # 31x31 partials on a 7x7 plane: the partials cap (6.5 -> 8)
    (128, 56, 31, 32),                     # RepLKNet-31B's first 31x31 layer
    (576, 13, 11, 16),                     # rows of 13: 16 CTAs an SM, 2112 / 144 = 14.7 -> 16 (32 on rows >= 14)
    (576, 14, 11, 32),                     # rows of 14: 4224 / 144 = 29.3 -> 32
])
def test_2d_split_is_the_power_of_two_nearest_the_wanted_one(channels, size, k, expected):
    p = ConvProblem.build(batch=32, groups=channels, in_channels=channels, input_size=(size, size), filter_size=k,
                          padding=k // 2, dtype="bf16", layout="channels_last")
    assert launcher.choose_split_k(p) == expected


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 8, 12, 32, 33, 64, 128])
@pytest.mark.parametrize("channels", [8, 96, 565, 2048])
def test_2d_split_holds_images_in_every_split_and_respects_its_caps(batch, channels):
    p = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(14, 14), filter_size=13,
                          padding=6, dtype="bf16", layout="channels_last")
    split = launcher.choose_split_k(p)
    per = math.ceil(p.batch / split)
    assert split >= 2 and per * (split - 1) < max(p.batch, 2), (split, per)   # no split left empty (from 2 images)
    assert split <= max(2, min(p.batch, launcher.MAX_SPLIT_2D))
    if p.batch >= launcher.MAX_SPLIT_2D and p.batch & (p.batch - 1) == 0:
        assert split & (split - 1) == 0, split   # a power of two where the batch is one


@pytest.mark.parametrize("channels,length,k", [(841, 4096, 15), (144, 256, 15), (1024, 4096, 31), (4096, 4096, 31)])
def test_1d_target_split_is_a_power_of_two(channels, length, k):
    p = ConvProblem.build(batch=32, groups=channels, in_channels=channels, input_size=(length,), filter_size=k,
                          padding=k // 2, dtype="bf16", layout="channels_last")
    target = launcher._sequence_target_splits(p)
    assert target & (target - 1) == 0 and target <= math.ceil(launcher.TARGET_CTAS / math.ceil(channels / launcher.WARPS))
    assert launcher.choose_split_k(p) >= 2
