"""A patched layer's kept route (CPU): what is checked on every call, what only every
GLOBAL_STATE_EVERY calls, and that an outdated route still computes what stock torch does."""

import contextlib
import copy

import pytest
import torch
from torch import nn

import convwgrad
from convwgrad.frameworks import patching
from convwgrad.frameworks.patching import GLOBAL_STATE_EVERY

ONLY_ATEN = ("convwgrad.plugins.aten_fallback:plugin", "convwgrad.selectors")


def make_layer(channels=8):
    torch.manual_seed(0)
    stock = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
    return stock, convwgrad.patch(copy.deepcopy(stock))


def route_of(module):
    return module.__dict__[patching._ROUTE]


def runs_stock(module) -> bool:
    return bool(route_of(module)[3])


def fresh_input(seed, n=2, channels=8, size=6):
    return torch.randn(n, channels, size, size, generator=torch.Generator().manual_seed(seed))


def test_a_layer_with_a_weight_gradient_is_routed_to_convwgrad_on_the_cpu():
    _, patched = make_layer()
    patched(fresh_input(0)).sum().backward()
    assert not runs_stock(patched)  # the premise of the tests below: the interpreter families plan it


def test_new_input_metadata_reroutes_on_the_next_call():
    _, patched = make_layer()
    patched(fresh_input(0))
    first = route_of(patched)
    patched(fresh_input(1))
    assert route_of(patched) is first  # same metadata: the kept route
    patched(fresh_input(2, size=7))
    assert route_of(patched) is not first and route_of(patched)[0][0] == (2, 8, 7, 7)


def test_a_switched_plugin_manager_and_a_cleared_plan_cache_reroute_on_the_next_call():
    from convwgrad.provider.manager import build_plugin_manager, use_plugin_manager
    from convwgrad.provider.plan import clear_plan_cache

    stock, patched = make_layer()
    x = fresh_input(3)
    patched(x)
    assert not runs_stock(patched)
    only_aten = build_plugin_manager(default_plugins=ONLY_ATEN, load_entrypoints=False)
    with use_plugin_manager(only_aten), convwgrad.record_launches() as log:
        patched(x).sum().backward()
        assert runs_stock(patched)
    assert log == []  # the stock call: no custom op, no dispatch
    patched(x)
    assert not runs_stock(patched)  # the manager back: convwgrad again, at once
    before = route_of(patched)
    clear_plan_cache()
    patched(x)
    assert route_of(patched) is not before


def test_grad_mode_is_seen_on_every_call():
    """Activation checkpointing runs a layer without grad, then again with it, every step: each
    call takes the route its mode wants (not the one of the last re-read)."""
    stock, patched = make_layer()
    x = fresh_input(4)
    for call in range(2 * GLOBAL_STATE_EVERY + 1):
        with torch.no_grad():
            assert torch.equal(patched(x), stock(x))
            assert runs_stock(patched), f"call {call}: no dW wanted, yet not the stock call"
        patched(x)
        assert not runs_stock(patched), f"call {call}: dW wanted, yet the stock call"


def test_autocast_is_read_within_global_state_every_calls_and_outputs_and_gradients_stay_stocks():
    stock, patched = make_layer()
    x = fresh_input(5).requires_grad_()
    patched(x)
    state_before = route_of(patched)[1]
    for call in range(GLOBAL_STATE_EVERY + 1):
        for module in (stock, patched):
            module.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected, got = stock(x), patched(x)
        assert got.dtype == expected.dtype == torch.bfloat16
        torch.testing.assert_close(got, expected)
        g = torch.randn_like(expected)
        expected.backward(g)
        got.backward(g)
        torch.testing.assert_close(patched.weight.grad, stock.weight.grad, rtol=2e-2, atol=2e-2)
    assert route_of(patched)[1] != state_before and route_of(patched)[1][0] == torch.bfloat16
    assert state_before[0] is None  # it was read outside autocast, and not again on every call


def test_freezing_and_unfreezing_the_weight_is_seen_on_the_next_call():
    _, patched = make_layer()
    x = fresh_input(6)
    patched(x)
    assert not runs_stock(patched)
    patched.weight.requires_grad_(False)
    patched(x)
    assert runs_stock(patched)  # no dW wanted: the stock call
    patched.weight.requires_grad_(True)
    patched(x)
    assert not runs_stock(patched)


def test_disabled_is_seen_on_every_call():
    stock, patched = make_layer()
    x = fresh_input(7).requires_grad_()
    patched(x)
    assert not runs_stock(patched)
    with convwgrad.disabled(), convwgrad.record_launches() as log:
        patched(x).sum().backward()
    assert log == []  # torch's own dW at once, not after GLOBAL_STATE_EVERY calls


def test_a_routed_model_still_copies_and_pickles():
    """The kept route holds plain values: deepcopy (EMA, SWA's AveragedModel) and torch.save work
    after training calls, and the copy computes what the original does."""
    import io

    _, patched = make_layer()
    for seed in (8, 9):
        patched(fresh_input(seed)).sum().backward()
    twin = copy.deepcopy(patched)
    buffer = io.BytesIO()
    torch.save(patched, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = fresh_input(10)
    for other in (twin, loaded):
        assert torch.equal(other(x), patched(x))


@pytest.fixture
def dispatcher_calls(monkeypatch):
    """The patched backward's calls that go through the dispatcher's key and lookup."""
    from convwgrad.frameworks import torch_ops

    calls = []
    through = torch_ops._eager_conv_weight
    monkeypatch.setattr(torch_ops, "_eager_conv_weight", lambda *a, **k: calls.append(1) or through(*a, **k))
    return calls


def _grads(module, x, grad_output):
    module.zero_grad(set_to_none=True)
    module(x).backward(grad_output)
    return module.weight.grad


def test_the_backward_remembers_its_prepared_call_and_checks_what_may_change(dispatcher_calls):
    stock, patched = make_layer()
    x = fresh_input(11)
    dy = torch.randn(2, 8, 6, 6)
    for step in range(3):
        dy.normal_()
        with convwgrad.record_launches() as log:
            got = _grads(patched, x, dy)
        assert [r.family for r in log] != [] and log[-1].family != "aten", log
        torch.testing.assert_close(got, _grads(stock, x, dy), rtol=1e-4, atol=1e-4)
        assert got.stride() == patched.weight.stride()
    assert len(dispatcher_calls) == 1, "later calls should take the remembered prepared call"
    memo = route_of(patched)[5]
    assert len(memo) == 3 and memo[0][:5] == (torch.float32, x.stride(), dy.stride(), torch.float32,
                                               patched.weight.stride())

    # grad_output in other strides (channels_last): the dispatcher again, and remembered in its place
    dy_cl = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(_grads(patched, x, dy_cl), _grads(stock, x, dy_cl), rtol=1e-4, atol=1e-4)
    assert len(dispatcher_calls) == 2 and memo[0][2] == dy_cl.stride()

    # convwgrad switched off around the backward alone: torch's own dW, nothing launched
    output = patched(x)
    with convwgrad.disabled(), convwgrad.record_launches() as log:
        patched.zero_grad(set_to_none=True)
        output.backward(dy_cl)
    assert log == []
    torch.testing.assert_close(patched.weight.grad, _grads(stock, x, dy_cl), rtol=1e-4, atol=1e-4)


def test_a_channels_last_weight_gets_its_dw_in_its_own_strides_without_restriding(dispatcher_calls):
    stock, patched = make_layer()
    stock, patched = (m.to(memory_format=torch.channels_last) for m in (stock, patched))
    x = fresh_input(12)
    dy = torch.randn(2, 8, 6, 6)
    for _ in range(2):
        got = _grads(patched, x, dy)
        assert got.stride() == patched.weight.stride() == stock.weight.stride()
        torch.testing.assert_close(got, _grads(stock, x, dy), rtol=1e-4, atol=1e-4)
    assert len(dispatcher_calls) == 1 and route_of(patched)[5][2] is not None


def test_a_remembered_call_is_neither_copied_nor_pickled():
    import io

    _, patched = make_layer()
    x, dy = fresh_input(13), torch.randn(2, 8, 6, 6)
    _grads(patched, x, dy)
    assert len(route_of(patched)[5]) == 3
    twin = copy.deepcopy(patched)
    buffer = io.BytesIO()
    torch.save(patched, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    expected = _grads(patched, x, dy)
    for other in (twin, loaded):
        assert len(route_of(other)[5]) == 0
        torch.testing.assert_close(_grads(other, x, dy), expected, rtol=0, atol=0)


def test_a_saved_input_handed_back_in_other_strides_is_not_read_with_the_remembered_ones():
    """save_on_cpu (and any saved-tensor hook) may hand the input back to the backward in other
    strides than the forward saw: the remembered call, bound to the old strides, must not run."""
    stock, patched = make_layer()
    x = fresh_input(14).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    for offload in (False, False, True, True, False):
        # pinned: the saved input comes back as a fresh contiguous copy, not in channels_last strides
        context = torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()
        for model in (patched, stock):
            model.zero_grad(set_to_none=True)
            with context:
                out = model(x)
            out.backward(dy)
        torch.testing.assert_close(patched.weight.grad, stock.weight.grad, rtol=1e-4, atol=1e-4)


def test_a_weight_given_another_memory_format_after_warm_up_gets_a_right_dw():
    """model.to(memory_format=...) after the memo is filled: dW's strides come from the call's weight."""
    torch.manual_seed(0)
    stock = nn.Conv2d(8, 8, 3, padding=1, groups=4)  # 2 channels a group: channels_last differs in a long dim
    patched = convwgrad.patch(copy.deepcopy(stock))
    x, dy = fresh_input(15), torch.randn(2, 8, 6, 6)
    for step in range(4):
        if step == 2:
            for model in (stock, patched):
                model.to(memory_format=torch.channels_last)
        got = _grads(patched, x, dy)
        torch.testing.assert_close(got, _grads(stock, x, dy), rtol=1e-4, atol=1e-4)
        assert got.stride() == patched.weight.stride()


def test_unregistering_the_family_a_backward_remembered_takes_effect_at_once():
    """What the dispatcher's lookup re-reads on every call (the planning generation), the remembered
    call checks too: a family unregistered from the manager is not launched again."""
    from convwgrad.provider.manager import get_plugin_manager

    _, patched = make_layer()
    x, dy = fresh_input(16), torch.randn(2, 8, 6, 6)
    with convwgrad.record_launches() as log:
        _grads(patched, x, dy), _grads(patched, x, dy)
    family = log[-1].family
    assert family != "aten"
    pm = get_plugin_manager()
    name = next(name for name, plugin in pm.list_name_plugin() if name.endswith(family))
    plugin = pm.unregister(name=name)
    try:
        with convwgrad.record_launches() as log:
            _grads(patched, x, dy)
        assert family not in [record.family for record in log], log
    finally:
        pm.register(plugin, name=name)
