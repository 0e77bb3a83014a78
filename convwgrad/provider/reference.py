"""The reference dW: torch in float64 on the CPU, for any problem."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .problem import ConvProblem


def aten_weight_grad_call(problem: ConvProblem):
    """``f(input, grad_output) -> dW`` through ``aten.convolution_backward``, its arguments
    built once (a training step calls it for the same layer every step)."""
    symmetric = problem.symmetric_padding
    pads = None if symmetric is not None else _pad_arguments(problem.padding)
    arguments = (
        list(problem.stride), list(symmetric) if symmetric is not None else [0] * problem.spatial_dims,
        list(problem.dilation), False, [0] * problem.spatial_dims, problem.groups, [False, True, False],
    )
    weight_size = problem.weight_size
    zero_strides = (0,) * len(weight_size)
    backward = torch.ops.aten.convolution_backward.default

    def weight_grad(input, grad_output):
        if pads is not None:
            input = F.pad(input, pads)
        # aten takes the weight's shape, dtype, device and strides (zero strides: no memory-format
        # hint, as the broadcast stand-in before) and never its values into dW: some backends copy
        # it, none write it. A zero-stride view of grad_output stands in, allocating nothing (~0.9 us
        # on a 2-core CPU, against ~2.2 us for new_empty(1).expand); grad_output is never empty here
        # (ConvProblem has no zero sizes; an empty batch is torch_weight_grad's, whose new_empty
        # stand-in must stay: as_strided of an empty tensor raises). Nothing is kept between calls:
        # a stand-in kept from the first call was allocated wherever that call ran, and when that
        # was a CUDA-graph warm-up (torch.compile's reduce-overhead), it stayed live in the graph
        # pool, which cudagraph trees refuse ("tensors in the cudagraph pool not tracked as outputs").
        weight = grad_output.as_strided(weight_size, zero_strides)
        return backward(grad_output, input, weight, None, *arguments)[1]

    if pads is None:  # one aten call: what BoundLaunch.aten_call describes
        weight_grad.aten_call = (tuple(weight_size), tuple(problem.stride), tuple(symmetric), tuple(problem.dilation),
                                 problem.groups)
    return weight_grad


def _pad_arguments(pairs) -> list[int]:
    """F.pad's argument for (before, after) pairs per spatial dim: it lists them from the last dim back."""
    return [v for pair in reversed(pairs) for v in pair]


def torch_weight_grad(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """torch's own dW (``aten.convolution_backward``, as ``torch.nn.grad.conv*d_weight`` calls it)
    from raw arguments, for calls no ConvProblem poses (float64, an empty batch) or with convwgrad
    off; convwgrad's padding conventions (ints, or (before, after) pairs per dim). Differentiable
    where torch's is."""
    rank = input.dim() - 2
    per_dim = lambda v: [v] * rank if isinstance(v, int) else list(v)  # noqa: E731
    padding = per_dim(padding)
    if any(not isinstance(p, int) for p in padding):
        pairs = [(p, p) if isinstance(p, int) else tuple(p) for p in padding]
        if any(lo != hi for lo, hi in pairs):
            input = F.pad(input, _pad_arguments(pairs))
            padding = [0] * rank
        else:
            padding = [lo for lo, _ in pairs]
    weight = grad_output.new_empty(1).expand(tuple(weight_size))
    return torch.ops.aten.convolution_backward(
        grad_output, input, weight, None, per_dim(stride), padding, per_dim(dilation), False, [0] * rank,
        groups, [False, True, False],
    )[1]


def aten_weight_grad(problem: ConvProblem, input: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """dW through ``aten.convolution_backward`` in the tensors' own dtype and device."""
    return aten_weight_grad_call(problem)(input, grad_output)


def reference_weight_grad(
    problem: ConvProblem, input: torch.Tensor, grad_output: torch.Tensor, *, device="cpu"
) -> torch.Tensor:
    """dW in float64, shape ``problem.weight_size``; on the CPU unless ``device`` says otherwise
    (sweeps of large layers compute it on the GPU, still in float64)."""
    x = input.detach().to(device=device, dtype=torch.float64)
    dy = grad_output.detach().to(device=device, dtype=torch.float64)
    return aten_weight_grad(problem, x, dy)


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """||result - reference||_F / ||reference||_F in float64; inf when result has NaN or inf."""
    r = result.detach().to(device="cpu", dtype=torch.float64)
    ref = reference.detach().to(device="cpu", dtype=torch.float64)
    if not torch.isfinite(r).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(r - ref).item()
    return num / denom if denom else num


#: Relative Frobenius error a kernel may have against the float64 reference,
#: per dtype (fp32 with TF32 off; TF32 lands near 3e-4).
TOLERANCE = {"bf16": 8e-3, "fp16": 1e-3, "fp32": 1e-5}
TOLERANCE_TF32 = 2e-3
