"""Which kernel each grouped convolution of a model gets: one forward pass, one line a layer."""

from __future__ import annotations

import torch
from torch import nn

from convwgrad.provider.layout import layout_of
from convwgrad.provider.plan import Plan, plan
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.target import current_target

from .patching import same_padding

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _problem(module, input) -> ConvProblem:
    device = input.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else input.dtype
    rank = input.dim() - 2
    input_size, padding = tuple(input.shape[2:]), module.padding
    if module.padding_mode != "zeros":  # the module pads the input itself, then convolves unpadded
        input_size = tuple(s + 2 * p for s, p in zip(input_size, module.padding))
        padding = 0
    elif padding == "same":
        padding = tuple(same_padding(module.kernel_size, module.dilation))
    elif padding == "valid":
        padding = 0
    return ConvProblem.build(
        batch=input.shape[0], groups=module.groups, in_channels=module.in_channels,
        out_channels=module.out_channels, input_size=input_size, filter_size=module.kernel_size[:rank],
        stride=module.stride, padding=padding, dilation=module.dilation, dtype=dtype, layout=layout_of(input),
    )


def layer_plans(model: nn.Module, *inputs, **kwargs) -> list[tuple[str, Plan]]:
    """Run ``model(*inputs, **kwargs)`` once without gradients; return (module name, plan of its
    weight gradient) for every grouped convolution that ran, in call order. Autocast, if on
    around the call, is taken into account."""
    seen: list[tuple[str, ConvProblem]] = []
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, _CONVS) and module.groups > 1:
            hooks.append(module.register_forward_pre_hook(
                lambda mod, args, name=name: seen.append((name, _problem(mod, args[0])))
            ))
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else None
    target = current_target(device)
    return [(name or type(model).__name__, plan(problem, target)) for name, problem in seen]


def explain_model(model: nn.Module, *inputs, **kwargs) -> str:
    """:func:`layer_plans` as text: each grouped convolution, its problem, its kernel and the
    rule that chose it (an aten plan means the patched layer runs stock torch)."""
    plans = layer_plans(model, *inputs, **kwargs)
    if not plans:
        return "no grouped convolution ran"
    return "\n".join(f"{name}: {p.problem.describe()}\n    -> {p.kernel_name}  [{p.rule}]" for name, p in plans)
