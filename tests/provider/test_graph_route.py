"""A call recorded into a CUDA graph takes the plan for graph launches (target.launch == "graph"),
warmed outside the capture; on the CPU, with the capture and a graph-only route simulated."""

import pytest
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, dispatch
from convwgrad.provider.plan import plan as real_plan
from convwgrad.provider.reference import reference_weight_grad, relative_error
from support import DEVICE

#: a family no graph rule picks in the interpreter, standing in for the one a graph launch gets
GRAPH_FAMILY, EAGER_FAMILY = "wgrad_splitk", "wgrad_merged"


@pytest.fixture
def simulated_graphs(monkeypatch):
    """The interpreter treated as a backend with CUDA graphs, a switch for 'the stream captures',
    and a router that gives graph launches GRAPH_FAMILY."""
    monkeypatch.setattr(dispatch, "_GRAPH_BACKENDS", (*dispatch._GRAPH_BACKENDS, "interpreter", "cpu"))
    monkeypatch.setattr(dispatch, "_GRAPH_ROUTES", True)
    capturing = {"on": False}
    monkeypatch.setattr(dispatch, "_capturing", lambda device: capturing["on"])

    def plan(problem, target=None, **pins):
        family = GRAPH_FAMILY if getattr(target, "launch", "eager") == "graph" else EAGER_FAMILY
        return real_plan(problem, target, family=family, **pins)

    monkeypatch.setattr(dispatch, "make_plan", plan)
    dispatch.clear_prepared_calls()
    yield capturing
    dispatch.clear_prepared_calls()


def _layer(**overrides):
    shape = dict(batch=2, groups=16, in_channels=16, input_size=(7, 6), filter_size=3, padding=1)
    return ConvProblem.build(**{**shape, **overrides}, dtype="fp32", layout="channels_last")


def _call(p, x, dy):
    return convwgrad.conv2d_weight(x, p.weight_size, dy, p.stride, p.symmetric_padding, p.dilation, p.groups)


def _families(log):
    return [record.family for record in log]


def _launched(call, *args, **kwargs):
    """The families ``call(*args, **kwargs)`` launched."""
    with convwgrad.record_launches() as log:
        call(*args, **kwargs)
    return _families(log)


def test_a_capture_takes_the_graph_route_warmed_outside_it(simulated_graphs, no_tf32):
    p = _layer()
    x, dy = make_inputs(p, DEVICE)
    reference = reference_weight_grad(p, x, dy)
    with convwgrad.record_launches() as log:
        eager = _call(p, x, dy)  # also warms the graph route: not recorded, it is no launch of the caller's
    assert _families(log) == [EAGER_FAMILY]
    simulated_graphs["on"] = True
    with convwgrad.record_launches() as log:
        captured = _call(p, x, dy)
    assert _families(log) == [GRAPH_FAMILY]
    simulated_graphs["on"] = False
    with convwgrad.record_launches() as log:
        again = _call(p, x, dy)
    assert _families(log) == [EAGER_FAMILY]
    for dw in (eager, captured, again):
        assert relative_error(dw, reference) < 1e-5


def test_a_signature_first_seen_inside_a_capture_keeps_the_eager_plan_until_called_outside_one(simulated_graphs):
    """Its graph route's kernels could not be loaded inside the capture (cuModuleLoadData invalidates
    it); the first call outside a capture warms the route for the next capture."""
    p = _layer(input_size=(5, 9))
    x, dy = make_inputs(p, DEVICE)
    simulated_graphs["on"] = True
    for _ in range(2):
        assert _launched(_call, p, x, dy) == [EAGER_FAMILY]
    simulated_graphs["on"] = False
    _call(p, x, dy)
    simulated_graphs["on"] = True
    assert _launched(_call, p, x, dy) == [GRAPH_FAMILY]


def test_graph_routes_switched_off_keep_the_eager_plan(simulated_graphs, monkeypatch):
    monkeypatch.setattr(dispatch, "_GRAPH_ROUTES", False)
    p = _layer(input_size=(3, 8))
    x, dy = make_inputs(p, DEVICE)
    _call(p, x, dy)
    simulated_graphs["on"] = True
    assert _launched(_call, p, x, dy) == [EAGER_FAMILY]


def test_the_warm_up_writes_a_scratch_of_the_callers_strides_and_the_capture_its_out(simulated_graphs, no_tf32):
    """An ``out`` with gaps between its elements: the graph route is bound to its strides, so its warm-up
    scratch has them too (a dense scratch was written past its end), and the caller's out is untouched."""
    p = _layer(input_size=(6, 6))
    x, dy = make_inputs(p, DEVICE)
    storage = torch.full((16, 1, 3, 6), 7.0, device=DEVICE)
    out = storage[..., ::2]
    assert out.stride() == (18, 18, 6, 2)
    convwgrad.dispatch_conv_grouped(p, x, dy, out=out)
    eager = out.clone()
    out.fill_(float("nan"))
    simulated_graphs["on"] = True
    assert _launched(convwgrad.dispatch_conv_grouped, p, x, dy, out=out) == [GRAPH_FAMILY]
    reference = reference_weight_grad(p, x, dy)
    assert relative_error(out, reference) < 1e-5 and relative_error(eager, reference) < 1e-5
    assert (storage[..., 1::2] == 7.0).all()  # the gaps: never written


def test_a_workspace_sized_by_the_eager_plan_keeps_it_inside_a_capture(simulated_graphs):
    p = _layer(input_size=(6, 7))
    x, dy = make_inputs(p, DEVICE)
    eager_plan = real_plan(p, None, family=EAGER_FAMILY)
    workspace = torch.empty(eager_plan.workspace_nbytes, dtype=torch.uint8, device=DEVICE)
    convwgrad.dispatch_conv_grouped(p, x, dy)
    simulated_graphs["on"] = True
    with convwgrad.record_launches() as log:
        convwgrad.dispatch_conv_grouped(p, x, dy, workspace=workspace)
        convwgrad.dispatch_conv_grouped(p, x, dy)
    assert _families(log) == [EAGER_FAMILY, GRAPH_FAMILY]


def test_a_graph_route_that_cannot_be_prepared_warns_and_keeps_the_eager_plan(simulated_graphs, monkeypatch):
    p = _layer(input_size=(6, 5))
    x, dy = make_inputs(p, DEVICE)
    bind = dispatch._bind

    def failing_bind(problem, plan, *args, **kwargs):
        if plan.target.launch == "graph":
            raise RuntimeError("compile failed")
        return bind(problem, plan, *args, **kwargs)

    monkeypatch.setattr(dispatch, "_bind", failing_bind)
    with pytest.warns(UserWarning, match="CUDA-graph route .* could not be prepared.*compile failed"):
        _call(p, x, dy)
    simulated_graphs["on"] = True
    assert _launched(_call, p, x, dy) == [EAGER_FAMILY]


def test_dispatch_without_a_plan_takes_the_graph_route_and_a_given_plan_is_kept(simulated_graphs):
    p = _layer(input_size=(4, 7))
    x, dy = make_inputs(p, DEVICE)
    convwgrad.dispatch_conv_grouped(p, x, dy)
    given = real_plan(p, None, family=EAGER_FAMILY)
    convwgrad.dispatch_conv_grouped(p, x, dy, plan=given)
    simulated_graphs["on"] = True
    with convwgrad.record_launches() as log:
        convwgrad.dispatch_conv_grouped(p, x, dy)
        convwgrad.dispatch_conv_grouped(p, x, dy, plan=given)
    assert _families(log) == [GRAPH_FAMILY, EAGER_FAMILY]


def test_a_capture_of_operands_aligned_otherwise_keeps_the_eager_plan(simulated_graphs):
    """Another alignment is another Triton specialisation, which would compile and load inside the capture."""
    p = _layer(input_size=(5, 5))
    x, dy = make_inputs(p, DEVICE)
    _call(p, x, dy)
    storage = torch.empty(dy.numel() + 1, dtype=dy.dtype, device=dy.device)
    shifted = storage[1:].view(dy.shape[0], dy.shape[2], dy.shape[3], dy.shape[1]).permute(0, 3, 1, 2)
    shifted.copy_(dy)
    assert shifted.stride() == dy.stride() and shifted.data_ptr() % 16
    simulated_graphs["on"] = True
    assert _launched(_call, p, x, shifted) == [EAGER_FAMILY]
