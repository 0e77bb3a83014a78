"""torch integration on the CPU (kernels through the Triton interpreter): a patched training step
equals the stock one, accumulation, unpatch, the global switch, opcheck, torch.compile."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convwgrad
from convwgrad.provider.reference import relative_error

TRITON_FAMILIES = {"wgrad_merged", "wgrad_splitk"}


class DepthwiseSeparable(nn.Module):
    """A tiny MobileNet-like stack: depthwise 3x3, pointwise, depthwise 5x5 stride 2 (reflect
    padding), a grouped (cpg = 2) 3x3 with bias, a pooled head."""

    def __init__(self, channels=16, classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 1, bias=False),
            nn.ReLU(),
            nn.Conv2d(2 * channels, 2 * channels, 5, stride=2, padding=2, groups=2 * channels,
                      padding_mode="reflect"),
            nn.ReLU(),
            nn.Conv2d(2 * channels, 2 * channels, 3, padding=1, groups=channels, bias=True),
        )
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def make_pair(seed=0, **kwargs):
    torch.manual_seed(seed)
    stock = DepthwiseSeparable(**kwargs)
    patched = convwgrad.patch(copy.deepcopy(stock))
    return stock, patched


def step(model, x, target):
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach()


def batch(seed, channels=16, size=9, n=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, channels, size, size, generator=g), torch.randint(0, 5, (n,), generator=g)


def assert_grads_close(stock, patched, tol):
    for (name, a), (_, b) in zip(stock.named_parameters(), patched.named_parameters()):
        assert b.grad is not None, f"{name}: no gradient"
        assert b.grad.dtype == a.grad.dtype == a.dtype, name
        assert relative_error(b.grad, a.grad.double()) <= tol, f"{name}: {relative_error(b.grad, a.grad.double()):.2e}"


def assert_grads_equal(stock, patched):
    """Bitwise: the patched model ran torch's own path."""
    for (name, a), (_, b) in zip(stock.named_parameters(), patched.named_parameters()):
        assert torch.equal(a.grad, b.grad), name


def test_patch_switches_only_grouped_convs_and_keeps_the_state_dict():
    stock, patched = make_pair()
    assert convwgrad.patched_modules(patched) == ["features.0", "features.5", "features.7"]
    assert type(patched.features[3]) is nn.Conv2d  # pointwise, groups = 1: untouched
    assert isinstance(patched.features[0], nn.Conv2d)
    before, after = stock.state_dict(), patched.state_dict()
    assert list(before) == list(after)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_training_step_patched_equals_stock_and_runs_convwgrad():
    stock, patched = make_pair()
    x, target = batch(1)
    loss_stock = step(stock, x, target)
    with convwgrad.record_launches() as log:
        loss_patched = step(patched, x, target)
    assert torch.equal(loss_stock, loss_patched)  # forward is torch's own
    assert_grads_close(stock, patched, 1e-5)
    assert len(log) == 3 and {r.family for r in log} <= TRITON_FAMILIES, log


def test_gradient_accumulates_over_two_steps():
    stock, patched = make_pair()
    for seed in (2, 3):
        x, target = batch(seed)
        step(stock, x, target)
        step(patched, x, target)
    assert_grads_close(stock, patched, 1e-5)
    single, _ = make_pair()
    step(single, *batch(2))
    w = patched.features[0].weight
    assert relative_error(w.grad, single.features[0].weight.grad.double()) > 1e-3  # accumulated, not overwritten


def test_unpatch_restores_stock_behaviour():
    stock, patched = make_pair()
    convwgrad.unpatch(patched)
    assert convwgrad.patched_modules(patched) == []
    assert all(type(m) in (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.Linear, nn.Sequential, DepthwiseSeparable)
               for m in patched.modules())
    x, target = batch(4)
    step(stock, x, target)
    with convwgrad.record_launches() as log:
        step(patched, x, target)
    assert log == []
    assert_grads_equal(stock, patched)


def test_disabled_falls_back_to_torch_everywhere():
    stock, patched = make_pair()
    x, target = batch(5)
    step(stock, x, target)
    assert convwgrad.is_enabled()
    with convwgrad.disabled(), convwgrad.record_launches() as log:
        assert not convwgrad.is_enabled()
        step(patched, x, target)
    assert convwgrad.is_enabled() and log == []
    assert_grads_equal(stock, patched)


def test_layers_planned_for_torch_run_stock_torch_without_the_op():
    from convwgrad.provider.manager import build_plugin_manager, use_plugin_manager

    stock, patched = make_pair()
    x, target = batch(13)
    step(stock, x, target)
    only_aten = build_plugin_manager(default_plugins=("convwgrad.plugins.aten_fallback:plugin",
                                                      "convwgrad.selectors"), load_entrypoints=False)
    with use_plugin_manager(only_aten), convwgrad.record_launches() as log:
        plans = convwgrad.layer_plans(patched, x)
        step(patched, x, target)
    assert [p.family for _, p in plans] == ["aten"] * 3
    assert log == []  # bypassed: no custom op, no dispatch
    assert_grads_equal(stock, patched)


def test_without_a_weight_gradient_the_stock_call_runs():
    """Inference and frozen weights want no dW: the patched layer is then the stock call."""
    stock, patched = make_pair()
    x, _ = batch(5)
    with convwgrad.record_launches() as log, torch.no_grad():
        expected, got = stock(x), patched(x)
    assert log == [] and torch.equal(expected, got)
    patched.requires_grad_(False)
    x.requires_grad_()
    with convwgrad.record_launches() as log:
        patched(x).sum().backward()
    assert log == [] and x.grad is not None


def test_eager_layers_use_the_autograd_function_not_the_op(monkeypatch):
    """Eager calls take the plain autograd.Function (none of the custom op's wrappers on the host
    path) and still compute dW through convwgrad, with the stock gradients."""
    from convwgrad.frameworks import torch_ops

    stock, patched = make_pair()
    x, target = batch(7)
    op_calls = []
    monkeypatch.setattr(torch_ops, "conv", lambda *a: op_calls.append(1) or torch.ops.convwgrad.conv.default(*a))
    step(stock, x, target)
    with convwgrad.record_launches() as log:
        step(patched, x, target)
    assert op_calls == [] and len(log) == 3 and {r.family for r in log} <= TRITON_FAMILIES, log
    assert_grads_close(stock, patched, 1e-5)


def test_deterministic_algorithms_give_bitwise_equal_gradients():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(2):
            _, patched = make_pair()
            step(patched, *batch(6))
            grads.append([p.grad.clone() for p in patched.parameters()])
    finally:
        torch.use_deterministic_algorithms(previous)
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_step_matches_stock(dtype):
    stock, patched = make_pair()
    x, target = batch(7)
    with torch.autocast("cpu", dtype=dtype):
        step(stock, x, target)
        with convwgrad.record_launches() as log:
            step(patched, x, target)
    assert {r.family for r in log} <= TRITON_FAMILIES and len(log) == 3
    assert all(r.kernel_name.split("_")[2] == {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype] for r in log)
    assert_grads_close(stock, patched, 2e-2)


def test_channels_last_model_matches_stock():
    stock, patched = make_pair()
    stock, patched = stock.to(memory_format=torch.channels_last), patched.to(memory_format=torch.channels_last)
    x, target = batch(8)
    x = x.contiguous(memory_format=torch.channels_last)
    step(stock, x, target)
    with convwgrad.record_launches() as log:
        step(patched, x, target)
    assert len(log) == 3
    assert_grads_close(stock, patched, 1e-5)


@pytest.mark.parametrize("rank, padding", [(1, 3), (1, "same"), (3, 1), (2, "same"), (2, "valid")])
def test_functional_drop_in_matches_torch(rank, padding):
    g = torch.Generator().manual_seed(rank)
    channels, k = 8, 4 if padding == "same" else 3  # an even filter: 'same' pads one more on the right
    x = torch.randn(2, channels, *([6] * rank), generator=g, requires_grad=True)
    w = torch.randn(channels, 1, *([k] * rank), generator=g, requires_grad=True)
    b = torch.randn(channels, generator=g, requires_grad=True)
    stock_fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    ours_fn = {1: convwgrad.functional.conv1d, 2: convwgrad.functional.conv2d, 3: convwgrad.functional.conv3d}[rank]
    y = stock_fn(x, w, b, 1, padding, 1, channels)
    grads = torch.autograd.grad(y.square().sum(), (x, w, b))
    with convwgrad.record_launches() as log:
        y2 = ours_fn(x, w, b, 1, padding, 1, channels)
        grads2 = torch.autograd.grad(y2.square().sum(), (x, w, b))
    assert torch.equal(y, y2) and len(log) == 1 and log[0].family in TRITON_FAMILIES
    for a, c in zip(grads, grads2):
        assert relative_error(c, a.double()) <= 1e-5


def test_functional_bad_arguments_name_the_field():
    x, w = torch.randn(2, 4, 5, 5), torch.randn(4, 1, 3, 3)
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        convwgrad.functional.conv2d(x, w, None, 2, "same", 1, 4)
    with pytest.raises(ValueError, match="stride must be an int or 2 ints"):
        convwgrad.functional.conv2d(x, w, None, (1, 1, 1), 1, 1, 4)
    with pytest.raises(ValueError, match="conv2d needs a 4-D input"):
        convwgrad.functional.conv2d(x[0], w, None, 1, 1, 1, 4)


def test_op_errors_name_the_field():
    x, dy = torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5)
    with pytest.raises(ValueError, match="input channels per group"):
        torch.ops.convwgrad.conv_weight(x, dy, [4, 2, 3, 3], [1, 1], [1, 1], [1, 1], 4)
    with pytest.raises(ValueError, match="grad_output shape"):
        torch.ops.convwgrad.conv_weight(x, dy[:, :, :4], [4, 1, 3, 3], [1, 1], [1, 1], [1, 1], 4)


def test_opcheck_conv_weight():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 8, 5, 5, generator=g)
    dy = torch.randn(2, 8, 5, 5, generator=g)
    torch.library.opcheck(torch.ops.convwgrad.conv_weight.default, (x, dy, [8, 1, 3, 3], [1, 1], [1, 1], [1, 1], 8))
    x_cl, dy_cl = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(torch.ops.convwgrad.conv_weight.default,
                          (x_cl, dy_cl, [8, 1, 3, 3], [1, 1], [1, 1], [1, 1], 8))


def test_opcheck_conv_with_its_autograd():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(2, 8, 5, 5, generator=g, requires_grad=True)
    w = torch.randn(8, 1, 3, 3, generator=g, requires_grad=True)
    b = torch.randn(8, generator=g, requires_grad=True)
    torch.library.opcheck(torch.ops.convwgrad.conv.default, (x, w, b, [1, 1], [1, 1], [1, 1], 8))
    torch.library.opcheck(torch.ops.convwgrad.conv.default, (x, w, None, [2, 2], [0, 0], [1, 1], 8))


def test_torch_compile_gives_the_same_gradients():
    torch._dynamo.reset()
    _, eager = make_pair()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)
    x, target = batch(11)
    step(eager, x, target)
    with convwgrad.record_launches() as log:
        step(compiled, x, target)
    assert len(log) == 3 and {r.family for r in log} <= TRITON_FAMILIES  # the op ran inside the compiled graph
    assert_grads_close(eager, compiled_model, 1e-6)


def test_explain_model_names_each_grouped_layer_and_its_kernel():
    _, patched = make_pair()
    text = convwgrad.explain_model(patched, batch(12)[0])
    lines = [line for line in text.splitlines() if not line.startswith(" ")]
    assert [line.split(":")[0] for line in lines] == ["features.0", "features.5", "features.7"]
    assert "wgrad_merged" in text and "G=32" in text


def test_layer_plans_pose_the_problem_torch_computes():
    model = nn.Sequential(nn.Conv2d(8, 8, 4, padding="same", groups=8), nn.Identity())
    (name, chosen), = convwgrad.layer_plans(model, torch.randn(2, 8, 7, 7))
    # as patching.grouped_conv dispatches it: 'same' with an even kernel pads the input by one
    # first (F.pad), then symmetrically
    assert name == "0" and chosen.problem.input_size == (8, 8) and chosen.problem.padding == ((1, 1), (1, 1))
    reflect = nn.Conv2d(8, 8, 3, padding=1, groups=8, padding_mode="reflect")
    (_, chosen), = convwgrad.layer_plans(reflect, torch.randn(2, 8, 7, 7))
    assert chosen.problem.input_size == (9, 9) and chosen.problem.padding == ((0, 0), (0, 0))


class Parallel(nn.Module):
    """Every layer applied to the same input, so layers of any padding sit in one model."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        return sum(layer(x).square().mean() for layer in self.layers)


def _layers(conv, channels, mode):
    return [conv(channels, channels, k, padding=padding, groups=channels, padding_mode=mode)
            for padding in ("same", "valid", 1, 2) for k in (3, 4)]


@pytest.mark.parametrize("mode", ["zeros", "reflect", "circular"])
@pytest.mark.parametrize("conv, shape", [(nn.Conv2d, (2, 4, 7, 6)), (nn.Conv1d, (2, 4, 9))], ids=["2d", "1d"])
def test_layer_plans_report_the_problem_dispatched(conv, shape, mode):
    """Fuzzing, issue 9: 'same'/'valid' with a padding mode crashed explain, and an even kernel's
    'same' was reported as in=8x8 p=(1,2) while in=9x9 p=1 was dispatched."""
    torch.manual_seed(3)
    model = Parallel(*_layers(conv, shape[1], mode))
    x = torch.randn(shape)
    reported = convwgrad.layer_plans(model, x)
    assert [name for name, _ in reported] == [f"layers.{i}" for i in range(8)]

    with convwgrad.record_launches() as log:
        convwgrad.patch(model)(x).backward()
    backward_order = list(reversed(reported))  # the backward reaches the last layer first
    assert [r.problem for r in log] == [p.problem for _, p in backward_order]
    assert [r.kernel_name for r in log] == [p.kernel_name for _, p in backward_order]


def test_layer_plans_under_autocast_report_the_cast_problem():
    model = Parallel(*_layers(nn.Conv2d, 4, "reflect")[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reported = convwgrad.layer_plans(model, torch.randn(2, 4, 7, 7))
    assert {p.problem.dtype for _, p in reported} == {"bf16"}


def test_layer_plans_name_a_layer_convwgrad_does_not_compute():
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=4)).double()
    with pytest.raises(ValueError, match=r"^0: input \(2, 4, 6, 6\) torch.float64, weight \(4, 1, 3, 3\).* is no problem "
                                         r"convwgrad computes \(the patched layer runs stock torch\)$"):
        convwgrad.layer_plans(model, torch.randn(2, 4, 6, 6, dtype=torch.float64))


class SameConv2d(nn.Conv2d):
    """Like timm's Conv2dSame: a subclass that pads and calls F.conv2d itself, which patch() skips."""

    def forward(self, x):
        return F.conv2d(F.pad(x, (1, 2, 1, 2)), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


def test_intercept_functional_reroutes_direct_f_conv_calls():
    torch.manual_seed(14)
    stock = nn.Sequential(SameConv2d(8, 8, 4, groups=8), nn.Conv2d(8, 4, 1))
    ours = copy.deepcopy(stock)
    assert convwgrad.patched_modules(convwgrad.patch(ours)) == []  # a subclass: left alone
    x = torch.randn(2, 8, 7, 7)
    stock(x).square().sum().backward()
    with convwgrad.intercept_functional(), convwgrad.record_launches() as log:
        ours(x).square().sum().backward()
    assert len(log) == 1 and log[0].family in TRITON_FAMILIES  # the grouped call only; groups = 1 stays torch's
    assert_grads_close(stock, ours, 1e-5)
    with convwgrad.record_launches() as log:  # outside the block: torch's own again
        ours(x).sum().backward()
    assert log == []
