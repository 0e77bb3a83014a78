"""Direct-family numerics in the interpreter: tiny shapes against float64, NaN-poisoned dW and
workspace, every element written, the family that ran checked (tests/support.py)."""

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.plugins.wgrad_direct import launcher
from convwgrad.provider import ConvProblem, Tile, reference_weight_grad, relative_error
from convwgrad.provider.reference import TOLERANCE
from support import DEVICE, assert_close_to_reference, describe_mismatch, run_checked

pytestmark = pytest.mark.usefixtures("no_tf32")
FAMILY = "wgrad_direct"

CASES = {
    "dw3x3-odd": dict(batch=2, groups=13, in_channels=13, input_size=(7, 5), filter_size=3, padding=1),
    "dw5x5-s2": dict(batch=1, groups=16, in_channels=16, input_size=(11, 9), filter_size=5, stride=2, padding=2),
    "dw7x7": dict(batch=1, groups=8, in_channels=8, input_size=(9, 10), filter_size=7, padding=3),
    "dil2-asym": dict(batch=2, groups=8, in_channels=8, input_size=(9, 7), filter_size=3, dilation=2,
                      padding=((1, 3), (2, 0))),
    "dil3-k3x5": dict(batch=1, groups=8, in_channels=8, input_size=(10, 13), filter_size=(3, 5), dilation=3,
                      padding=((3, 3), (5, 6))),
    "kpg2": dict(batch=2, groups=6, in_channels=6, out_channels=12, input_size=(6, 7), filter_size=3, padding=1),
    "conv1d-k4-causal": dict(batch=2, groups=16, in_channels=16, input_size=(19,), filter_size=4, padding=((3, 0),)),
    "conv1d-k15": dict(batch=1, groups=8, in_channels=8, input_size=(23,), filter_size=15, padding=7),
    "conv1d-k31": dict(batch=1, groups=8, in_channels=8, input_size=(37,), filter_size=31, padding=15),
    "conv3d": dict(batch=1, groups=8, in_channels=8, input_size=(4, 5, 3), filter_size=3, padding=1),
}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_matches_reference(case, dtype):
    """Every case in each dtype, in the planned split; layouts alternate so both run every dtype."""
    layout = "channels_last" if (sorted(CASES).index(case) + len(dtype)) % 2 else "contiguous"
    p = ConvProblem.build(**CASES[case], dtype=dtype, layout=layout)
    outcome = run_checked(p, family=FAMILY)
    assert outcome.launches[0].kernels[0] == "_wgrad_direct_kernel"
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("k", range(1, 10))
def test_filter_sizes_1_to_9(k):
    """Square filters 1..9 with 'same' padding (asymmetric for even k), channels_last bf16."""
    p = ConvProblem.build(batch=1, groups=16, in_channels=16, input_size=(k + 4, k + 3), filter_size=k,
                          padding=((k // 2, (k - 1) // 2), ((k - 1) // 2, k // 2)), dtype="bf16",
                          layout="channels_last")
    assert_close_to_reference(run_checked(p, family=FAMILY), p)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous", "view"])
@pytest.mark.parametrize("tile", [
    Tile(block_m=8, block_n=16, block_k=4),  # several segments a row: interior and border paths
    Tile(block_m=4, block_n=4, block_k=16),  # taps over 3 programs; one segment a row (NCHW shape)
    Tile(block_m=16, block_n=8, block_k=1),  # channel tail (13 of 16), one column a step
])
def test_layouts_and_tiles(layout, tile):
    """Any strides run natively: channels_last, NCHW, and a non-contiguous view (a channel slice
    of a wider tensor and a column slice, so no stride is the dense one)."""
    p = ConvProblem.build(**CASES["dw3x3-odd"], dtype="fp32", layout="channels_last" if layout == "view" else layout)
    inputs = None
    if layout == "view":
        x, dy = make_inputs(ConvProblem.build(batch=2, groups=16, in_channels=16, input_size=(7, 9), filter_size=3,
                                              padding=((1, 1), (0, 0)), dtype="fp32", layout="channels_last"), DEVICE)
        inputs = (x[:, 1:14, :, 1:6], dy[:, 2:15, :, 1:6])  # (2, 13, 7, 5) over (2, 16, 7, 7)
        assert not inputs[0].is_contiguous() and not inputs[0].is_contiguous(memory_format=torch.channels_last)
        p = ConvProblem.from_tensors(inputs[0], (13, 1, 3, 3), inputs[1], padding=1, groups=13)
    outcome = run_checked(p, family=FAMILY, tile=tile, inputs=inputs)
    assert outcome.plan.spec.tile == tile
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("split_k", [1, 2, 5, 21])
def test_split_degrees_and_determinism(split_k):
    """Each degree matches float64 and reruns bitwise equal (ordered fp32 reduction, no atomics).
    21 splits over 7 rows x 3 segments: one segment a split; 5 leaves uneven splits."""
    p = ConvProblem.build(**CASES["dil2-asym"], dtype="bf16", layout="channels_last")
    tile = Tile(block_m=8, block_n=16, block_k=4)
    x, dy = make_inputs(p, DEVICE)
    first = run_checked(p, family=FAMILY, tile=tile, split_k=split_k, inputs=(x, dy))
    assert first.plan.split_k == split_k and first.plan.two_stage == (split_k > 1)
    assert_close_to_reference(first, p)
    second = run_checked(p, family=FAMILY, tile=tile, split_k=split_k, inputs=(x, dy))
    assert torch.equal(first.out.view(torch.int16), second.out.view(torch.int16))


def test_column_guard():
    """Each (channel, tap) matches on its own: a wrong tap or channel mapping that still writes
    every element shows here by column."""
    p = ConvProblem.build(**CASES["dil3-k3x5"], dtype="fp32", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    out = run_checked(p, family=FAMILY, split_k=2, inputs=(x, dy)).out
    ref = reference_weight_grad(p, x, dy)
    got, want = out.double().reshape(p.out_channels, -1), ref.reshape(p.out_channels, -1)
    bad = [(c, t) for c in range(p.out_channels) for t in range(got.shape[1])
           if abs(got[c, t] - want[c, t]) > 1e-4 * (1 + abs(want[c, t]))]
    assert not bad, f"{len(bad)} (channel, tap) mismatches, first {bad[:5]}; " + describe_mismatch(out, ref)


def test_mutation_wrong_tap_offset_is_caught(monkeypatch):
    """The numerics check is not vacuous: a kernel fed a wrong tap offset (dilation off by one in
    the column direction, so every kx > 0 reads a shifted column) fails it."""
    p = ConvProblem.build(batch=1, groups=8, in_channels=8, input_size=(6, 11), filter_size=3, padding=2,
                          dtype="fp32", layout="channels_last")  # a shape no other test uses: no warm-path reuse
    right = launcher.stage1_args

    def wrong_tap_offset(*args, **kwargs):
        return [(name, value + 1 if name == "DIL_W" else value) for name, value in right(*args, **kwargs)]

    monkeypatch.setattr(launcher, "stage1_args", wrong_tap_offset)
    outcome = run_checked(p, family=FAMILY)
    assert outcome.error > 10 * TOLERANCE["fp32"], outcome.error
    with pytest.raises(AssertionError, match="relative error"):
        assert_close_to_reference(outcome, p)


def test_reachable_by_plan_and_routing_unchanged():
    p = ConvProblem.build(**CASES["dw3x3-odd"], dtype="bf16", layout="channels_last")
    assert convwgrad.plan(p, "sm_90", family=FAMILY).family == FAMILY
    assert convwgrad.plan(p, "sm_90").family != FAMILY  # priority 5: routing rules come from measurements
    x, dy = make_inputs(p, DEVICE)
    with convwgrad.record_launches() as log:
        out = convwgrad.dispatch_conv_grouped(p, x, dy, plan=convwgrad.plan(p, DEVICE, family=FAMILY))
    assert [r.family for r in log] == [FAMILY]
    assert relative_error(out, reference_weight_grad(p, x, dy)) <= TOLERANCE["bf16"]


@pytest.mark.parametrize("size, stride, dilation, kpg", [
    ((10, 23), 1, 1, 1), ((10, 23), 2, 1, 1), ((9, 29), 1, 3, 1), ((10, 23), 1, 1, 2), ((4, 5, 21), 1, 1, 1),
])
def test_interior_segments(size, stride, dilation, kpg):
    """Rows wide enough for unmasked interior segments (no channel tail, every tap row inside)
    beside masked rows and border segments, in 2-D and 3-D, strided, dilated, kpg = 2."""
    k = 3
    p = ConvProblem.build(batch=2, groups=16, in_channels=16, out_channels=16 * kpg, input_size=size, filter_size=k,
                          stride=stride, dilation=dilation, padding=dilation, dtype="fp32", layout="channels_last")
    tile = Tile(block_m=8, block_n=16, block_k=2)
    lo, hi = launcher.inner_columns(p, tile.block_k)
    assert 0 < lo < hi < launcher.cdiv(p.output_size[-1], tile.block_k), (lo, hi)  # all three kinds of segment
    assert_close_to_reference(run_checked(p, family=FAMILY, tile=tile, split_k=3), p)
