"""Split-K numerics at realistic sizes on a GPU (skipped without one)."""

import math

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, relative_error
from convwgrad.provider.reference import aten_weight_grad
from support import GPU_LAYERS, assert_close_to_reference, run_checked

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]

LAYERS = GPU_LAYERS


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_planned_config_matches_reference(layer, dtype, layout):
    p = ConvProblem.build(**LAYERS[layer], dtype=dtype, layout=layout)
    assert_close_to_reference(run_checked(p), p)


@pytest.mark.parametrize("split_k", [1, 2, 7, 32])
@pytest.mark.parametrize("layer", ["mobilenetv2-144x56", "resnext-cpg4", "conformer-1d-k31", "x3d-3d"])
def test_every_split_matches_reference(layer, split_k):
    p = ConvProblem.build(**LAYERS[layer], dtype="bf16", layout="channels_last")
    outcome = run_checked(p, split_k=split_k)
    assert outcome.plan.split_k == split_k
    assert_close_to_reference(outcome, p)


def test_bitwise_deterministic():
    p = ConvProblem.build(**LAYERS["mobilenetv2-144x56"], dtype="bf16", layout="channels_last")
    x, dy = make_inputs(p, "cuda")
    chosen = convwgrad.plan(p, "cuda", family="wgrad_splitk", split_k=16)
    with convwgrad.record_launches() as log:
        runs = [convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen).view(torch.int16) for _ in range(3)]
    assert {r.family for r in log} == {chosen.family}
    assert all(torch.equal(runs[0], r) for r in runs[1:])


def test_error_within_factor_of_torch_own_bf16():
    """FlashAttention-style bound: our bf16 error is within 2x of torch's own bf16 error (cuDNN)."""
    p = ConvProblem.build(**LAYERS["convnext-k7"], dtype="bf16", layout="channels_last")
    outcome = run_checked(p)
    x, dy = make_inputs(p, "cuda")
    ours = relative_error(convwgrad.dispatch_conv_grouped(p, x, dy), aten_weight_grad(p, x.double(), dy.double()))
    torch_own = relative_error(aten_weight_grad(p, x, dy), aten_weight_grad(p, x.double(), dy.double()))
    assert ours <= max(2 * torch_own, 1e-3), (ours, torch_own, outcome.error)


def test_public_api_matches_torch():
    x = torch.randn(32, 144, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.randn(32, 144, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    with convwgrad.record_launches() as log:
        ours = convwgrad.conv2d_weight(x, (144, 1, 3, 3), dy, 1, 1, 1, 144)
    planned = convwgrad.plan(ConvProblem.from_tensors(x, (144, 1, 3, 3), dy, 1, 1, 1, 144), "cuda")
    assert [r.kernel_name for r in log] == [planned.kernel_name]
    ref = torch.nn.grad.conv2d_weight(x.double(), (144, 1, 3, 3), dy.double(), 1, 1, 1, 144)
    assert ours.dtype == torch.bfloat16 and relative_error(ours, ref) < 8e-3


def test_over_2_31_elements_index_correctly():
    """A depthwise Conv1d whose input holds > 2**31 elements: the far channels must be right."""
    batch, channels, length = 16, 64, 2**21 + 3  # 2.1e9 elements
    p = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(length,),
                          filter_size=3, padding=1, dtype="bf16")
    assert math.prod(p.input_shape) > 2**31
    chosen = convwgrad.plan(p, "cuda", family="wgrad_splitk")
    assert chosen.spec.wide_index and chosen.kernel_name.endswith("_i64")
    x = torch.randn(p.input_shape, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(p.grad_output_shape, device="cuda", dtype=torch.bfloat16)
    out = torch.full(p.weight_size, float("nan"), device="cuda", dtype=torch.bfloat16)
    with convwgrad.record_launches() as log:
        convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen, out=out)
    assert [r.family for r in log] == [chosen.family] and chosen.family != "aten"
    assert torch.isfinite(out).all()
    last = slice(channels - 2, channels)  # the highest offsets in an NCL tensor
    sub = ConvProblem.build(batch=batch, groups=2, in_channels=2, input_size=(length,), filter_size=3,
                            padding=1, dtype="bf16")
    ref = aten_weight_grad(sub, x[:, last].double(), dy[:, last].double())
    assert relative_error(out[last], ref) < 8e-3
