"""Merged-group numerics at realistic sizes on a GPU (skipped without one)."""

import pytest

from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem
from support import assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

LAYERS = {
    "mobilenetv2-144x56": dict(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, padding=1),
    "mobilenetv2-s2": dict(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, stride=2, padding=1),
    "convnext-k7": dict(batch=32, groups=96, in_channels=96, input_size=(56, 56), filter_size=7, padding=3),
    "replknet-k31": dict(batch=8, groups=128, in_channels=128, input_size=(28, 28), filter_size=31, padding=15),
    "dilated-asym": dict(batch=16, groups=64, in_channels=64, input_size=(33, 31), filter_size=3, dilation=2, padding=((1, 3), (2, 2))),
    "conformer-1d-k31": dict(batch=32, groups=256, in_channels=256, input_size=(512,), filter_size=31, padding=15),
    "x3d-3d": dict(batch=8, groups=96, in_channels=96, input_size=(8, 28, 28), filter_size=3, padding=1),
}


@pytest.mark.parametrize("split_k", [1, 8])
@pytest.mark.parametrize("gm", [2, 4, 8, 16])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_merged_bf16_vs_reference_and_gm1(layer, gm, split_k):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout="channels_last")
    inputs = make_inputs(p, "cuda")
    merged = run_checked(p, family="wgrad_merged", group_merge=gm, split_k=split_k, inputs=inputs)
    baseline = run_checked(p, family="wgrad_splitk", split_k=split_k, inputs=inputs)
    assert_close_to_reference(merged, p)
    assert merged.error <= 1.1 * baseline.error, (merged.error, baseline.error)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("layer", ["mobilenetv2-144x56", "conformer-1d-k31", "x3d-3d"])
def test_merged_planned_other_dtypes(layer, dtype, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout=layout)
    outcome = run_checked(p, family="wgrad_merged")
    assert outcome.plan.group_merge > 1
    assert_close_to_reference(outcome, p)
