"""Framework integration (torch): custom ops, autograd, model patching, per-layer explain.

A user of the provider core, never imported by it.
"""

from .explain import explain_model, layer_plans
from .patching import (
    disabled,
    grouped_conv,
    intercept_functional,
    is_enabled,
    patch,
    patched_modules,
    set_enabled,
    unpatch,
)

__all__ = ["disabled", "explain_model", "layer_plans", "grouped_conv", "intercept_functional", "is_enabled", "patch", "patched_modules", "set_enabled",
           "unpatch"]
