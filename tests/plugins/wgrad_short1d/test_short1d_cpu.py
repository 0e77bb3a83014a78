"""The short-1-D family on the CPU: its gate (every refusal names the field), its split policy, its
opt-in routing, a NumPy simulation of the kernel's lanes (vectors, neighbour words by shuffle, the halo
lanes, the flat split walk) against the direct sum, and the CUDA source's sm_90 build (no spills). The
kernel itself runs on a CUDA GPU only: test_short1d_gpu.py."""

import math
import re
import shutil
import subprocess

import numpy as np
import pytest

import convwgrad
from convwgrad.plugins.wgrad_short1d import launcher
from convwgrad.provider import ConvProblem
from convwgrad.provider.plan import NoCandidateError, clear_plan_cache

FAMILY = "wgrad_short1d"
MAMBA = dict(batch=16, groups=1024, in_channels=1024, input_size=(2048,), filter_size=4, padding=((3, 0),))


def _problem(dtype="bf16", layout="contiguous", **overrides):
    return ConvProblem.build(**{**MAMBA, **overrides}, dtype=dtype, layout=layout)


@pytest.fixture
def bindings(monkeypatch):
    """cuda-bindings as if installed (CI has none): the gate's other reasons are what is tested."""
    monkeypatch.setattr(launcher, "_bindings", lambda: ((object(), object()), None))
    clear_plan_cache()
    yield
    monkeypatch.undo()
    clear_plan_cache()


ADMITTED = {
    "mamba-causal-k4": MAMBA,
    "k3-centred-odd": dict(batch=3, groups=7, in_channels=7, input_size=(77,), filter_size=3, padding=1),
    "k9-centred": dict(batch=2, groups=8, in_channels=8, input_size=(300,), filter_size=9, padding=4),
    "k9-causal-reach-8": dict(batch=2, groups=8, in_channels=8, input_size=(300,), filter_size=9, padding=((8, 0),)),
    "k1": dict(batch=2, groups=8, in_channels=8, input_size=(65,), filter_size=1, padding=0),
    "k5-d2": dict(batch=2, groups=8, in_channels=8, input_size=(100,), filter_size=5, padding=4, dilation=2),
    "k2-no-pad": dict(batch=1, groups=4, in_channels=4, input_size=(1,), filter_size=2, padding=((0, 1),)),
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_admitted_in_two_stages(name, dtype, layout, bindings):
    p = ConvProblem.build(**ADMITTED[name], dtype=dtype, layout=layout)
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    assert chosen.family == FAMILY and chosen.two_stage and chosen.split_k >= 2


@pytest.mark.parametrize("overrides, reason", [
    (dict(filter_size=10, padding=5), "filter_size=(10,): at most 9 taps"),
    (dict(filter_size=4, padding=((9, 0),)), "padding left=9: at most 8"),
    (dict(filter_size=5, padding=1, dilation=3), "dilation=3, filter_size=5, padding left=1: the filter reaches "
                                                 "3 x (5 - 1) - 1 = 11 positions"),
    (dict(stride=2), "stride=(2,): stride 1 only"),
    (dict(dtype="fp32"), "dtype=fp32: bf16 and fp16 only"),
    (dict(groups=512), "cpg=2, kpg=2: depthwise problems only"),
    (dict(input_size=(16, 16), filter_size=3, padding=1), "spatial_dims=2: the kernel computes 1-D convolutions only"),
])
def test_refused_with_the_field_and_value(overrides, reason, bindings):
    dtype = overrides.pop("dtype", "bf16")
    p = _problem(dtype=dtype, **overrides)
    with pytest.raises(NoCandidateError) as error:
        convwgrad.plan(p, "sm_90", family=FAMILY)
    assert reason in str(error.value), str(error.value)


def test_reach_of_exactly_eight_is_admitted_and_nine_refused(bindings):
    assert convwgrad.plan(_problem(filter_size=9, padding=((0, 8),)), "sm_90", family=FAMILY).family == FAMILY
    with pytest.raises(NoCandidateError, match=r"dilation=3, filter_size=4, padding left=0: the filter reaches "
                                               r"3 x \(4 - 1\) - 0 = 9 positions"):
        convwgrad.plan(_problem(filter_size=4, padding=0, dilation=3), "sm_90", family=FAMILY)


def test_refused_off_cuda_and_without_bindings(monkeypatch):
    p = _problem()
    for target, why in (("gfx950", "no HIP port"), ("interpreter", "no interpreter")):
        with pytest.raises(NoCandidateError, match=why):
            convwgrad.plan(p, target, family=FAMILY)
    monkeypatch.setattr(launcher, "_bindings", lambda: (None, "cuda-bindings is not importable (test)"))
    clear_plan_cache()
    try:
        with pytest.raises(NoCandidateError, match="cuda-bindings is not importable"):
            convwgrad.plan(p, "sm_90", family=FAMILY)
    finally:
        monkeypatch.undo()
        clear_plan_cache()


@pytest.mark.parametrize("channels, batch, length", [(1024, 16, 2048), (2560, 8, 1024), (256, 32, 512), (4, 1, 100),
                                                     (5120, 1, 300), (64, 2, 2048)])
def test_splits_fill_whole_waves_and_at_most_a_chunk_each(channels, batch, length, bindings):
    p = _problem(groups=channels, in_channels=channels, batch=batch, input_size=(length,))
    split_k = convwgrad.plan(p, "sm_90", family=FAMILY).split_k
    per_split = math.ceil(channels / launcher.WARPS)
    chunks = batch * launcher.chunks_per_image(p)
    assert 2 <= split_k <= max(2, chunks)
    if split_k > 2:   # more than the two stages need: never a second, partial wave of CTAs
        assert per_split * split_k <= launcher.TARGET_CTAS
    if split_k < chunks:   # not held back by the chunks: the wave is full to within one split's CTAs
        assert per_split * (split_k + 1) > launcher.TARGET_CTAS or split_k == 2


@pytest.mark.parametrize("overrides, routed", [
    (dict(), True),   # Mamba k=4, padding (3, 0)
    (dict(padding=3), True),   # Mamba's own padding
    (dict(filter_size=3, padding=1), True),
    (dict(layout="channels_last"), False),   # lost to merged there
    (dict(dtype="fp16"), False),   # not timed
    (dict(filter_size=5, padding=2), False),   # not measured
    (dict(filter_size=2, padding=((1, 0),)), False),
    (dict(filter_size=3, padding=2, dilation=2), False),
])
def test_routed_only_on_its_measured_class(overrides, routed, bindings):
    overrides = dict(overrides)
    p = _problem(dtype=overrides.pop("dtype", "bf16"), layout=overrides.pop("layout", "contiguous"), **overrides)
    chosen = convwgrad.plan(p, "sm_90")
    assert (chosen.family == FAMILY) == routed, chosen.rule
    if routed:
        assert "H100, 2026-12-07" in chosen.rule
    assert convwgrad.plan(p, "sm_90", family=FAMILY).family == FAMILY


def _strides(shape, layout):
    import torch

    t = torch.empty(shape, device="meta")
    return t.transpose(1, 2).contiguous().transpose(1, 2).stride() if layout == "channels_last" else t.stride()


def test_vector_operand_needs_unit_sequence_stride_and_rows_on_eight_elements():
    p = _problem(batch=2, groups=16, in_channels=16, input_size=(64,))
    assert launcher.vector_operand(p.input_shape, _strides(p.input_shape, "contiguous"))
    assert not launcher.vector_operand(p.input_shape, _strides(p.input_shape, "channels_last"))
    assert not launcher.vector_operand((2, 16, 67), _strides((2, 16, 67), "contiguous"))   # rows 67 apart
    assert launcher.vector_operand((1, 1, 67), _strides((1, 1, 67), "contiguous"))   # one row: its start is the pointer
    # Mamba (padding 3 each side, the output cut to L after the conv): grad_output rows are L + 3 long
    mamba = _problem(batch=2, groups=16, in_channels=16, input_size=(2048,), padding=3)
    assert launcher.vector_operand(mamba.input_shape, _strides(mamba.input_shape, "contiguous"))
    assert not launcher.vector_operand(mamba.grad_output_shape, _strides(mamba.grad_output_shape, "contiguous"))
    assert launcher.stage1_kernel_name(True, False) == "wgrad_short1d_xvec_kernel"
    assert sorted(launcher.KERNEL_NAMES) == sorted(launcher.stage1_kernel_name(a, b) for a in (0, 1) for b in (0, 1))


# ---- the kernel's lanes, simulated ----------------------------------------------------------------------------

V, LANES = launcher.VECTOR, 32
CHUNK = V * LANES


def _vec(row, p, n):
    """load_vec: V elements from p (zeros outside 0 <= p < n)."""
    return np.array([row[q] if 0 <= q < n else 0.0 for q in range(p, p + V)])


def _simulate_chunk(acc, xrow, drow, a, L, LO, taps, pad, dil):
    """One step of one warp, as kernels.cu's load_step and accumulate (window entries start as NaN, so a
    tap reading an entry the kernel never sets poisons dW)."""
    j_lo, j_hi = pad - dil * (taps - 1), 7 + pad
    needs_left, needs_right = j_lo < 0, j_hi >= V
    xs = [_vec(xrow, a + V * lane, L) for lane in range(LANES)]
    ds = [_vec(drow, a + V * lane, LO) for lane in range(LANES)]
    halo = {}
    if needs_left:
        halo[0] = _vec(drow, a - V, LO)
    if needs_right:
        halo[LANES - 1] = _vec(drow, a + CHUNK, LO)
    for lane in range(LANES):
        wf = np.full(j_hi - j_lo + 1, np.nan)
        for j in range(j_lo, j_hi + 1):
            if 0 <= j < V:
                wf[j - j_lo] = ds[lane][j]
        if needs_left:
            src = halo[0] if lane == 0 else ds[lane - 1]   # __shfl_up_sync by 1; lane 0: the halo
            for e in range((j_lo + V) // 2, V // 2):
                for h in range(2):
                    j = 2 * e + h - V
                    if j >= j_lo:
                        wf[j - j_lo] = src[2 * e + h]
        if needs_right:
            src = halo[LANES - 1] if lane == LANES - 1 else ds[lane + 1]   # __shfl_down_sync by 1
            for e in range(0, (j_hi - V) // 2 + 1):
                for h in range(2):
                    j = 2 * e + h + V
                    if j <= j_hi:
                        wf[j - j_lo] = src[2 * e + h]
        for k in range(taps):
            for i in range(V):
                acc[lane, k] += xs[lane][i] * wf[i + pad - dil * k - j_lo]


def _simulate(x, dy, taps, pad, dil, split_k):
    """The kernel's dW: each split's warps walk the flat (image, chunk) index, lanes reduced, splits summed."""
    batch, channels, L = x.shape
    LO = dy.shape[2]
    per_image = -(-L // CHUNK)
    per_split = -(-(batch * per_image) // split_k)
    total = batch * per_image
    dw = np.zeros((channels, taps))
    for c in range(channels):
        for split in range(split_k):
            acc = np.zeros((LANES, taps))
            for f in range(min(total, split * per_split), min(total, split * per_split + per_split)):
                n, chunk = divmod(f, per_image)
                _simulate_chunk(acc, x[n, c], dy[n, c], chunk * CHUNK, L, LO, taps, pad, dil)
            dw[c] += acc.sum(axis=0)
    return dw


def _direct(x, dy, taps, pad, dil):
    batch, channels, L = x.shape
    dw = np.zeros((channels, taps))
    for k in range(taps):
        for o in range(dy.shape[2]):
            m = o + dil * k - pad
            if 0 <= m < L:
                dw[:, k] += (x[:, :, m] * dy[:, :, o]).sum(axis=0)
    return dw


SIMULATED = {  # (batch, channels, L, taps, (left, right) padding, dilation, split_k)
    "mamba-causal-k4": (2, 2, 600, 4, (3, 0), 1, 3),
    "k3-centred": (3, 1, 77, 3, (1, 1), 1, 2),
    "k9-centred": (1, 2, 520, 9, (4, 4), 1, 2),
    "k9-causal": (2, 1, 300, 9, (8, 0), 1, 5),
    "k9-anticausal": (2, 1, 300, 9, (0, 8), 1, 2),
    "k5-d2": (2, 1, 300, 5, (4, 4), 2, 2),
    "k4-d2-left-2": (1, 1, 260, 4, (2, 4), 2, 2),   # offsets -4 .. 9: both neighbours
    "k1": (2, 1, 70, 1, (0, 0), 1, 2),
    "over-padded": (1, 1, 40, 3, (8, 8), 1, 2),   # grad_output longer than the input
    "splits-past-the-chunks": (1, 1, 300, 4, (3, 0), 1, 7),
}


@pytest.mark.parametrize("name", sorted(SIMULATED))
def test_simulated_kernel_equals_the_direct_sum(name):
    batch, channels, L, taps, (left, right), dil, split_k = SIMULATED[name]
    if left - dil * (taps - 1) < -V or 7 + left >= 2 * V:
        pytest.skip("outside the gate")
    rng = np.random.default_rng(len(name))
    LO = L + left + right - dil * (taps - 1)
    x, dy = rng.standard_normal((batch, channels, L)), rng.standard_normal((batch, channels, LO))
    got = _simulate(x, dy, taps, left, dil, split_k)
    want = _direct(x, dy, taps, left, dil)
    assert np.isfinite(got).all(), "a tap read a window entry the kernel never sets"
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_a_reach_past_the_neighbour_vector_breaks_the_simulation():
    """The gate's bound is the kernel's: one position further (left padding 9) and the window is short."""
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((1, 1, 100)), rng.standard_normal((1, 1, 106))
    with pytest.raises(IndexError):
        _simulate(x, dy, 4, 9, 1, 2)   # J_HI = 16: past the right neighbour's vector


# ---- the source's sm_90 build ---------------------------------------------------------------------------------

BUILDS = [("bf16", 4, 3, 1), ("fp16", 4, 3, 1), ("bf16", 3, 1, 1), ("bf16", 9, 4, 1), ("bf16", 9, 8, 1),
          ("bf16", 9, 0, 1), ("bf16", 5, 4, 2), ("bf16", 1, 0, 1)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (the GPU run builds with NVRTC)")
@pytest.mark.parametrize("dtype, taps, pad, dil", BUILDS)
def test_source_builds_for_sm90_without_spills(tmp_path, dtype, taps, pad, dil):
    """Every kernel of one build: no local memory, registers for CTAS_PER_SM CTAs an SM (TARGET_CTAS), and the
    vector kernel's 16-byte loads and 8 x TAPS FMAs a step."""
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(64,), filter_size=taps,
                          padding=((pad, max(0, dil * (taps - 1) - pad)),), dilation=dil, dtype=dtype)
    options = launcher.build_options(p)
    build = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "-Xptxas", "-v", *options, str(launcher.SOURCE),
                            "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    kernels = len(launcher.KERNEL_NAMES)
    assert all(f"'{name}'" in build.stderr for name in launcher.KERNEL_NAMES), build.stderr
    assert build.stderr.count("0 bytes spill stores, 0 bytes spill loads") == kernels, build.stderr
    assert build.stderr.count("0 bytes stack frame") == kernels, build.stderr
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", build.stderr)]
    assert len(registers) == kernels and max(registers) <= 65536 // (launcher.CTAS_PER_SM * 128), build.stderr
    ptx = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-O3", *options, str(launcher.SOURCE), "-o", "-"],
                         capture_output=True, text=True).stdout
    vector = ptx.split(".entry wgrad_short1d_kernel")[1].split(".entry ")[0]
    assert vector.count("ld.global.nc.v4.u32") >= 2, "the vector kernel's 16-byte loads"
    assert vector.count("fma.rn.f32") == V * taps
