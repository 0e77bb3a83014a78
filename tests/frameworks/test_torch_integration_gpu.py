"""torch integration on the GPU: realistic block stacks under autocast bf16 and channels_last,
eager and torch.compile (inductor), patched against stock."""

import copy

import pytest
import torch
import torch.nn.functional as F

import convwgrad
from convwgrad.provider.reference import relative_error

from torch_models import STACKS, build

pytestmark = pytest.mark.gpu

BF16_TOL = 2e-2
#: inductor fuses and reorders the bf16 norm/activation backward of the compiled model, so its
#: other parameters' gradients drift further from stock eager than convwgrad's dW does
COMPILED_TOL = 5e-2


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
    if name == "replknet":  # 31x31: the merged family on CUDA (cuDNN keeps the small filters)
        assert len(log) == 2 and {r.family for r in log} == {"wgrad_merged"}
    assert_grads_close(stock, patched)


@pytest.mark.parametrize("name", ["replknet", "convnext"])
def test_torch_compile_inductor_matches_stock(name):
    torch._dynamo.reset()
    stock, patched, x, target = pair(name)
    one_step(stock, x, target)
    compiled = torch.compile(patched)
    with convwgrad.record_launches() as log:
        one_step(compiled, x, target)
    torch.cuda.synchronize()
    # compiled, every patched layer goes through the op, which picks its plan at run time
    assert len(log) == len(convwgrad.patched_modules(patched))
    assert len([r for r in log if r.family != "aten"]) == len(convwgrad_layers(patched, x))
    assert_grads_close(stock, patched, COMPILED_TOL)


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
    assert {r.family for r in log} == {"wgrad_merged"}
    assert torch.equal(grads[0], grads[1])  # convwgrad's dW is bitwise deterministic
    assert relative_error(dw.grad, 2 * grads[1].double()) <= 1e-2
