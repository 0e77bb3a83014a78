"""plan() caches by value: repeats are lookups, and anything that changes the choice changes the key."""

import torch

import convwgrad
from convwgrad.provider import ConvProblem, build_plugin_manager, use_plugin_manager

P = ConvProblem.build(batch=8, groups=32, in_channels=32, input_size=(14, 14), filter_size=3, padding=1,
                      dtype="fp32", layout="channels_last")


def test_repeat_returns_the_cached_plan():
    first = convwgrad.plan(P, "sm_90")
    assert convwgrad.plan(P, "sm_90") is first
    assert convwgrad.plan(P, "gfx950") is not first
    assert convwgrad.plan(P, "sm_90", split_k=2, family="wgrad_merged").split_k == 2


def test_tf32_switch_is_part_of_the_key():
    previous = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        on = convwgrad.plan(P, "sm_90", family="wgrad_merged")
        torch.backends.cudnn.allow_tf32 = False
        off = convwgrad.plan(P, "sm_90", family="wgrad_merged")
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    assert on.spec.allow_tf32 and not off.spec.allow_tf32


def test_another_manager_plans_afresh(monkeypatch):
    before = convwgrad.plan(P, "gfx950")
    monkeypatch.setenv("CONVWGRAD_DISABLE_PLUGINS", "convwgrad.plugins.wgrad_merged")
    with use_plugin_manager(build_plugin_manager(load_entrypoints=False)):
        assert convwgrad.plan(P, "gfx950").family == "wgrad_splitk"
    assert before.family == "wgrad_merged"
