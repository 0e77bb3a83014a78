"""Building the plugin manager: the one place that knows which plugins exist."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import weakref

import pluggy

from . import hookspecs
from .registry import FamilyRegistry

PROJECT = "convwgrad"
#: Entry-point group third-party kernel families are discovered through.
ENTRYPOINT_GROUP = "convwgrad.plugins"
#: Comma-separated plugin names (built-in module names or entry-point names) to block.
DISABLE_ENV = "CONVWGRAD_DISABLE_PLUGINS"

#: Built-in plugins, registered by name so the core imports none of their internals:
#: "module" registers the module's hook functions, "module:attr" the object it names.
#: Each registers under its module name, which is also what CONVWGRAD_DISABLE_PLUGINS takes.
DEFAULT_PLUGINS = (
    "convwgrad.plugins.wgrad_merged:plugin",
    "convwgrad.plugins.wgrad_splitk:plugin",
    "convwgrad.plugins.aten_fallback:plugin",
    "convwgrad.selectors",
)


def build_plugin_manager(
    *, default_plugins=DEFAULT_PLUGINS, load_entrypoints: bool = True
) -> pluggy.PluginManager:
    """Create a plugin manager with the hookspecs, entry-point plugins and built-ins."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in filter(None, (n.strip() for n in os.environ.get(DISABLE_ENV, "").split(","))):
        pm.set_blocked(name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
    for entry in default_plugins:
        module_name, _, attribute = entry.partition(":")
        if pm.is_blocked(module_name):
            continue
        plugin = importlib.import_module(module_name)
        pm.register(getattr(plugin, attribute) if attribute else plugin, name=module_name)
    pm.check_pending()
    return pm


_lock = threading.Lock()
_current: pluggy.PluginManager | None = None
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
    global _current
    with _lock:
        previous, _current = _current, pm
    try:
        yield pm
    finally:
        with _lock:
            _current = previous
