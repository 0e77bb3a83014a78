"""Building the plugin manager: the one place that knows which plugins exist."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import threading
import weakref

import pluggy

from . import hookspecs
from .diagnostics import warn_at_caller
from .registry import FamilyRegistry

PROJECT = "convwgrad"
#: Entry-point group third-party kernel families are discovered through.
ENTRYPOINT_GROUP = "convwgrad.plugins"
#: Comma-separated names to block: plugin names (built-in module paths, entry-point names) or
#: kernel family names as explain() prints them ("wgrad_merged"), which block the plugin
#: that registers the family. A name that is neither is a warning listing the known names.
DISABLE_ENV = "CONVWGRAD_DISABLE_PLUGINS"

#: Built-in plugins, registered by name so the core imports none of their internals:
#: "module" registers the module's hook functions, "module:attr" the object it names.
#: Each registers under its module name, which is also what CONVWGRAD_DISABLE_PLUGINS takes.
DEFAULT_PLUGINS = (
    "convwgrad.plugins.wgrad_merged:plugin",
    "convwgrad.plugins.wgrad_shifted:plugin",
    "convwgrad.plugins.wgrad_shifted_mma:plugin",
    "convwgrad.plugins.wgrad_short1d:plugin",
    "convwgrad.plugins.wgrad_splitk:plugin",
    "convwgrad.plugins.wgrad_direct:plugin",
    "convwgrad.plugins.wgrad_staged:plugin",
    "convwgrad.plugins.aten_channels_last:plugin",
    "convwgrad.plugins.aten_fallback:plugin",
    "convwgrad.selectors",
)


def build_plugin_manager(
    *, default_plugins=DEFAULT_PLUGINS, load_entrypoints: bool = True
) -> pluggy.PluginManager:
    """Create a plugin manager with the hookspecs, entry-point plugins and built-ins."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    disabled = [name for name in (n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",")) if name]
    for name in disabled:
        pm.set_blocked(name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
    for entry in default_plugins:
        module_name, _, _ = entry.partition(":")
        if pm.is_blocked(module_name):
            continue
        pm.register(_load(entry), name=module_name)
    if disabled:
        _block_families(pm, disabled, default_plugins, load_entrypoints)
    pm.check_pending()
    return pm


def _load(entry: str):
    """The plugin a DEFAULT_PLUGINS entry names: "module" or "module:attr"."""
    module_name, _, attribute = entry.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attribute) if attribute else module


def _family_names(register_families, argnames=("registry",)) -> list[str]:
    """The family names a plugin's convwgrad_register_families hook registers (called on a scratch
    registry; ``argnames``: the arguments it takes, a subset of the hookspec's, as pluggy allows)."""
    registry = FamilyRegistry()
    register_families(**{name: registry for name in argnames})
    return registry.names()


def _entrypoint_names() -> set[str]:
    return {ep.name for dist in importlib.metadata.distributions() for ep in dist.entry_points
            if ep.group == ENTRYPOINT_GROUP}


def _block_families(pm: pluggy.PluginManager, names: list[str], default_plugins, load_entrypoints: bool) -> None:
    """Block the plugin of each family ``names`` names; warn about names that are neither a plugin
    nor a family (a typo would otherwise disable nothing, silently)."""
    owners = {}  # family name -> the name of the plugin that registers it
    for impl in pm.hook.convwgrad_register_families.get_hookimpls():
        owners.update(dict.fromkeys(_family_names(impl.function, impl.argnames), impl.plugin_name))
    plugins = {entry.partition(":")[0] for entry in default_plugins}
    plugins |= {name for name, plugin in pm.list_name_plugin() if plugin is not None}
    if load_entrypoints:
        plugins |= _entrypoint_names()
    for name in names:
        if name in owners and name not in plugins:
            pm.set_blocked(owners[name])
    unknown = [name for name in names if name not in owners and name not in plugins]
    if unknown:
        # a built-in blocked by its own name was never loaded: its families may be the names left
        for entry in default_plugins:
            module_name = entry.partition(":")[0]
            register = getattr(_load(entry), "convwgrad_register_families", None) if module_name in names else None
            if register is not None:
                owners.update(dict.fromkeys(_family_names(register), module_name))
        unknown = [name for name in unknown if name not in owners]
    if unknown:
        warn_at_caller(
            f"{DISABLE_ENV}: {', '.join(map(repr, unknown))} names no plugin and no kernel family, so it "
            f"disables nothing; known: families {', '.join(sorted(owners))}; plugins {', '.join(sorted(plugins))}"
        )


_lock = threading.Lock()
_current: pluggy.PluginManager | None = None
#: How many times :func:`use_plugin_manager` switched the process-wide manager (in or out): an int
#: a caller keeping routing facts compares on every call (the manager itself would pin it there,
#: and a model holding it could no longer be copied or pickled).
switches = 0
#: per manager: (the ids of its plugins when the registry was built, the registry)
_families: "weakref.WeakKeyDictionary[pluggy.PluginManager, tuple]" = weakref.WeakKeyDictionary()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = build_plugin_manager()
    return _current


def families(pm: pluggy.PluginManager | None = None) -> FamilyRegistry:
    """The families the plugins of ``pm`` registered; rebuilt when its set of plugins changes."""
    pm = pm or get_plugin_manager()
    plugins = frozenset(id(plugin) for plugin in pm.get_plugins())
    cached = _families.get(pm)
    if cached is None or cached[0] != plugins:
        registry = FamilyRegistry()
        pm.hook.convwgrad_register_families(registry=registry)
        cached = _families[pm] = (plugins, registry)
    return cached[1]


@contextlib.contextmanager
def use_plugin_manager(pm: pluggy.PluginManager):
    """Make ``pm`` the process-wide manager inside the block (tests, experiments)."""
    global _current, switches
    with _lock:
        previous, _current = _current, pm
        switches += 1
    try:
        yield pm
    finally:
        with _lock:
            _current = previous
            switches += 1
