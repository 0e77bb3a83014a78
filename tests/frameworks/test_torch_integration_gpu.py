"""torch integration on the GPU: realistic block stacks under autocast bf16 and channels_last,
eager and torch.compile (inductor), patched against stock."""

import copy

import pytest
import torch
import torch.nn.functional as F

import convwgrad
from convwgrad.provider.reference import relative_error

from grad_checks import BF16_TOL, assert_within_bf16_noise, fp32_reference_grads, grads
from op_checks import check_compiled_op
from torch_models import LARGE_FILTER_FAMILY, STACKS, build

pytestmark = pytest.mark.gpu


def one_step(model, x, target):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach()


def pair(name):
    stock, (channels, size) = build(name)
    stock = stock.cuda().to(memory_format=torch.channels_last)
    patched = convwgrad.patch(copy.deepcopy(stock))
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(16, channels, size, size, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 10, (16,), device="cuda", generator=g)
    return stock, patched, x, target


def convwgrad_layers(model, x):
    """Layers whose dW the plan gives to a convwgrad family (aten-planned layers run stock torch)."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return [plan for _, plan in convwgrad.layer_plans(model, x) if plan.family != "aten"]


def assert_grads_close(stock, patched, tol=BF16_TOL):
    for (name, a), (_, b) in zip(stock.named_parameters(), patched.named_parameters()):
        assert b.grad.dtype == a.dtype
        err = relative_error(b.grad, a.grad.double())
        assert err <= tol, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("name", sorted(STACKS))
def test_autocast_channels_last_step_matches_stock(name):
    stock, patched, x, target = pair(name)
    loss_stock = one_step(stock, x, target)
    with convwgrad.record_launches() as log:
        loss_patched = one_step(patched, x, target)
    torch.cuda.synchronize()
    assert torch.equal(loss_stock, loss_patched)
    expected = convwgrad_layers(patched, x)
    assert [r.kernel_name for r in log] == [p.kernel_name for p in reversed(expected)]  # backward: last layer first
    assert all("_bf16_" in r.kernel_name for r in log)
    if name == "replknet":  # 31x31: LARGE_FILTER_FAMILY on CUDA (measured faster than merged; cuDNN keeps the small filters)
        assert len(log) == 2 and {r.family for r in log} == {LARGE_FILTER_FAMILY}
    assert_grads_close(stock, patched)


@pytest.mark.parametrize("name", ["replknet", "convnext"])
def test_torch_compile_inductor_matches_compiled_stock(name, no_tf32):
    """Patched and stock, both compiled by inductor, on the same weights and batch. Compiled
    against stock eager would measure inductor's own bf16 drift (a BatchNorm weight's gradient
    differs by ~100 % between stock compiled and stock eager); compiled against compiled, only
    convwgrad differs. Each gradient must be within bf16 noise of the fp32 reference (three-way
    bound), and the dW of each layer convwgrad computes within BF16_TOL of stock compiled's."""
    torch._dynamo.reset()
    stock, patched, x, target = pair(name)
    reference = fp32_reference_grads(stock, x, target)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        plans = convwgrad.layer_plans(patched, x)
    ours = [(layer, p) for layer, p in plans if p.family != "aten"]
    if name == "replknet":  # 31x31: LARGE_FILTER_FAMILY on CUDA
        assert [p.family for _, p in ours] == [LARGE_FILTER_FAMILY] * 2
    one_step(torch.compile(stock), x, target)
    with convwgrad.record_launches() as log:
        one_step(torch.compile(patched), x, target)
    torch.cuda.synchronize()
    # compiled (default mode), a layer whose dW plan() gives to torch is stock torch's convolution_backward,
    # with no op in the graph; the others go through the op, which plans them from the strides inductor
    # hands it: compare families, not tiles
    assert sorted(r.family for r in log) == sorted(p.family for _, p in ours)
    stock_grads, patched_grads = grads(stock), grads(patched)
    assert_within_bf16_noise(patched_grads, stock_grads, reference, what="patched compiled vs stock compiled")
    for layer, _ in ours:
        weight = f"{layer}.weight"
        err = relative_error(patched_grads[weight], stock_grads[weight].double())
        assert err <= BF16_TOL, f"{weight}: dW patched compiled vs stock compiled {err:.2e}"


@pytest.mark.parametrize("name", ["replknet", "convnext"])
def test_op_compiled_fullgraph_matches_eager_for_each_patched_layer(name):
    """Each patched layer's problem through ``torch.ops.convwgrad.conv`` alone, compiled with
    fullgraph=True against eager (see op_checks.check_compiled_op): dW bitwise for a convwgrad
    family, grad_input and grad_bias within bf16 tolerance."""
    torch._dynamo.reset()
    _, patched, x, _ = pair(name)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        plans = convwgrad.layer_plans(patched, x)
    layers = {p.problem: patched.get_submodule(layer).bias is not None for layer, p in plans}
    families = [check_compiled_op(problem, "cuda", bias=bias, seed=i, other_grads_tol=BF16_TOL)
                for i, (problem, bias) in enumerate(layers.items())]
    expected = {"replknet": [LARGE_FILTER_FAMILY], "convnext": ["aten"]}[name]  # 7x7 stays with cuDNN on CUDA
    assert families == expected * len(layers)


def test_gradient_accumulation_and_determinism_on_gpu():
    _, patched, x, target = pair("replknet")
    dw = dict(patched.named_parameters())["blocks.0.body.3.weight"]  # the 31x31 depthwise filter
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn_only: BN's backward has no deterministic kernel
    try:
        grads = []
        for _ in range(2):
            patched.zero_grad(set_to_none=True)
            with convwgrad.record_launches() as log:
                one_step(patched, x, target)
            grads.append(dw.grad.clone())
        one_step(patched, x, target)  # accumulates onto the second step's gradient
    finally:
        torch.use_deterministic_algorithms(False)
    assert {r.family for r in log} == {LARGE_FILTER_FAMILY}
    assert torch.equal(grads[0], grads[1])  # convwgrad's dW is bitwise deterministic
    assert relative_error(dw.grad, 2 * grads[1].double()) <= 1e-2
