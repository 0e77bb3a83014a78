"""The plugin manager: built-ins, blocking by environment, entry-point discovery, keyword-only hooks."""

from __future__ import annotations

import importlib
import sys
import types

import pluggy
import pytest
import torch

from convwgrad.provider import (
    ConvProblem,
    build_plugin_manager,
    dispatch_conv_grouped,
    explain,
    families,
    get_plugin_manager,
    plan,
    record_launches,
    use_plugin_manager,
)
from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.manager import DEFAULT_PLUGINS, DISABLE_ENV, ENTRYPOINT_GROUP
from convwgrad.provider.spec import KernelSpec, Verdict
from convwgrad.provider.target import PROFILES

BUILTINS = (
    "convwgrad.plugins.wgrad_merged",
    "convwgrad.plugins.wgrad_shifted",
    "convwgrad.plugins.wgrad_shifted_mma",
    "convwgrad.plugins.wgrad_short1d",
    "convwgrad.plugins.wgrad_splitk",
    "convwgrad.plugins.wgrad_direct",
    "convwgrad.plugins.wgrad_staged",
    "convwgrad.plugins.aten_channels_last",
    "convwgrad.plugins.aten_fallback",
    "convwgrad.selectors",
)
#: Families the built-ins register, highest priority first.
BUILTIN_FAMILIES = ["wgrad_merged", "wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk", "wgrad_direct",
                    "wgrad_staged", "aten_channels_last", "aten"]


@pytest.fixture(autouse=True)
def _no_blocked_plugins(monkeypatch):
    monkeypatch.delenv(DISABLE_ENV, raising=False)


@pytest.fixture
def pm():
    """A fresh manager per test, made current for plan()/explain()/dispatch."""
    manager = build_plugin_manager()
    with use_plugin_manager(manager):
        yield manager


def _problem(groups=1, **changes):
    kwargs = dict(batch=2, groups=groups, in_channels=2 * groups, out_channels=2 * groups, input_size=(6, 6),
                  filter_size=3, padding=1, dtype="fp32")
    kwargs.update(changes)
    return ConvProblem.build(**kwargs)


# --------------------------------------------------------------- built-ins
def test_default_plugins_are_the_builtins():
    assert tuple(entry.partition(":")[0] for entry in DEFAULT_PLUGINS) == BUILTINS


def test_builds_with_builtins():
    pm = build_plugin_manager()
    for entry in DEFAULT_PLUGINS:
        name, _, attribute = entry.partition(":")
        module = importlib.import_module(name)
        assert pm.get_plugin(name) is (getattr(module, attribute) if attribute else module)
        assert pm.has_plugin(name)
    registry = families(pm)
    names = registry.names()
    assert set(BUILTIN_FAMILIES) <= set(names)
    assert names.index("wgrad_merged") < names.index("wgrad_splitk") < names.index("wgrad_direct") < names.index("aten")
    assert registry["wgrad_splitk"].priority > registry["aten"].priority
    assert registry["wgrad_splitk"].splits_k and not registry["aten"].splits_k
    assert [f.name for f in registry] == names


def test_builtins_without_entrypoints_in_order():
    pm = build_plugin_manager(load_entrypoints=False)
    assert {pm.get_name(p) for p in pm.get_plugins()} == set(BUILTINS)
    assert families(pm).names() == BUILTIN_FAMILIES


def test_families_is_cached_per_manager():
    a, b = build_plugin_manager(), build_plugin_manager()
    assert families(a) is families(a)
    assert families(a) is not families(b)


def test_unknown_family_lookup_names_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown kernel family 'nope'; registered: wgrad_merged, wgrad_short1d, wgrad_shifted_mma, wgrad_shifted, wgrad_splitk, wgrad_direct, wgrad_staged, aten_channels_last, aten"):
        families(build_plugin_manager(load_entrypoints=False))["nope"]


def test_use_plugin_manager_restores_previous(pm):
    assert get_plugin_manager() is pm
    other = build_plugin_manager()
    with pytest.raises(RuntimeError):
        with use_plugin_manager(other):
            assert get_plugin_manager() is other
            raise RuntimeError("boom")
    assert get_plugin_manager() is pm


# --------------------------------------------------------------- blocking
def test_disable_env_blocks_the_family(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "convwgrad.plugins.wgrad_splitk")
    pm = build_plugin_manager()
    assert pm.is_blocked("convwgrad.plugins.wgrad_splitk")
    assert pm.get_plugin("convwgrad.plugins.wgrad_splitk") is None
    assert "wgrad_splitk" not in families(pm)
    problem = _problem(groups=4)  # grouped, not depthwise: wgrad_merged, wgrad_shifted and wgrad_direct refuse it
    with use_plugin_manager(pm):  # on CUDA, where the aten channels_last family admits NCHW problems
        chosen = plan(problem, "sm_90")
        text = str(explain(problem, "sm_90"))
    assert chosen.family == "aten"
    rule = ("fallback: no Triton family admits the problem (wgrad_direct, wgrad_merged, wgrad_shifted, wgrad_shifted_mma, "
            "wgrad_short1d, wgrad_staged "
            "refused); "
            "aten_channels_last admits it but is opt-in, routed only where measured faster")  # an NCHW problem
    assert chosen.rule == rule
    assert "wgrad_splitk" not in text
    assert "aten_fp32_spk1_1stage: admitted" in text
    assert f"rule:    {rule}" in text


def test_disable_env_is_comma_separated_and_trimmed(monkeypatch):
    monkeypatch.setenv(
        DISABLE_ENV, " convwgrad.plugins.wgrad_merged,convwgrad.plugins.wgrad_splitk , ,convwgrad.plugins.aten_fallback,"
        "convwgrad.plugins.wgrad_shifted,convwgrad.plugins.wgrad_direct,convwgrad.plugins.aten_channels_last,"
        "convwgrad.plugins.wgrad_staged,convwgrad.plugins.wgrad_shifted_mma,convwgrad.plugins.wgrad_short1d"
    )
    pm = build_plugin_manager()
    assert families(pm).names() == []
    assert pm.get_plugin("convwgrad.selectors") is not None
    with use_plugin_manager(pm), pytest.raises(ValueError, match=r"no family offered a candidate"):
        plan(_problem(), "sm_90")


def test_without_disable_env_splitk_is_chosen(pm):
    assert plan(_problem(groups=4), "gfx950").family == "wgrad_splitk"


@pytest.mark.parametrize("family, plugin", [
    ("wgrad_merged", "convwgrad.plugins.wgrad_merged"),
    ("wgrad_shifted", "convwgrad.plugins.wgrad_shifted"),
    ("wgrad_shifted_mma", "convwgrad.plugins.wgrad_shifted_mma"),
    ("wgrad_splitk", "convwgrad.plugins.wgrad_splitk"),
    ("wgrad_direct", "convwgrad.plugins.wgrad_direct"),
    ("wgrad_staged", "convwgrad.plugins.wgrad_staged"),
    ("aten_channels_last", "convwgrad.plugins.aten_channels_last"),
    ("aten", "convwgrad.plugins.aten_fallback"),
])
def test_disable_env_takes_family_names(monkeypatch, recwarn, family, plugin):
    """Fuzzing, issue 9: the name explain() prints ("wgrad_merged") blocked nothing, silently."""
    monkeypatch.setenv(DISABLE_ENV, family)
    pm = build_plugin_manager()
    assert pm.is_blocked(plugin) and pm.get_plugin(plugin) is None
    assert families(pm).names() == [name for name in BUILTIN_FAMILIES if name != family]
    assert not recwarn.list


def test_disable_env_family_and_plugin_name_of_one_plugin(monkeypatch, recwarn):
    monkeypatch.setenv(DISABLE_ENV, "wgrad_merged,convwgrad.plugins.wgrad_merged, aten")
    pm = build_plugin_manager()
    assert families(pm).names() == ["wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk", "wgrad_direct",
                                    "wgrad_staged", "aten_channels_last"]
    assert not recwarn.list  # the family of a plugin blocked by its path is still a known name


def test_disable_env_unknown_name_warns_listing_the_known_ones(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "wgrad_mergd, aten,convwgrad.plugins.nothing")
    with pytest.warns(UserWarning) as caught:
        pm = build_plugin_manager()
    assert len(caught) == 1 and caught[0].filename == __file__
    assert str(caught[0].message) == (
        f"{DISABLE_ENV}: 'wgrad_mergd', 'convwgrad.plugins.nothing' names no plugin and no kernel family, so it "
        "disables nothing; known: families aten, aten_channels_last, wgrad_direct, wgrad_merged, wgrad_shifted, "
        "wgrad_shifted_mma, wgrad_short1d, wgrad_splitk, wgrad_staged; plugins "
        + ", ".join(sorted(BUILTINS))
    )
    assert families(pm).names() == ["wgrad_merged", "wgrad_short1d", "wgrad_shifted_mma", "wgrad_shifted", "wgrad_splitk",
                                    "wgrad_direct", "wgrad_staged", "aten_channels_last"]  # the known name still blocks


# --------------------------------------------------------------- entry points
TOY_MODULE = "convwgrad_toy_plugin_for_tests"
TOY_FILL = 7.0
TOY_SOURCE = f'''
"""A third-party kernel family, as a pip-installed package would ship it."""
from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.spec import KernelSpec, Verdict

FAMILY = "toy"
REFUSAL = "toy computes groups == 3 only"


def _mine(spec):
    return spec.family == FAMILY


@hookimpl
def convwgrad_register_families(registry):
    registry.add(FAMILY, priority=100, description="test toy: fills dW with {TOY_FILL}")


@hookimpl
def convwgrad_candidate_specs(problem, target):
    return [KernelSpec(family=FAMILY, dtype=problem.dtype)]


@hookimpl
def convwgrad_support(problem, spec, target):
    if _mine(spec):
        if problem.groups != 3:
            return Verdict.refuse(f"{{REFUSAL}}, got groups={{problem.groups}}")
        return Verdict.admit()


@hookimpl
def convwgrad_workspace_nbytes(problem, spec):
    if _mine(spec):
        return 0


@hookimpl
def convwgrad_grid(problem, spec, target):
    if _mine(spec):
        return ()


@hookimpl
def convwgrad_launch(problem, spec, target, input, grad_output, out, workspace):
    if _mine(spec):
        out.fill_({TOY_FILL})
        return ["toy_kernel"]
'''


@pytest.fixture
def toy_dist(tmp_path, monkeypatch):
    """Install the toy plugin into tmp_path as a distribution with a convwgrad.plugins entry point."""
    (tmp_path / f"{TOY_MODULE}.py").write_text(TOY_SOURCE)
    dist_info = tmp_path / "convwgrad_toy-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: convwgrad-toy\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRYPOINT_GROUP}]\ntoy = {TOY_MODULE}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop(TOY_MODULE, None)
    monkeypatch.undo()  # sys.path back before the caches are cleared
    importlib.invalidate_caches()


@pytest.fixture
def toy_pm(toy_dist):
    pm = build_plugin_manager()
    with use_plugin_manager(pm):
        yield pm


def test_entrypoint_plugin_is_loaded(toy_pm):
    plugin = toy_pm.get_plugin("toy")
    assert plugin is sys.modules[TOY_MODULE]
    assert [d.project_name for p, d in toy_pm.list_plugin_distinfo() if p is plugin] == ["convwgrad-toy"]
    names = families(toy_pm).names()
    assert names.index("toy") < names.index("wgrad_splitk") < names.index("aten")
    assert families(toy_pm)["toy"].priority == 100


def test_entrypoint_not_loaded_when_disabled(toy_dist):
    assert build_plugin_manager(load_entrypoints=False).get_plugin("toy") is None
    assert "toy" not in families(build_plugin_manager(load_entrypoints=False))


def test_entrypoint_blocked_by_env(toy_dist, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "toy")
    pm = build_plugin_manager()
    assert pm.get_plugin("toy") is None
    assert "toy" not in families(pm)


def test_entrypoint_family_blocked_by_its_family_name(toy_dist, monkeypatch, recwarn):
    monkeypatch.setenv(DISABLE_ENV, "toy")  # here the entry point and the family share the name
    assert "toy" not in families(build_plugin_manager())
    # rename the entry point: only the family is "toy" now
    (toy_dist / "convwgrad_toy-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRYPOINT_GROUP}]\ntoy-kernels = {TOY_MODULE}\n")
    importlib.invalidate_caches()
    pm = build_plugin_manager()
    assert pm.is_blocked("toy-kernels") and "toy" not in families(pm)
    assert not recwarn.list


@pytest.mark.parametrize("target", ["sm_90", "gfx950", "interpreter", "cpu"])
def test_toy_plans_for_groups_3_only(toy_pm, target, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # "cpu" names this process's CPU path
    chosen = plan(_problem(groups=3), target)
    assert chosen.family == "toy"
    assert chosen.kernel_name == "toy_fp32_spk1_1stage"
    assert (chosen.grid, chosen.workspace_nbytes) == ((), 0)
    assert chosen.rule.startswith("priority: toy")
    other = plan(_problem(groups=4), target)
    assert other.family != "toy"
    # sm_90: the routing's measured rule prefers aten over split-K on CUDA
    assert other.family == ("wgrad_splitk" if target in ("gfx950", "interpreter") else "aten")


def test_toy_refusal_is_explained(toy_pm):
    text = str(explain(_problem(groups=4), "gfx950"))
    assert "toy_fp32_spk1_1stage: refused: toy computes groups == 3 only, got groups=4" in text
    assert "choice:  wgrad_splitk" in text
    admitted = str(explain(_problem(groups=3), "gfx950"))
    assert " * toy_fp32_spk1_1stage: admitted" in admitted


def test_toy_pin_refusal_names_reason(toy_pm):
    with pytest.raises(ValueError, match=r"toy computes groups == 3 only, got groups=2"):
        plan(_problem(groups=2), "sm_90", family="toy")


def _dispatch_on_cpu(problem):
    x = torch.randn(problem.input_shape)
    dy = torch.randn(problem.grad_output_shape)
    with record_launches() as log:
        out = dispatch_conv_grouped(problem, x, dy)
    return x, dy, out, log


def test_toy_dispatch_on_cpu(toy_pm, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    problem = _problem(groups=3)
    _, _, out, log = _dispatch_on_cpu(problem)
    assert out.shape == problem.weight_size and out.dtype == torch.float32
    assert torch.equal(out, torch.full(problem.weight_size, TOY_FILL))
    assert [(r.kernel_name, r.family, r.kernels) for r in log] == [("toy_fp32_spk1_1stage", "toy", ("toy_kernel",))]


def test_non_toy_problem_dispatches_to_aten_on_cpu(toy_pm, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    problem = _problem(groups=2)
    x, dy, out, log = _dispatch_on_cpu(problem)
    expected = torch.nn.grad.conv2d_weight(x, problem.weight_size, dy, padding=1, groups=2)
    torch.testing.assert_close(out, expected)
    assert [(r.family, r.kernels) for r in log] == [("aten", ("aten.convolution_backward",))]


def test_no_toy_without_its_distribution():
    assert TOY_MODULE not in sys.modules
    assert build_plugin_manager().get_plugin("toy") is None


# --------------------------------------------------------------- keyword-only hooks
def test_hooks_reject_positional_calls():
    pm = build_plugin_manager(load_entrypoints=False)
    problem = _problem()
    spec = KernelSpec(family="aten", dtype="fp32")
    target = PROFILES["sm_90"]
    with pytest.raises(TypeError):
        pm.hook.convwgrad_support(problem, spec, target)
    verdict = pm.hook.convwgrad_support(problem=problem, spec=spec, target=target)
    assert isinstance(verdict, Verdict) and verdict.admitted


def test_hookimpl_with_unknown_argument_is_rejected():
    pm = build_plugin_manager(load_entrypoints=False)
    bad = types.ModuleType("bad_plugin")

    @hookimpl
    def convwgrad_support(problem, spec, target, colour):
        return None

    bad.convwgrad_support = convwgrad_support
    with pytest.raises(pluggy.PluginValidationError):
        pm.register(bad)


def test_families_sees_plugins_registered_later():
    pm = build_plugin_manager(load_entrypoints=False)
    assert "late" not in families(pm)
    late = types.ModuleType("late_plugin")

    @hookimpl
    def convwgrad_register_families(registry):
        registry.add("late", priority=50, description="registered after first use")

    late.convwgrad_register_families = convwgrad_register_families
    pm.register(late)
    assert "late" in families(pm)
