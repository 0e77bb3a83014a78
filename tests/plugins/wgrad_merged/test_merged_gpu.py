"""Merged-group numerics at realistic sizes on a GPU (skipped without one)."""

import pytest

from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem
from support import GPU_LAYERS, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

#: the depthwise layers of the shared table (the merged family's domain)
LAYERS = {name: GPU_LAYERS[name] for name in (
    "mobilenetv2-144x56",
    "mobilenetv2-s2",
    "convnext-k7",
    "replknet-k31",
    "dilated-asym",
    "conformer-1d-k31",
    "x3d-3d",
)}


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
