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
    monkeypatch.setattr(dispatch, "GRAPH_BACKENDS", (*dispatch.GRAPH_BACKENDS, "interpreter", "cpu"))
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


def test_a_signature_first_seen_inside_a_capture_keeps_the_eager_plan(simulated_graphs):
    """Its graph route's kernels could not be loaded inside the capture (cuModuleLoadData invalidates it)."""
    p = _layer(input_size=(5, 9))
    x, dy = make_inputs(p, DEVICE)
    simulated_graphs["on"] = True
    for _ in range(2):
        with convwgrad.record_launches() as log:
            _call(p, x, dy)
        assert _families(log) == [EAGER_FAMILY]


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
    with convwgrad.record_launches() as log:
        _call(p, x, dy)
    assert _families(log) == [EAGER_FAMILY]


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
    with convwgrad.record_launches() as log:
        _call(p, x, shifted)
    assert _families(log) == [EAGER_FAMILY]
