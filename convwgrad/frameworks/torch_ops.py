"""torch custom ops: ``convwgrad::conv_weight`` (the dW provider) and ``convwgrad::conv``
(a grouped convolution whose forward and input gradient are torch's own and whose weight
gradient comes from convwgrad).

Both ops have fake (meta) implementations, so ``torch.compile`` traces them without graph
breaks, and both pass ``torch.library.opcheck``. A framework backend that wants convwgrad as
its provider of grouped-conv weight gradients calls ``torch.ops.convwgrad.conv_weight``
with aten's ``convolution_backward`` conventions (symmetric padding, one int per dim).

This module deliberately has no ``from __future__ import annotations``: ``custom_op`` reads
the schema from the annotations at runtime.
"""

from typing import Optional

import torch
from torch import Tensor

from convwgrad.provider.dispatch import conv_weight as _dispatch_conv_weight
from convwgrad.provider.layout import layout_of, to_layout


def _matching_layouts(input: Tensor, grad_output: Tensor) -> tuple[Tensor, Tensor]:
    """Both tensors in the input's layout (autograd may hand grad_output over in any strides);
    copies only what is not already there."""
    layout = layout_of(input)
    return to_layout(input, layout), to_layout(grad_output, layout)


@torch.library.custom_op("convwgrad::conv_weight", mutates_args=())
def conv_weight(
    input: Tensor,
    grad_output: Tensor,
    weight_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> Tensor:
    """dW of ``conv(input, W, stride, padding, dilation, groups)`` given dL/d(output), in the
    input's dtype; the arguments follow ``aten.convolution_backward`` (one padding per dim)."""
    input, grad_output = _matching_layouts(input, grad_output)
    return _dispatch_conv_weight(input, weight_size, grad_output, stride, padding, dilation, groups)


@conv_weight.register_fake
def _conv_weight_fake(input, grad_output, weight_size, stride, padding, dilation, groups):
    return input.new_empty(weight_size)


def _aten_conv(input, weight, bias, stride, padding, dilation, groups):
    return torch.ops.aten.convolution.default(
        input, weight, bias, stride, padding, dilation, False, [0] * len(stride), groups
    )


@torch.library.custom_op("convwgrad::conv", mutates_args=())
def conv(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> Tensor:
    """torch's own convolution; its registered backward takes dW from ``conv_weight``."""
    return _aten_conv(input, weight, bias, stride, padding, dilation, groups)


@conv.register_fake
def _conv_fake(input, weight, bias, stride, padding, dilation, groups):
    return _aten_conv(input, weight, bias, stride, padding, dilation, groups)


def _conv_setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(input, weight)
    ctx.arguments = (stride, padding, dilation, groups, bias is not None)


def _conv_backward(ctx, grad_output):
    input, weight = ctx.saved_tensors
    stride, padding, dilation, groups, has_bias = ctx.arguments
    wants_input, wants_weight, wants_bias = ctx.needs_input_grad[:3]
    grad_input = grad_weight = grad_bias = None
    if wants_input or (has_bias and wants_bias):
        grad_input, _, grad_bias = torch.ops.aten.convolution_backward.default(
            grad_output, input, weight, [weight.shape[0]] if has_bias else None, stride, padding, dilation,
            False, [0] * len(stride), groups, [wants_input, False, has_bias and wants_bias],
        )
    if wants_weight:
        grad_weight = torch.ops.convwgrad.conv_weight.default(
            input, grad_output, list(weight.shape), stride, padding, dilation, groups
        )
    return grad_input, grad_weight, grad_bias, None, None, None, None


torch.library.register_autograd("convwgrad::conv", _conv_backward, setup_context=_conv_setup_context)
