"""CUDA graphs on the GPU: a patched training step (forward and backward) captured whole with
``torch.cuda.graph`` and under ``torch.compile(mode="reduce-overhead")``. convwgrad's kernels are
launched while the graph is captured (the launch log shows them), and replays on fresh data give
the gradients of uncaptured runs: convwgrad's dW bitwise (its kernels are deterministic), the
other gradients within bf16 noise."""

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
from convwgrad.provider.reference import TOLERANCE

from grad_checks import assert_within_bf16_noise, fp32_reference_grads, grads
from torch_models import LARGE_FILTER_FAMILY, build

pytestmark = pytest.mark.gpu

#: replays after the capture, each on a fresh batch
REPLAYS = 3
#: steps of a reduce-overhead model: cudagraph trees run a graph eagerly once (warm-up), record
#: it on the second call and replay it from the third on
COMPILED_STEPS = 5

#: what the captured steps must launch for the 31x31 layers
ROUTED_FAMILY = LARGE_FILTER_FAMILY
#: what small depthwise layers launch from CUDA graphs (routing.STAGED_GRAPH_TAPS)
GRAPH_FAMILY = "wgrad_staged"


def autocast_step(model, x, target):
    # cache_enabled=False: autocast's cache of cast weights must not outlive a captured region
    # (torch's CUDA-graph notes, "Usage with torch.cuda.amp")
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach()


def patched_stack(name, batch=16, seed=1):
    """A block stack of torch_models.py on CUDA in channels_last, patched; a fresh-batch maker."""
    stock, (channels, size) = build(name)
    patched = convwgrad.patch(stock.cuda().to(memory_format=torch.channels_last))
    g = torch.Generator(device="cuda").manual_seed(seed)

    def fresh_batch():
        x = torch.randn(batch, channels, size, size, device="cuda", generator=g)
        return x.contiguous(memory_format=torch.channels_last), torch.randint(0, 10, (batch,), device="cuda", generator=g)

    return patched, fresh_batch


def replknet(batch=16):
    """The RepLKNet-like stack (two 31x31 depthwise layers, BatchNorm), patched; a fresh-batch maker."""
    return patched_stack("replknet", batch)


def reduce_overhead_steps(model, fresh_batch, before_compile=lambda: None):
    """COMPILED_STEPS steps of ``model`` under torch.compile(mode="reduce-overhead") beside a copy
    compiled in default mode (no CUDA graphs), on the same fresh batches; each step's gradients
    within bf16 noise of the ungraphed ones, and inductor's CUDA graphs used. Returns, per step,
    (the families convwgrad launched, the graphed gradients, the ungraphed ones).
    ``before_compile`` runs after the copy is made, right before compiling."""
    from torch._dynamo.utils import counters

    plain = copy.deepcopy(model)
    before_compile()
    graphed, compiled = torch.compile(model, mode="reduce-overhead"), torch.compile(plain)
    steps = []
    for _ in range(COMPILED_STEPS):
        x, target = fresh_batch()
        torch.compiler.cudagraph_mark_step_begin()
        model.zero_grad(set_to_none=True)
        with convwgrad.record_launches() as log:
            autocast_step(graphed, x, target)
        torch.cuda.synchronize()
        got = grads(model)  # copies: the next replay overwrites the graph's outputs
        plain.zero_grad(set_to_none=True)
        autocast_step(compiled, x, target)
        torch.cuda.synchronize()
        want = grads(plain)
        assert_within_bf16_noise(got, want, fp32_reference_grads(plain, x, target), what="reduce-overhead vs default")
        steps.append(([r.family for r in log], got, want))
    assert counters["inductor"]["cudagraph_skips"] == 0, "inductor did not use CUDA graphs"
    return steps


def merged_layers(model, x) -> list[str]:
    """Names of the layers whose dW the plan gives to a Triton family (asserted: both 31x31)."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        plans = convwgrad.layer_plans(model, x)
    names = [name for name, p in plans if p.family == ROUTED_FAMILY]
    assert names == ["blocks.0.body.3", "blocks.1.body.3"], [(name, p.kernel_name) for name, p in plans]
    return names


def save_operands(model, names) -> dict:
    """Forward hooks that copy each named layer's input, and a tensor hook its output's gradient,
    into tensors allocated on the first (uncaptured) call: captured with the step, the copies run
    on every replay, so afterwards they hold the (x, dy) the replayed dW was computed from."""
    saved = {}

    def keep(name, slot, tensor):
        if name not in saved:
            saved[name] = [None, None]
        if saved[name][slot] is None:
            saved[name][slot] = torch.empty_like(tensor)
        saved[name][slot].copy_(tensor)

    def hook(module, args, output, name):
        keep(name, 0, args[0].detach().to(torch.bfloat16))  # what the op gets under autocast (a no-op if bf16)
        output.register_hook(lambda grad: keep(name, 1, grad))  # returns None: the gradient is unchanged

    for name in names:
        model.get_submodule(name).register_forward_hook(functools.partial(hook, name=name))
    return saved


def assert_dw_is_convwgrads_on(model, names, saved, got):
    """Each named layer's dW in ``got`` is bitwise the eager op's on the saved (x, dy)."""
    for name in names:
        module = model.get_submodule(name)
        x, dy = saved[name]
        with convwgrad.record_launches() as log:
            dw = torch.ops.convwgrad.conv_weight(x, dy, list(module.weight.shape), list(module.stride),
                                                 list(module.padding), list(module.dilation), module.groups)
        assert [r.family for r in log] == [ROUTED_FAMILY]
        replayed = got[f"{name}.weight"]
        assert replayed.dtype == torch.float32 and dw.dtype == torch.bfloat16  # autocast: fp32 weight, bf16 op
        assert torch.equal(replayed, dw.float()), f"{name}: {relative_error(replayed, dw.double()):.2e} from the op"


def test_whole_network_capture_of_a_patched_step_replays_eager_gradients(no_tf32):
    """torch's whole-network capture recipe (CUDA semantics notes): warm up on a side stream,
    grads set to None so the captured backward allocates them in the graph's pool and each replay
    overwrites them (grads zeroed with set_to_none=False would be accumulated into by every
    replay unless zeroed before it), capture forward and backward on static inputs, copy fresh
    data in and replay. Each replay: the dW of both 31x31 layers bitwise what convwgrad computes
    from the operands the replay saw; every gradient within bf16 noise of an eager step on the
    same batch."""
    model, fresh_batch = replknet()
    eager = copy.deepcopy(model)  # before the hooks: eager runs without them
    static_x, static_target = fresh_batch()
    names = merged_layers(model, static_x)
    saved = save_operands(model, names)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            autocast_step(model, static_x, static_target)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)
    with convwgrad.record_launches() as captured:
        with torch.cuda.graph(graph):
            static_loss = autocast_step(model, static_x, static_target)
    assert [r.family for r in captured] == [ROUTED_FAMILY] * 2, captured  # launched into the graph

    for _ in range(REPLAYS):
        x, target = fresh_batch()
        static_x.copy_(x)
        static_target.copy_(target)
        with convwgrad.record_launches() as replayed:
            graph.replay()
        torch.cuda.synchronize()
        assert replayed == []  # a replay runs no Python
        got = grads(model)
        assert_dw_is_convwgrads_on(model, names, saved, got)
        eager.zero_grad(set_to_none=True)
        loss = autocast_step(eager, x, target)
        torch.cuda.synchronize()
        want = grads(eager)
        assert relative_error(static_loss, loss.double()) <= 1e-3
        assert_within_bf16_noise(got, want, fp32_reference_grads(eager, x, target), what="replayed vs eager")
        for name in names:
            err = relative_error(got[f"{name}.weight"], want[f"{name}.weight"].double())
            assert err <= TOLERANCE["bf16"], f"{name}: replayed dW vs eager {err:.2e}"


def test_reduce_overhead_compiled_patched_step_matches_compiled_without_graphs(no_tf32):
    """The same step under torch.compile(mode="reduce-overhead") against the same compiled code
    without CUDA graphs (default mode), step by step on fresh batches: the op runs while the
    graphs are warmed up, the last steps replay them with no Python, and every step's gradients
    are within bf16 noise of the ungraphed ones (the bitwise dW check is the single layer's
    below: here inductor's own kernels feed the layers)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model, fresh_batch = replknet()
    names = merged_layers(model, fresh_batch()[0])
    steps = reduce_overhead_steps(model, fresh_batch)
    for _, got, want in steps:
        for name in names:
            err = relative_error(got[f"{name}.weight"], want[f"{name}.weight"].double())
            assert err <= TOLERANCE["bf16"], f"{name}: dW with CUDA graphs vs without {err:.2e}"
    logs = [families for families, _, _ in steps]
    assert logs[0] == [ROUTED_FAMILY] * 2, logs  # warm-up: the op runs as compiled code
    assert logs[-1] == [], logs  # replayed: convwgrad's launches are inside the recorded graph


@pytest.mark.parametrize("stack", ["convnext", "mobilenetv2"])
def test_reduce_overhead_compiled_small_depthwise_stack_matches_compiled_without_graphs(stack, no_tf32):
    """Depthwise layers planned for cuDNN when launched eagerly and for the staged family when
    launched from CUDA graphs (routing.STAGED_GRAPH_TAPS), their prepared calls bound for the first
    time inside cudagraph trees' warm-up (the prepared calls are cleared before): the warm-up runs
    cuDNN and warms the graph route, the recording launches the staged kernels, the replays run no
    Python. Whatever a prepared call keeps lives past the warm-up, and a kept device tensor is one
    cudagraph trees refuse ("tensors in the cudagraph pool not tracked as outputs": UniRepLKNet-T,
    its 17 cuDNN-planned signatures). Every step matches default-mode compiled steps within bf16 noise."""
    from torch._dynamo.utils import counters

    from convwgrad.provider.dispatch import clear_prepared_calls

    torch._dynamo.reset()
    counters.clear()
    model, fresh_batch = patched_stack(stack, seed=4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        eager = {p.family for _, p in convwgrad.layer_plans(model, fresh_batch()[0])}
        graphed = {p.family for _, p in convwgrad.layer_plans(model, fresh_batch()[0], launch="graph")}
    assert eager == {"aten"} and graphed == {GRAPH_FAMILY}, (eager, graphed)
    steps = reduce_overhead_steps(model, fresh_batch, before_compile=clear_prepared_calls)
    logs = [set(families) for families, _, _ in steps]
    assert logs[0] == {"aten"} and logs[1] == {GRAPH_FAMILY} and logs[-1] == set(), logs


def test_a_captured_call_takes_the_graph_route_and_replays_its_dw():
    """conv2d_weight on a layer of the staged family's graph class: cuDNN when called eagerly (which
    warms the graph route), the staged kernels when captured; each replay on fresh operands gives
    bitwise the pinned staged dW of those operands, within bf16 tolerance of float64."""
    problem = ConvProblem.build(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3,
                                padding=1, dtype="bf16", layout="channels_last")
    g = torch.Generator().manual_seed(5)
    static_x, static_dy = make_inputs(problem, "cuda", g)

    def call():
        return convwgrad.conv2d_weight(static_x, problem.weight_size, static_dy, 1, 1, 1, problem.groups)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), convwgrad.record_launches() as eager:
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    assert [r.family for r in eager] == ["aten"] * 2
    graph = torch.cuda.CUDAGraph()
    with convwgrad.record_launches() as captured, torch.cuda.graph(graph):
        static_dw = call()
    assert [r.family for r in captured] == [GRAPH_FAMILY]
    pinned = convwgrad.plan(problem, "cuda", family=GRAPH_FAMILY)
    for _ in range(REPLAYS):
        x, dy = make_inputs(problem, "cuda", g)
        static_x.copy_(x)
        static_dy.copy_(dy)
        static_dw.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = convwgrad.dispatch_conv_grouped(problem, x, dy, plan=pinned)
        assert torch.equal(static_dw, want)
        assert relative_error(static_dw, reference_weight_grad(problem, x, dy, device="cuda")) <= TOLERANCE["bf16"]


def depthwise_layer():
    """One patched 31x31 depthwise layer in bf16 channels_last (LARGE_FILTER_FAMILY on CUDA), its
    problem, and a maker of fresh (x, dy)."""
    problem = ConvProblem.build(batch=8, groups=128, in_channels=128, input_size=(28, 28), filter_size=31,
                                padding=15, dtype="bf16", layout="channels_last")
    torch.manual_seed(2)
    layer = nn.Conv2d(128, 128, 31, padding=15, groups=128, bias=False)
    layer = convwgrad.patch(layer).cuda().to(dtype=torch.bfloat16, memory_format=torch.channels_last)
    assert convwgrad.plan(problem, "cuda").family == ROUTED_FAMILY
    g = torch.Generator().manual_seed(3)
    return layer, problem, lambda: make_inputs(problem, "cuda", g)


def layer_step(layer, x, dy):
    """Forward and backward of one layer on a leaf ``x`` with upstream gradient ``dy``."""
    layer(x).backward(dy)


def assert_layer_grads(layer, x, dy, problem, eager_layer):
    """The layer's dW bitwise equal to the eager layer's on the same (x, dy), and within bf16
    tolerance of float64; grad_input within bf16 tolerance of eager's."""
    leaf = x.detach().requires_grad_()
    eager_layer.zero_grad(set_to_none=True)
    with convwgrad.record_launches() as log:
        layer_step(eager_layer, leaf, dy)
    torch.cuda.synchronize()
    assert [r.family for r in log] == [ROUTED_FAMILY]
    assert torch.equal(layer.weight.grad, eager_layer.weight.grad), (
        f"dW differs from eager by {relative_error(layer.weight.grad, eager_layer.weight.grad.double()):.2e}")
    tol = TOLERANCE[problem.dtype]
    assert relative_error(layer.weight.grad, reference_weight_grad(problem, x, dy, device="cuda")) <= tol
    assert relative_error(x.grad, leaf.grad.double()) <= tol


def test_captured_depthwise_layer_replays_eager_gradients():
    layer, problem, fresh = depthwise_layer()
    eager_layer = copy.deepcopy(layer)
    x, static_dy = fresh()
    static_x = x.requires_grad_()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layer.zero_grad(set_to_none=True)
            static_x.grad = None
            layer_step(layer, static_x, static_dy)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    layer.zero_grad(set_to_none=True)
    static_x.grad = None
    with convwgrad.record_launches() as captured:
        with torch.cuda.graph(graph):
            layer_step(layer, static_x, static_dy)
    assert [r.family for r in captured] == [ROUTED_FAMILY]

    for _ in range(REPLAYS):
        x, dy = fresh()
        with torch.no_grad():
            static_x.copy_(x)
        static_dy.copy_(dy)
        graph.replay()
        torch.cuda.synchronize()
        assert_layer_grads(layer, static_x, static_dy, problem, eager_layer)


def test_reduce_overhead_compiled_depthwise_layer_matches_eager():
    torch._dynamo.reset()
    layer, problem, fresh = depthwise_layer()
    eager_layer = copy.deepcopy(layer)
    graphed = torch.compile(layer, mode="reduce-overhead")
    logs = []
    for _ in range(COMPILED_STEPS):
        x, dy = fresh()
        x.requires_grad_()
        torch.compiler.cudagraph_mark_step_begin()
        layer.zero_grad(set_to_none=True)
        with convwgrad.record_launches() as log:
            layer_step(graphed, x, dy)
        torch.cuda.synchronize()
        logs.append([r.family for r in log])
        assert_layer_grads(layer, x, dy, problem, eager_layer)
    assert logs[0] == [ROUTED_FAMILY] and logs[-1] == [], logs
