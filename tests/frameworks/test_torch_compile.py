"""torch.compile with inductor on the CPU (kernels through the Triton interpreter): a compiled
patched model's gradients equal the compiled stock model's, and one layer through
``torch.ops.convwgrad.conv`` compiled with fullgraph=True equals the eager op; convwgrad's family
runs inside the compiled backward. fp32, tiny shapes: inductor's C++ compile dominates (about
30 s cold, a few seconds once its cache under /tmp is warm)."""

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convwgrad
from convwgrad.provider import ConvProblem
from convwgrad.provider.reference import relative_error

from op_checks import check_compiled_op

FP32_TOL = 1e-5


class TinyNet(nn.Module):
    """Depthwise 3x3 (C = 16: the merged family on the interpreter target), BatchNorm, ReLU, a
    grouped 3x3 (cpg = 2, stride 2, bias: the split-K family), pointwise 1x1, a pooled head."""

    def __init__(self, channels=16, classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels // 2),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 1),
        )
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def step(model, x, target):
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach()


def test_inductor_compiled_patched_model_matches_compiled_stock():
    torch._dynamo.reset()
    torch.manual_seed(0)
    stock = TinyNet()
    patched = convwgrad.patch(copy.deepcopy(stock))
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(2, 16, 8, 8, generator=g), torch.randint(0, 5, (2,), generator=g)
    plans = convwgrad.layer_plans(patched, x)
    assert [(name, p.family) for name, p in plans] == [("features.0", "wgrad_merged"), ("features.3", "wgrad_splitk")]

    loss_stock = step(torch.compile(stock), x, target)
    with convwgrad.record_launches() as log:
        loss_patched = step(torch.compile(patched, fullgraph=True), x, target)  # fullgraph: no graph break

    # backward runs the last layer first
    assert [r.kernel_name for r in log] == [p.kernel_name for _, p in reversed(plans)], log
    assert relative_error(loss_patched, loss_stock.double()) <= FP32_TOL
    for (name, a), (_, b) in zip(stock.named_parameters(), patched.named_parameters()):
        assert b.grad is not None and b.grad.dtype == a.grad.dtype == torch.float32, name
        err = relative_error(b.grad, a.grad.double())
        assert err <= FP32_TOL, f"{name}: patched compiled vs stock compiled {err:.2e}"


LAYERS = {
    # depthwise: the merged family
    "depthwise-3x3": (dict(batch=2, groups=16, in_channels=16, input_size=(7, 7), filter_size=3, padding=1), False),
    # grouped, cpg = 2, strided, with bias: the split-K family
    "grouped-s2-bias": (dict(batch=2, groups=4, in_channels=8, input_size=(9, 9), filter_size=3, stride=2,
                              padding=1), True),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_inductor_compiled_op_matches_eager_op(name):
    kwargs, bias = LAYERS[name]
    problem = ConvProblem.build(**kwargs, dtype="fp32")
    family = check_compiled_op(problem, "cpu", bias=bias, seed=len(name), other_grads_tol=1e-6)
    assert family == {"depthwise-3x3": "wgrad_merged", "grouped-s2-bias": "wgrad_splitk"}[name]


def test_a_compiled_layer_adds_its_bias_outside_the_op():
    """Inductor fuses a bias add that follows the op into its next kernel; one inside the op is an
    eager elementwise kernel over the whole output (0.36 ms a ConvNeXt-T step on the H200)."""
    nodes = []

    def backend(gm, example_inputs):
        nodes.extend(node for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = convwgrad.patch(nn.Conv2d(16, 16, 3, padding=1, groups=16))
    stock = copy.deepcopy(layer)
    convwgrad.unpatch(stock)
    x = torch.randn(2, 16, 6, 6)
    out = torch.compile(layer, backend=backend, fullgraph=True)(x)
    convs = [node for node in nodes if node.target is torch.ops.convwgrad.conv.default]
    assert len(convs) == 1 and convs[0].args[2] is None, [(n.target, n.args) for n in nodes]
    assert relative_error(out, stock(x).double()) < FP32_TOL


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_compiled_biased_layers_of_every_rank_match_stock_gradients(rank):
    """The bias added outside the op: its gradient (and dW, dX) as stock torch's, 1-D to 3-D."""
    torch._dynamo.reset()
    torch.manual_seed(rank)
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[rank]
    stock = conv(8, 8, 3, padding=1, groups=8)
    patched = convwgrad.patch(copy.deepcopy(stock))
    g = torch.Generator().manual_seed(10 + rank)
    x = torch.randn(2, 8, *([5] * rank), generator=g)
    dy = torch.randn(2, 8, *([5] * rank), generator=g)
    grads = []
    for model in (stock, torch.compile(patched, fullgraph=True)):
        leaf = x.clone().requires_grad_()
        model(leaf).backward(dy)
        grads.append((leaf.grad, model.weight.grad if model is stock else patched.weight.grad,
                      model.bias.grad if model is stock else patched.bias.grad))
    for want, got, name in zip(grads[0], grads[1], ("dX", "dW", "dbias")):
        assert relative_error(got, want.double()) < FP32_TOL, name


def _compiled_backward_targets(model, x, dynamic):
    """The call targets of the backward graph AOTAutograd traces for ``model(x).sum()``, and dX."""
    from torch._dynamo.backends.common import aot_autograd

    targets = []

    def forward_compiler(gm, example_inputs):
        return gm.forward

    def backward_compiler(gm, example_inputs):
        targets.extend(node.target for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    leaf = x.clone().requires_grad_()
    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=True)(leaf).sum().backward()
    return targets, leaf.grad


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_compiled_layer_planned_for_torch_backpropagates_through_one_stock_call(dynamic):
    """Where plan() gives dW to torch for eager and graph launches, the compiled backward is
    stock's single convolution_backward (dX, dW, dbias), not dX plus the opaque dW op (~45 us of
    host time a layer on the H200); planned for a convwgrad family, or traced with symbolic
    shapes, it keeps the op. Gradients equal stock torch's either way."""
    from convwgrad.provider.manager import build_plugin_manager, use_plugin_manager

    torch.manual_seed(0)
    stock = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    x = torch.randn(2, 8, 6, 6)
    reference = x.clone().requires_grad_()
    stock(reference).sum().backward()
    only_aten = build_plugin_manager(default_plugins=("convwgrad.plugins.aten_fallback:plugin", "convwgrad.selectors"),
                                     load_entrypoints=False)
    for manager, op_expected in ((None, True), (only_aten, dynamic)):
        patched = convwgrad.patch(copy.deepcopy(stock))
        with use_plugin_manager(manager) if manager is not None else contextlib.nullcontext():
            targets, dx = _compiled_backward_targets(patched, x, dynamic)
        ops = [t for t in targets if t is torch.ops.convwgrad.conv_weight.default]
        backwards = [t for t in targets if t is torch.ops.aten.convolution_backward.default]
        assert bool(ops) == op_expected and len(backwards) == 1, targets
        assert relative_error(patched.weight.grad, stock.weight.grad.double()) < FP32_TOL
        assert relative_error(patched.bias.grad, stock.bias.grad.double()) < FP32_TOL
        assert relative_error(dx, reference.grad.double()) < FP32_TOL


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_the_compiled_backward_weighs_graph_launches_only_under_inductors_cuda_graphs(monkeypatch, cudagraphs):
    """A layer whose dW is torch's for eager launches but a convwgrad family's for graph launches:
    compiled without CUDA graphs its backward is stock's single call; with inductor's CUDA graphs
    (mode="reduce-overhead" sets triton.cudagraphs while it traces) it keeps the op, whose graph
    route the capture takes. Simulated on the CPU: the interpreter counts as a graph backend and a
    router gives graph launches wgrad_splitk, eager ones torch."""
    import torch._inductor.config as inductor_config

    from convwgrad.frameworks import torch_ops
    from convwgrad.provider import dispatch

    monkeypatch.setattr(dispatch, "_GRAPH_BACKENDS", (*dispatch._GRAPH_BACKENDS, "interpreter", "cpu"))
    monkeypatch.setattr(dispatch, "_GRAPH_ROUTES", True)
    real_plan = torch_ops.plan
    monkeypatch.setattr(torch_ops, "plan", lambda problem, target: real_plan(
        problem, target, family="wgrad_splitk" if target.launch == "graph" else "aten"))
    dispatch.clear_prepared_calls()  # also what _stock_backward keeps per signature
    torch.manual_seed(2)
    stock = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    patched = convwgrad.patch(copy.deepcopy(stock))
    x = torch.randn(2, 8, 6, 6)
    with inductor_config.patch({"triton.cudagraphs": cudagraphs}):
        targets, _ = _compiled_backward_targets(patched, x, dynamic=False)
    ops = [t for t in targets if t is torch.ops.convwgrad.conv_weight.default]
    assert bool(ops) == cudagraphs, targets
    reference = x.clone().requires_grad_()
    stock(reference).sum().backward()
    assert relative_error(patched.weight.grad, stock.weight.grad.double()) < FP32_TOL
    dispatch.clear_prepared_calls()  # nothing this router decided outlives the test


def test_inductor_lowers_the_ops_forward_as_a_stock_convolution():
    """The op carries convwgrad's backward; once AOTAutograd has split the graphs its forward is
    aten.convolution, which inductor then lowers itself (no dispatcher and Python call a layer)."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(3)
    stock = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    patched = convwgrad.patch(copy.deepcopy(stock))
    x = torch.randn(2, 8, 6, 6)
    torch._dynamo.reset()
    leaf = x.clone().requires_grad_()
    compiled = torch.compile(patched, fullgraph=True)
    (out,), codes = run_and_get_code(lambda: [compiled(leaf)])
    forward_code = "\n".join(codes)
    calls = [line for line in forward_code.splitlines() if "convwgrad.conv" in line and not line.strip().startswith("#")]
    assert calls == [] and "extern_kernels.convolution" in forward_code, calls
    out.sum().backward()
    reference = x.clone().requires_grad_()
    stock(reference).sum().backward()
    assert relative_error(out, stock(x).double()) < FP32_TOL
    assert relative_error(patched.weight.grad, stock.weight.grad.double()) < FP32_TOL
    assert relative_error(leaf.grad, reference.grad.double()) < FP32_TOL


def _users_pass(seen):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class UsersPass(CustomGraphPass):
        def __call__(self, graph):
            seen.append([node.target for node in graph.nodes if node.op == "call_function"])

        def uuid(self):
            return "users-pass"

    return UsersPass()


def _graph_with_one_op():
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    graph.output(graph.call_function(torch.ops.convwgrad.conv.default, (x, w, None, [2, 2], [1, 1], [1, 1]),
                                     {"groups": 8}))
    return graph, x, w


def test_the_forward_lowering_sits_beside_a_users_post_grad_passes():
    import torch._inductor.config as inductor_config
    from torch._inductor import custom_graph_pass

    from convwgrad.frameworks import torch_ops

    if not hasattr(custom_graph_pass, "get_custom_graph_passes"):
        pytest.skip("this torch's inductor takes one post-grad pass (see the next test)")
    seen = []
    users = _users_pass(seen)
    with inductor_config.patch({"post_grad_custom_post_pass": users}):
        torch_ops._lower_forward_in_inductor()
        installed = inductor_config.post_grad_custom_post_pass
        assert isinstance(installed, list) and installed[1] is users and installed[0].convwgrad_forward, installed
        torch_ops._lower_forward_in_inductor()  # there already: nothing added
        assert inductor_config.post_grad_custom_post_pass == installed
    sources, fingerprint = installed[0].uuid()
    assert isinstance(sources, str) and "wgrad_merged" in fingerprint  # plugins by name, for the caches' keys
    graph, x, w = _graph_with_one_op()
    installed[0](graph)
    node = next(n for n in graph.nodes if n.op == "call_function")
    assert node.target is torch.ops.aten.convolution.default and node.kwargs == {}
    assert node.args == (x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 8)
    assert seen == []  # the user's pass is inductor's to run, not ours


def test_with_one_post_grad_pass_the_forward_lowering_takes_only_an_empty_slot(monkeypatch):
    """torch 2.11's inductor takes a single pass: a user's is left alone (the forward stays the op)."""
    import torch._inductor.config as inductor_config
    from torch._inductor import custom_graph_pass

    from convwgrad.frameworks import torch_ops

    monkeypatch.delattr(custom_graph_pass, "get_custom_graph_passes", raising=False)
    users = _users_pass([])
    with inductor_config.patch({"post_grad_custom_post_pass": users}):
        torch_ops._lower_forward_in_inductor()
        assert inductor_config.post_grad_custom_post_pass is users
    with inductor_config.patch({"post_grad_custom_post_pass": None}):
        torch_ops._lower_forward_in_inductor()
        assert inductor_config.post_grad_custom_post_pass.convwgrad_forward


@pytest.mark.parametrize("kind", ["list", "inference-aware"])
def test_a_users_post_grad_passes_still_run_when_a_patched_model_compiles(kind):
    """Inductor runs the user's passes itself, an inference-aware one with its flag."""
    import torch._inductor.config as inductor_config
    from torch._inductor import custom_graph_pass

    if not hasattr(custom_graph_pass, "get_custom_graph_passes"):
        pytest.skip("this torch's inductor takes one post-grad pass")
    seen = []
    if kind == "list":
        users = [_users_pass(seen)]
    else:
        class Aware(custom_graph_pass.CustomInferenceAwareGraphPass):
            def __call__(self, graph, is_inference):
                seen.append(is_inference)

            def uuid(self):
                return "aware"

        users = Aware()
    torch.manual_seed(4)
    stock = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    patched = convwgrad.patch(copy.deepcopy(stock))
    x = torch.randn(2, 8, 6, 6)
    torch._dynamo.reset()
    with inductor_config.patch({"post_grad_custom_post_pass": users, "fx_graph_cache": False}):
        leaf = x.clone().requires_grad_()
        out = torch.compile(patched, fullgraph=True)(leaf)
        out.sum().backward()
    assert seen, "the user's pass did not run"
    assert relative_error(out, stock(x).double()) < FP32_TOL


def test_a_trace_is_told_by_fake_tensors_not_by_the_compiling_flag():
    """torch 2.11 (the H200 machine's) sets torch.compiler.is_compiling() only for torch.export, so
    while AOTAutograd traces the op's backward for torch.compile it reads False there. Fake tensors
    mark the trace: on them, graph launches count only under inductor's CUDA graphs; on real
    tensors (an eager call a capture may record) always."""
    import torch._inductor.config as inductor_config
    from torch._subclasses.fake_tensor import FakeTensorMode

    from convwgrad.frameworks.torch_ops import _graph_launches_possible

    assert not torch.compiler.is_compiling()
    with FakeTensorMode():
        fake = torch.empty(2, 8, 6, 6)
    for cudagraphs in (False, True):
        with inductor_config.patch({"triton.cudagraphs": cudagraphs}):
            assert _graph_launches_possible(fake) is cudagraphs
            assert _graph_launches_possible(torch.empty(2, 8, 6, 6)) is True
