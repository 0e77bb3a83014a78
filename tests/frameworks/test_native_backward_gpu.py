"""The routed layer's native backward on a CUDA GPU (skipped without one): for a layer pinned to each
family, the backwards after the first launch dW's kernels from C++ (counted), over NaN-poisoned dW
and workspace, and give the float64 reference's dW and stock's dX and bias gradient; unaligned
operands, side streams, open logs and CUDA-graph captures take the Python path and stay right."""

import copy

import pytest
import torch
from torch import nn

import convwgrad
from convwgrad.frameworks import torch_ops
from convwgrad.provider import ConvProblem, native
from convwgrad.provider.reference import TOLERANCE, reference_weight_grad, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

#: family: (N, C, spatial size, filter, layout); 'same' padding, depthwise, bf16 autocast
CASES = {
    "wgrad_staged-convnext-k7": ("wgrad_staged", 8, 96, (28, 28), 7, "channels_last"),
    "wgrad_staged-mobilenet-k3": ("wgrad_staged", 16, 144, (28, 28), 3, "channels_last"),
    "wgrad_merged-k31": ("wgrad_merged", 4, 128, (28, 28), 31, "contiguous"),
    "wgrad_shifted-k31": ("wgrad_shifted", 4, 128, (28, 28), 31, "channels_last"),
    "wgrad_shifted-k13-nchw": ("wgrad_shifted", 4, 64, (14, 14), 13, "contiguous"),
    "wgrad_shifted_mma-k31": ("wgrad_shifted_mma", 4, 128, (56, 56), 31, "channels_last"),
    "wgrad_direct-k5": ("wgrad_direct", 8, 240, (28, 28), 5, "channels_last"),
    "wgrad_splitk-k3": ("wgrad_splitk", 8, 64, (28, 28), 3, "contiguous"),
    "wgrad_short1d-k3": ("wgrad_short1d", 4, 256, (512,), 3, "contiguous"),
    "wgrad_merged-1d-k31": ("wgrad_merged", 4, 256, (512,), 31, "channels_last"),
}
CONVS = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


@pytest.fixture(autouse=True)
def native_backward_on(monkeypatch):
    """The native backward is opt-in (``CONVWGRAD_NATIVE_BACKWARD=1``); these tests are about it."""
    monkeypatch.setattr(torch_ops, "native_backward", True)


@pytest.fixture(autouse=True)
def poisoned():
    assert native.load() is not None, native.status()
    native.set_poison(True)
    yield
    native.set_poison(False)


def counts():
    native_count, fallback_count, driver = native.backward_stats()
    assert driver, "the CUDA driver's entry points were not found"
    return native_count, fallback_count


def to_layout(t, layout):
    if layout == "contiguous":
        return t.contiguous()
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


def layer(case, bias=True):
    family, n, c, size, k, layout = CASES[case]
    torch.manual_seed(0)
    stock = CONVS[len(size)](c, c, k, padding=k // 2, groups=c, bias=bias).cuda()
    if layout == "channels_last" and len(size) == 2:
        stock = stock.to(memory_format=torch.channels_last)
    patched = convwgrad.patch(copy.deepcopy(stock))
    return family, stock, patched, (n, c, *size), layout


def step(module, x, g):
    x = x.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = module(x)
    y.backward(g)
    return y, x.grad


def reference(stock, x, g, layout):
    """dW in float64 of the bf16 operands autocast hands the layer (on the GPU: large layers)."""
    x = to_layout(x.detach().bfloat16(), layout)
    problem = ConvProblem.from_tensors(x, list(stock.weight.shape), g, stride=1, padding=stock.padding[0],
                                       groups=stock.groups)
    return reference_weight_grad(problem, x, g, device="cuda")


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_family_launches_natively_after_the_first_backward_and_matches(case, pinned):
    family, stock, patched, shape, layout = layer(case)
    pinned(family)
    for index in range(3):
        x = to_layout(torch.randn(shape, device="cuda"), layout)
        g = to_layout(torch.randn(shape, device="cuda", dtype=torch.bfloat16), layout)
        before = counts()
        _, dx = step(patched, x, g)
        _, dx_stock = step(stock, x, g)
        torch.cuda.synchronize()
        native_count, fallback_count = counts()
        assert (native_count - before[0], fallback_count - before[1]) == ((0, 1) if index == 0 else (1, 0)), index
        memo = patched.__dict__["_convwgrad_route"][-1]
        assert memo[1].family == family  # the prepared call whose launches were installed
        assert torch.isfinite(patched.weight.grad).all(), "dW has unwritten (NaN) elements"
        expected = reference(stock, x, g, layout)
        assert relative_error(patched.weight.grad, expected) <= TOLERANCE["bf16"], index
        assert relative_error(dx, dx_stock.double()) <= TOLERANCE["bf16"]
        assert relative_error(patched.bias.grad, stock.bias.grad.double()) <= TOLERANCE["bf16"]
        assert patched.weight.grad.stride() == patched.weight.stride()
        for module in (stock, patched):
            module.zero_grad(set_to_none=True)


def test_unaligned_operands_side_streams_and_open_logs(pinned):
    family, stock, patched, shape, layout = layer("wgrad_staged-mobilenet-k3", bias=False)
    pinned(family)
    x = to_layout(torch.randn(shape, device="cuda"), layout)
    g = to_layout(torch.randn(shape, device="cuda", dtype=torch.bfloat16), layout)
    step(patched, x, g)  # installs
    expected = reference(stock, x, g, layout)
    # grad_output 2 bytes off 16-byte alignment, in the same strides: the Python path (which refuses
    # or copies as it always did), and the right dW
    storage = torch.empty(g.numel() + 8, dtype=g.dtype, device="cuda")
    shifted = storage[1:1 + g.numel()].view(g.permute(0, 2, 3, 1).shape).permute(0, 3, 1, 2)
    shifted.copy_(g)
    assert shifted.stride() == g.stride() and shifted.data_ptr() % 16
    patched.zero_grad(set_to_none=True)
    before = counts()
    try:
        step(patched, x, shifted)
    except ValueError as refused:  # the staged family's own refusal of unaligned operands, as before
        assert "aligned" in str(refused)
    else:
        assert relative_error(patched.weight.grad, expected) <= TOLERANCE["bf16"]
    assert counts()[0] == before[0]
    # a side stream: the launches go to the backward's current stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        patched.zero_grad(set_to_none=True)
        before = counts()
        step(patched, x, g)
    torch.cuda.synchronize()
    assert counts()[0] == before[0] + 1
    assert relative_error(patched.weight.grad, expected) <= TOLERANCE["bf16"]
    # an open log: Python computes and records dW
    patched.zero_grad(set_to_none=True)
    with convwgrad.record_launches() as log:
        step(patched, x, g)
    assert [r.family for r in log] == [family]
    assert relative_error(patched.weight.grad, expected) <= TOLERANCE["bf16"]


def test_a_captured_step_takes_the_python_path_and_replays_right(pinned):
    family, stock, patched, shape, layout = layer("wgrad_staged-convnext-k7")
    pinned(family)
    x = to_layout(torch.randn(shape, device="cuda"), layout).requires_grad_()
    g = to_layout(torch.randn(shape, device="cuda", dtype=torch.bfloat16), layout)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm: installs, then native
            patched.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                patched(x).backward(g)
    torch.cuda.current_stream().wait_stream(side)
    patched.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    before = counts()
    with torch.cuda.graph(graph):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            patched(x).backward(g)
    assert counts()[1] == before[1] + 1  # the capture's backward: Python's graph route
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
        g.copy_(torch.randn_like(g))
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(patched.weight.grad, reference(stock, x.detach(), g, layout)) <= TOLERANCE["bf16"]
