"""The reference dW: torch in float64 on the CPU, for any problem."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .problem import ConvProblem


def explicit_padding(problem: ConvProblem, input: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Pad ``input`` by hand when padding is asymmetric; return it and the symmetric padding left to aten."""
    symmetric = problem.symmetric_padding
    if symmetric is not None:
        return input, list(symmetric)
    # F.pad lists pairs from the last dim backwards.
    pads = [v for lo_hi in reversed(problem.padding) for v in lo_hi]
    return F.pad(input, pads), [0] * problem.spatial_dims


def aten_weight_grad(problem: ConvProblem, input: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """dW through ``aten.convolution_backward`` in the tensors' own dtype and device."""
    padded, padding = explicit_padding(problem, input)
    weight = input.new_empty(1).expand(problem.weight_size)
    _, grad_weight, _ = torch.ops.aten.convolution_backward(
        grad_output,
        padded,
        weight,
        None,
        list(problem.stride),
        padding,
        list(problem.dilation),
        False,
        [0] * problem.spatial_dims,
        problem.groups,
        [False, True, False],
    )
    return grad_weight


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
