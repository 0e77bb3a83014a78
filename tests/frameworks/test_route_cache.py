"""A patched layer's kept route (CPU): what is checked on every call, what only every
GLOBAL_STATE_EVERY calls, and that an outdated route still computes what stock torch does."""

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


def test_grad_mode_is_read_within_global_state_every_calls_and_every_output_is_stocks():
    stock, patched = make_layer()
    x = fresh_input(4)
    patched(x)
    assert not runs_stock(patched)
    with torch.no_grad():
        seen_stock_after = None
        for call in range(GLOBAL_STATE_EVERY + 1):
            assert torch.equal(patched(x), stock(x)), f"call {call}: an outdated route changed the output"
            if seen_stock_after is None and runs_stock(patched):
                seen_stock_after = call
    assert seen_stock_after is not None, f"no-grad mode not seen in {GLOBAL_STATE_EVERY + 1} calls"


def test_autocast_is_read_within_global_state_every_calls_and_gradients_stay_stocks():
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


@pytest.mark.parametrize("frozen", [False, True])
def test_a_frozen_weight_is_seen_on_the_next_call(frozen):
    _, patched = make_layer()
    x = fresh_input(6)
    patched(x)
    patched.weight.requires_grad_(not frozen)
    patched(x)
    assert runs_stock(patched) == frozen
