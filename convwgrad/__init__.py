"""convwgrad: fast, deterministic weight gradients of grouped and depthwise convolutions.

    import convwgrad
    dw = convwgrad.conv2d_weight(x, w.shape, dy, stride=1, padding=1, groups=x.shape[1])
    print(convwgrad.explain(convwgrad.ConvProblem.from_tensors(x, w.shape, dy, 1, 1, 1, x.shape[1])))

    convwgrad.patch(model)          # every grouped nn.ConvNd of model: dW from convwgrad
    print(convwgrad.explain_model(model, example_input))
"""

from . import aot, functional
from .frameworks import (
    disabled,
    explain_model,
    intercept_functional,
    is_enabled,
    layer_plans,
    patch,
    patched_modules,
    set_enabled,
    unpatch,
)
from .provider import (
    ConvProblem,
    KernelSpec,
    Plan,
    TargetInfo,
    Tile,
    conv1d_weight,
    conv2d_weight,
    conv3d_weight,
    dispatch_conv_grouped,
    explain,
    plan,
    record_launches,
    release_workspaces,
)

__version__ = "0.1.0"

__all__ = [
    "ConvProblem", "KernelSpec", "Plan", "TargetInfo", "Tile", "aot", "conv1d_weight", "conv2d_weight",
    "conv3d_weight", "disabled", "dispatch_conv_grouped", "explain", "explain_model", "functional", "intercept_functional", "is_enabled", "layer_plans",
    "patch", "patched_modules", "plan", "record_launches", "release_workspaces", "set_enabled", "unpatch",
]
