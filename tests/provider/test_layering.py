"""The layering is one-way: plugins import the provider core (its shared kernel blocks
included), never another plugin; the core imports no plugin and no selector.

Read from the source's AST (import statements, relative ones resolved), so a module that is
never imported by the tests is checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import convwgrad

PACKAGE_ROOT = Path(convwgrad.__file__).parent
PLUGINS = PACKAGE_ROOT / "plugins"
PROVIDER = PACKAGE_ROOT / "provider"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``module``'s source imports: modules, and for
    ``from X import y`` both X and X.y (y may be a submodule). Relative imports are resolved."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            names.append((node.lineno, origin))
            names += [(node.lineno, f"{origin}.{alias.name}") for alias in node.names if alias.name != "*"]
    return names


def python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def plugin_of(name: str) -> str | None:
    """The plugin a dotted name belongs to (``convwgrad.plugins.<plugin>...``), or None."""
    parts = name.split(".")
    if parts[:2] == ["convwgrad", "plugins"] and len(parts) > 2:
        return parts[2]
    return None


def cross_plugin_imports(path: Path, source: str | None = None) -> list[str]:
    own = plugin_of(module_name(path))
    source = path.read_text() if source is None else source
    return [
        f"{path.relative_to(PACKAGE_ROOT.parent)}:{line} imports {name}"
        for line, name in imported_names(source, module_name(path), path.name == "__init__.py")
        if plugin_of(name) not in (None, own)
    ]


def core_upward_imports(path: Path, source: str | None = None) -> list[str]:
    source = path.read_text() if source is None else source
    return [
        f"{path.relative_to(PACKAGE_ROOT.parent)}:{line} imports {name}"
        for line, name in imported_names(source, module_name(path), path.name == "__init__.py")
        if name.split(".")[:2] in (["convwgrad", "plugins"], ["convwgrad", "selectors"])
    ]


def test_the_scan_sees_every_plugin_and_the_shared_blocks():
    plugins = {plugin_of(module_name(path)) for path in python_files(PLUGINS)} - {None}
    assert {"aten_fallback", "wgrad_merged", "wgrad_splitk"} <= plugins
    assert {"jit.py", "launch.py", "checks.py"} <= {path.name for path in python_files(PROVIDER / "blocks")}


@pytest.mark.parametrize("path", python_files(PLUGINS), ids=lambda path: str(path.relative_to(PLUGINS)))
def test_no_plugin_imports_another_plugin(path):
    assert cross_plugin_imports(path) == []


@pytest.mark.parametrize("path", python_files(PROVIDER), ids=lambda path: str(path.relative_to(PROVIDER)))
def test_the_core_imports_no_plugin_and_no_selector(path):
    assert core_upward_imports(path) == []


def test_the_checks_catch_what_they_forbid():
    """Each way of spelling a forbidden import is found (the scan is not vacuous)."""
    merged = PLUGINS / "wgrad_merged" / "launcher.py"
    forbidden = [
        "from convwgrad.plugins.wgrad_splitk import launcher",
        "from convwgrad.plugins import wgrad_splitk",
        "import convwgrad.plugins.wgrad_splitk.kernels",
        "from ..wgrad_splitk.kernels import _split_taps",
        "from .. import wgrad_splitk",
    ]
    for line in forbidden:
        assert cross_plugin_imports(merged, line), line
    allowed = ["from .kernels import _wgrad_merged_kernel", "from convwgrad.provider.blocks.launch import run_stages",
               "from convwgrad.plugins.wgrad_merged import launcher", "from . import launcher"]
    for line in allowed:
        assert cross_plugin_imports(merged, line) == [], line

    core = PROVIDER / "blocks" / "launch.py"
    for line in ("from convwgrad.plugins.wgrad_splitk import launcher", "from ...selectors import routing",
                 "import convwgrad.selectors", "from ... import plugins"):
        assert core_upward_imports(core, line), line
    assert core_upward_imports(core, "from ..spec import KernelSpec") == []
