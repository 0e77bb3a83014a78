"""Merged-group numerics: every degree x split against float64 and against Gm = 1 on the same inputs."""

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, reference_weight_grad
from support import DEVICE, assert_bitwise_repeatable, assert_close_to_reference, describe_mismatch, run_checked

pytestmark = pytest.mark.usefixtures("no_tf32")

CASES = {
    "dw3x3": dict(batch=2, groups=16, in_channels=16, input_size=(6, 7), filter_size=3, padding=1),
    "single-merged-group": dict(batch=2, groups=8, in_channels=8, input_size=(8, 8), filter_size=3, padding=1),
    "stride2": dict(batch=2, groups=16, in_channels=16, input_size=(13, 12), filter_size=3, stride=2, padding=1),
    "dilation2-k5": dict(batch=1, groups=16, in_channels=16, input_size=(9, 9), filter_size=5, dilation=2, padding=4),
    "asym-pad": dict(batch=2, groups=16, in_channels=16, input_size=(6, 5), filter_size=3, padding=((0, 2), (2, 1))),
    "conv3d": dict(batch=1, groups=16, in_channels=16, input_size=(4, 5, 4), filter_size=3, padding=1),
    "conv1d-k31": dict(batch=2, groups=16, in_channels=16, input_size=(40,), filter_size=31, padding=15),
}
# G == Gm runs for each degree through "single-merged-group" at Gm = 8 and "dw3x3" at 16.


def allowed_error(p, gm1_error):
    """No worse than 1.1x Gm = 1 on the same inputs (plus fp32 summation-order noise)."""
    return 1.1 * gm1_error + (2e-7 if p.dtype == "fp32" else 0.0)


DEGREES = [(case, gm) for case in sorted(CASES) for gm in (2, 4, 8, 16) if CASES[case]["groups"] % gm == 0]


@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("case, gm", DEGREES)
def test_merged_matches_reference_and_gm1(case, gm, dtype, split_k):
    p = ConvProblem.build(**CASES[case], dtype=dtype, layout="channels_last" if gm != 4 else "contiguous")
    inputs = make_inputs(p, DEVICE)
    merged = run_checked(p, family="wgrad_merged", group_merge=gm, split_k=split_k, inputs=inputs)
    assert merged.plan.group_merge == gm and merged.plan.split_k == split_k
    assert merged.launches[0].kernels[0] == "_wgrad_merged_kernel"
    baseline = run_checked(p, family="wgrad_splitk", split_k=split_k, inputs=inputs)
    assert_close_to_reference(merged, p)
    assert merged.error <= allowed_error(p, baseline.error), (merged.error, baseline.error)


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("gm", [4, 8, 16])
def test_row_guard(gm, split_k):
    """Every row of every merged group is written: a tile bound left at the per-group extent
    (one row) would leave rows 1..Gm-1 of each merged group NaN. The workspace is poisoned
    too, or stage 2 would sum whatever a fresh allocation held into those rows."""
    p = ConvProblem.build(**CASES["dw3x3"], dtype="fp32", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    chosen = convwgrad.plan(p, DEVICE, group_merge=gm, split_k=split_k)
    out = torch.full(p.weight_size, float("nan"), device=DEVICE)
    workspace = torch.empty(chosen.workspace_nbytes, dtype=torch.uint8, device=DEVICE)
    workspace.view(torch.float32).fill_(float("nan"))
    with convwgrad.record_launches() as log:
        convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen, out=out, workspace=workspace)
    assert [r.family for r in log] == ["wgrad_merged"] and log[0].kernels[0] == "_wgrad_merged_kernel"
    missing = [row for row in range(p.out_channels) if not torch.isfinite(out[row]).all()]
    assert not missing, f"rows never written: {missing}"


@pytest.mark.parametrize("split_k", [1, 2])
def test_column_guard(split_k):
    """Each filter tap (column) of each channel matches on its own: a decompaction error
    that writes every element, but at the wrong tap or channel, shows here by column."""
    p = ConvProblem.build(**CASES["dilation2-k5"], dtype="fp32", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    with convwgrad.record_launches() as log:
        out = convwgrad.dispatch_conv_grouped(p, x, dy, plan=convwgrad.plan(p, DEVICE, group_merge=8, split_k=split_k))
    assert [r.family for r in log] == ["wgrad_merged"]
    ref = reference_weight_grad(p, x, dy)
    got = out.cpu().double().reshape(p.out_channels, -1)
    want = ref.reshape(p.out_channels, -1)
    bad = [(c, t) for c in range(p.out_channels) for t in range(got.shape[1])
           if abs(got[c, t] - want[c, t]) > 1e-4 * (1 + abs(want[c, t]))]
    assert not bad, f"{len(bad)} (channel, tap) mismatches, first {bad[:5]}; " + describe_mismatch(out, ref)


def test_planned_depthwise_runs_merged():
    p = ConvProblem.build(**CASES["dw3x3"], dtype="bf16", layout="channels_last")
    outcome = run_checked(p, family="wgrad_merged")
    assert outcome.plan.group_merge > 1
    assert_close_to_reference(outcome, p)


@pytest.mark.parametrize("split_k", [1, 3])
def test_merged_deterministic(split_k):
    p = ConvProblem.build(**CASES["dw3x3"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, DEVICE)
    chosen = convwgrad.plan(p, DEVICE, family="wgrad_merged", group_merge=4, split_k=split_k)
    assert_bitwise_repeatable(p, chosen, x, dy)
