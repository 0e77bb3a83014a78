"""One line for a model: ``convwgrad.patch(model)`` routes the weight gradient of every grouped
convolution through convwgrad; ``convwgrad.unpatch(model)`` undoes it; ``convwgrad.disabled()``
switches convwgrad off everywhere (torch's own path) for debugging.

Patching swaps the class of each ``nn.Conv1d/2d/3d`` with groups > 1 for a subclass whose
``_conv_forward`` calls :func:`grouped_conv`; parameters, buffers, hooks and ``state_dict`` keys
are the module's own, untouched. Forward and input gradient stay torch's; autocast, channels_last,
gradient accumulation and ``torch.compile`` behave as with the stock module.
"""

from __future__ import annotations

import contextlib
import importlib

import torch
import torch.nn.functional as F
from torch import nn

from convwgrad.provider.dispatch import (  # noqa: F401  (disabled, set_enabled: re-exported)
    _state as _switch, cached_for_planning, disabled, is_enabled, planning_generation, set_enabled,
)

from .torch_ops import WeightGradMemo, planned_for_torch
from .torch_ops import eager_conv as _conv_op

# the modules themselves (their names in convwgrad.provider are functions): a patched layer reads
# their manager-switch and plan-cache-epoch counters on every call, as attributes
_manager_module = importlib.import_module("convwgrad.provider.manager")
_plan_module = importlib.import_module("convwgrad.provider.plan")

_STOCK = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _ints(value, rank: int, name: str) -> list[int]:
    values = [value] * rank if isinstance(value, int) else list(value)
    if len(values) != rank or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{name} must be an int or {rank} ints, got {value!r}")
    return values


def same_padding(kernel_size, dilation) -> list[tuple[int, int]]:
    """(before, after) per dim of torch's padding='same': the odd one out goes after."""
    totals = [d * (k - 1) for d, k in zip(dilation, kernel_size)]
    return [(t // 2, t - t // 2) for t in totals]


def _resolve_padding(input, weight, padding, stride, dilation, rank):
    """Symmetric per-dim padding for the op; 'same' with an odd total pads the input first (as torch does)."""
    if not isinstance(padding, str):
        return input, _ints(padding, rank, "padding")
    if padding == "valid":
        return input, [0] * rank
    if padding != "same":
        raise ValueError(f"padding must be an int, ints, 'valid' or 'same', got {padding!r}")
    if any(s != 1 for s in stride):
        raise ValueError(f"padding='same' needs stride 1, got stride={tuple(stride)}")
    pairs = same_padding(weight.shape[2:], dilation)
    if any(after != before for before, after in pairs):
        pads = []
        for before, after in reversed(pairs):  # F.pad takes the last dim first
            pads += [0, after - before]
        input = F.pad(input, pads)
    return input, [before for before, _ in pairs]


def _autocast(input, weight, bias):
    """Cast as autocast would for a convolution: a custom op is not autocast by torch itself."""
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device)
    # a tensor already in autocast's dtype (the input, when the layer before ran under autocast)
    # is passed on as it is, not through a no-op .to(): one dispatcher call less a layer
    cast = lambda t: t if t is None or t.dtype is dtype or not t.is_floating_point() else t.to(dtype)  # noqa: E731
    return cast(input), cast(weight), cast(bias)


def routes_to_torch(input, weight, stride, padding, dilation, groups) -> bool:
    """Whether ``plan()`` gives this layer's dW to torch's own kernel (the aten family): the
    layer then runs stock torch, with none of the custom op's cost. Kept per layer signature
    until anything plan() reads changes. Under ``torch.compile`` the op is always used (dynamo
    does not trace plan()); its backward, traced by AOTAutograd on fake tensors, is stock torch's
    where plan() allows (``torch_ops._stock_backward``)."""
    if torch.compiler.is_compiling():
        return False
    key = ("routes_to_torch", input.shape, input.stride(), input.dtype, input.device, weight.shape,
           tuple(stride), tuple(padding), tuple(dilation), groups)
    return cached_for_planning(key, lambda: planned_for_torch(input, weight, stride, padding, dilation, groups))


def _resolve(input, weight, bias, stride, padding, dilation, groups):
    """What :func:`grouped_conv` calls with (groups > 1, convwgrad on): whether the layer runs stock
    torch, and the arguments after padding and autocast."""
    rank = input.dim() - 2
    stride = _ints(stride, rank, "stride")
    dilation = _ints(dilation, rank, "dilation")
    input, padding = _resolve_padding(input, weight, padding, stride, dilation, rank)
    input, weight, bias = _autocast(input, weight, bias)
    stock = routes_to_torch(input, weight, stride, padding, dilation, groups)
    return stock, (input, weight, bias, stride, padding, dilation, groups)


def grouped_conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``F.conv1d/2d/3d`` (picked by the input's rank) whose weight gradient comes from convwgrad
    when ``groups > 1`` and convwgrad is enabled; torch's own call otherwise."""
    rank = input.dim() - 2
    if rank not in _STOCK:
        raise ValueError(f"input must be 3-D, 4-D or 5-D (N, C, *spatial), got shape {tuple(input.shape)}")
    if groups == 1 or not is_enabled():
        return _STOCK[rank](input, weight, bias, stride, padding, dilation, groups)
    stock, arguments = _resolve(input, weight, bias, stride, padding, dilation, groups)
    return _STOCK[rank](*arguments) if stock else _conv_op(*arguments)


def _drop_in(rank: int):
    def conv_nd(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        if input.dim() != rank + 2:
            raise ValueError(f"conv{rank}d needs a {rank + 2}-D input, got shape {tuple(input.shape)}")
        return grouped_conv(input, weight, bias, stride, padding, dilation, groups)

    conv_nd.__name__ = f"conv{rank}d"
    conv_nd.__doc__ = f"Drop-in for ``F.conv{rank}d``: dW from convwgrad when groups > 1."
    return conv_nd


conv1d, conv2d, conv3d = _drop_in(1), _drop_in(2), _drop_in(3)


_FUNCTIONAL = frozenset((F.conv1d, F.conv2d, F.conv3d))
_CONV_ARGUMENTS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


class _FunctionalConvs(torch.overrides.TorchFunctionMode):
    """Reroutes ``F.conv1d/2d/3d`` calls with groups > 1 through :func:`grouped_conv`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FUNCTIONAL:
            bound = {**dict(zip(_CONV_ARGUMENTS, args)), **kwargs}
            if bound.get("groups", 1) > 1:
                return grouped_conv(**bound)  # the mode is off inside its handler: no recursion
        return func(*args, **kwargs)


@contextlib.contextmanager
def intercept_functional():
    """Inside the block, every ``F.conv1d/2d/3d`` call with groups > 1 takes its weight gradient
    from convwgrad: for code that calls the functional form itself (a ``Conv2dSame``-style
    subclass, a custom block), which :func:`patch` leaves alone. Eager mode only."""
    with _FunctionalConvs():
        yield


#: where a patched module keeps its route: [what its last call looked like (the input's shape,
#: strides, dtype and device, whether dW is wanted, the plugin-manager switches and the plan-cache
#: epoch: plain values, so the module still copies and pickles), the global state the route was
#: decided in, calls left before that state is read again, runs stock torch?, the op's resolved
#: arguments, the backward's remembered dW call (a WeightGradMemo: copied and pickled empty)]
_ROUTE = "_convwgrad_route"
#: A patched layer reads the global state its route depends on (autocast for its device, the
#: planning generation: TF32 switch, tuning file, registered plugins) on every this many calls,
#: not on every call: inside a model those queries cost most of what a layer paid over the stock
#: module (2-core CPU, UniRepLKNet-T channels_last, 87 of its 102 grouped layers planned for cuDNN:
#: 11.8-13.2 us a layer with everything read on every call, 4.3-5.0 us with this split; the
#: override alone ~0.3 us; notes/PERF.md session 4). A route outdated by such a change is still
#: correct (every route computes the same gradient) and lasts at most this many calls of the
#: layer; the input's metadata, whether dW is wanted (the weight's requires_grad and grad mode, which alternate on
#: one layer under activation checkpointing), a switched plugin manager, clear_plan_cache() and
#: convwgrad.disabled() are checked on every call.
GLOBAL_STATE_EVERY = 16


def _global_state(input):
    """The global state a layer's route depends on, for the device of ``input``, besides what
    each call checks."""
    kind = input.device.type
    return (torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None, planning_generation())


class _PatchedConv:
    """Mixin of the patched classes: the module's own padding mode, then :func:`grouped_conv`.

    Each module keeps the route of its last call (see :data:`_ROUTE`), so a layer planned for
    torch, or called without a weight gradient (inference, a frozen weight), costs one
    tuple comparison over the stock module: in an eager step whose host is the bottleneck
    (EfficientNet-B0 at batch 128 on an H200: 43 ms a step for 26 ms of kernels) the ~20 us of
    resolving padding, autocast and the plan per layer showed up in the step time."""

    def _convwgrad_call(self, input, weight, bias):
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return input, (weight, bias, self.stride, 0, self.dilation, self.groups)
        return input, (weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def _conv_forward(self, input, weight, bias):
        if torch.compiler.is_compiling() or not _switch.enabled:
            padded, arguments = self._convwgrad_call(input, weight, bias)
            return grouped_conv(padded, *arguments)
        call = (input.shape, input.stride(), input.dtype, input.device,
                weight.requires_grad and torch.is_grad_enabled(), _manager_module.switches, _plan_module._epoch)
        route = self.__dict__.get(_ROUTE)
        if route is None or route[0] != call:
            route = self._new_route(call, input, weight, bias)
        else:
            route[2] -= 1
            if route[2] < 0:
                route[2] = GLOBAL_STATE_EVERY
                if route[1] != _global_state(input):
                    route = self._new_route(call, input, weight, bias)
        if route[3]:
            return self._stock_conv_forward(input, weight, bias)  # the stock module's own call
        resolved = route[4]
        if resolved is not None:  # the op's arguments, resolved once for this route
            return _conv_op(*_autocast(input, weight, bias), *resolved, route[5])
        padded, arguments = self._convwgrad_call(input, weight, bias)
        return grouped_conv(padded, *arguments)

    def _new_route(self, call, input, weight, bias):
        state = _global_state(input)  # read before routing: a change during it re-routes next time
        route = self.__dict__[_ROUTE] = [call, state, GLOBAL_STATE_EVERY, *self._route(input, weight, bias),
                                         WeightGradMemo()]
        return route

    def _route(self, input, weight, bias):
        """(runs stock torch?, the op's (stride, padding, dilation, groups) where no padding copy
        or padding mode stands between the module's input and the op, else None)."""
        if not (weight.requires_grad and torch.is_grad_enabled()):
            return True, None  # no weight gradient to compute: the stock call, nothing around it
        padded, arguments = self._convwgrad_call(input, weight, bias)
        stock, (op_input, *_, stride, padding, dilation, groups) = _resolve(padded, *arguments)
        direct = padded is input and op_input.shape == input.shape
        return stock, (stride, padding, dilation, groups) if direct and not stock else None


class Conv1d(_PatchedConv, nn.Conv1d):
    _stock_conv_forward = nn.Conv1d._conv_forward


class Conv2d(_PatchedConv, nn.Conv2d):
    _stock_conv_forward = nn.Conv2d._conv_forward


class Conv3d(_PatchedConv, nn.Conv3d):
    _stock_conv_forward = nn.Conv3d._conv_forward


_PATCHED = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d}
_STOCK_CLASS = {patched: stock for stock, patched in _PATCHED.items()}


def patch(model: nn.Module) -> nn.Module:
    """Route the weight gradient of every grouped convolution in ``model`` (the module itself
    included) through convwgrad, in place; return ``model``. Only plain ``nn.Conv1d/2d/3d`` with
    groups > 1 change; subclasses, transposed and ungrouped convolutions are left alone."""
    for module in model.modules():
        patched = _PATCHED.get(type(module))
        if patched is not None and module.groups > 1:
            module.__class__ = patched
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo :func:`patch`: every patched convolution in ``model`` is the stock class again."""
    for module in model.modules():
        stock = _STOCK_CLASS.get(type(module))
        if stock is not None:
            module.__class__ = stock
            module.__dict__.pop(_ROUTE, None)
    return model


def patched_modules(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` that :func:`patch` switched."""
    return [name for name, module in model.named_modules() if type(module) in _STOCK_CLASS]
