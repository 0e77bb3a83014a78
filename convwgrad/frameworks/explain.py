"""Which kernel each grouped convolution of a model gets: one forward pass, one line a layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from convwgrad.provider.plan import Plan, plan
from convwgrad.provider.problem import ConvProblem
from convwgrad.provider.target import current_target, launched

from .patching import _autocast, _ints, _resolve_padding
from .torch_ops import _NOT_A_PROBLEM, _layer_problem

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _problem(module, input) -> ConvProblem:
    """The problem a patched ``module`` dispatches for ``input``: the steps of its ``_conv_forward``
    and of ``grouped_conv`` up to the dispatch (padding mode, 'same'/'valid', autocast), on this
    very input, so the report cannot drift from what runs (an even kernel's 'same' pads the input
    by one first, then symmetrically: in=9x9 p=1 for 8x8, not in=8x8 p=(1,2))."""
    weight, padding = module.weight, module.padding
    if module.padding_mode != "zeros":  # the module pads the input itself, then convolves unpadded
        input = F.pad(input, module._reversed_padding_repeated_twice, mode=module.padding_mode)
        padding = 0
    rank = input.dim() - 2
    stride = _ints(module.stride, rank, "stride")
    dilation = _ints(module.dilation, rank, "dilation")
    input, padding = _resolve_padding(input, weight, padding, stride, dilation, rank)
    input, weight, _ = _autocast(input, weight, None)
    problem = _layer_problem(input, weight, stride, padding, dilation, module.groups)
    if problem is _NOT_A_PROBLEM:
        raise ValueError(
            f"input {tuple(input.shape)} {input.dtype}, weight {tuple(weight.shape)}, stride={stride}, "
            f"padding={padding}, dilation={dilation}, groups={module.groups} is no problem convwgrad computes "
            "(the patched layer runs stock torch)"
        )
    return problem


def _named_problem(name, module, input) -> ConvProblem:
    try:
        return _problem(module, input)
    except ValueError as exc:
        raise ValueError(f"{name or type(module).__name__}: {exc}") from exc


def layer_plans(model: nn.Module, *inputs, launch: str = "eager", **kwargs) -> list[tuple[str, Plan]]:
    """Run ``model(*inputs, **kwargs)`` once without gradients; return (module name, plan of its
    weight gradient) for every grouped convolution that ran, in call order. Autocast, if on
    around the call, is taken into account. ``launch="graph"``: the plans of a step replayed from
    CUDA graphs (``torch.compile(mode="reduce-overhead")``), where the router weighs kernel time only."""
    seen: list[tuple[str, ConvProblem]] = []
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, _CONVS) and module.groups > 1:
            hooks.append(module.register_forward_pre_hook(
                lambda mod, args, name=name: seen.append((name, _named_problem(name, mod, args[0])))
            ))
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else None
    target = launched(current_target(device), launch)
    return [(name or type(model).__name__, plan(problem, target)) for name, problem in seen]


def explain_model(model: nn.Module, *inputs, launch: str = "eager", **kwargs) -> str:
    """:func:`layer_plans` as text: each grouped convolution, its problem, its kernel and the
    rule that chose it (an aten plan means the patched layer runs stock torch)."""
    plans = layer_plans(model, *inputs, launch=launch, **kwargs)
    if not plans:
        return "no grouped convolution ran"
    return "\n".join(f"{name}: {p.problem.describe()}\n    -> {p.kernel_name}  [{p.rule}]" for name, p in plans)
