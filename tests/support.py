"""Checks shared by the kernel tests: fresh random inputs, NaN-poisoned outputs, the family that ran."""

from __future__ import annotations

import attrs
import torch

import convwgrad
from convwgrad.bench import make_inputs
from convwgrad.provider import ConvProblem, Tile, reference_weight_grad, relative_error
from convwgrad.provider.dispatch import dispatch_conv_grouped, record_launches
from convwgrad.provider.reference import TOLERANCE
from convwgrad.provider.spec import pow2_at_least

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@attrs.frozen
class Outcome:
    out: torch.Tensor
    error: float
    plan: object
    launches: list
    workspace: torch.Tensor | None


def describe_mismatch(out: torch.Tensor, ref: torch.Tensor) -> str:
    """Where and how badly ``out`` differs: NaN/inf counts and the worst element (Liger-style)."""
    out64 = out.detach().double().cpu()
    diff = (out64 - ref).abs()
    nan, inf = torch.isnan(out64).sum().item(), torch.isinf(out64).sum().item()
    worst = torch.nan_to_num(diff, nan=float("inf")).argmax().item()
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), out.shape))
    return (f"{nan} NaN, {inf} inf of {out.numel()}; worst at {index}: got {out64[index].item():.6g}, "
            f"expected {ref[index].item():.6g}")


def run_checked(problem: ConvProblem, *, family="wgrad_splitk", device=DEVICE, inputs=None, **pins) -> Outcome:
    """Run ``problem`` over NaN-poisoned dW and workspace, on fresh random inputs unless ``inputs``
    (x, dy) are given; assert every element was written and ``family`` ran; return the relative
    error against float64."""
    x, dy = inputs if inputs is not None else make_inputs(problem, device)
    chosen = convwgrad.plan(problem, device if device != "cpu" else None, family=family, **pins)
    out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device=device)
    workspace = None
    if chosen.workspace_nbytes:
        workspace = torch.empty(chosen.workspace_nbytes, dtype=torch.uint8, device=device)
        workspace.view(torch.float32).fill_(float("nan"))
    with record_launches() as log:
        dispatch_conv_grouped(problem, x, dy, plan=chosen, out=out, workspace=workspace)
    assert [r.family for r in log] == [family], f"expected {family} to run, got {log}"
    if chosen.two_stage:
        assert log[0].kernels[-1] == "_splitk_reduce_kernel", log
        assert torch.isfinite(workspace.view(torch.float32)).all(), "stage 1 left workspace elements unwritten"
    ref = reference_weight_grad(problem, x, dy)
    assert torch.isfinite(out).all(), "dW has unwritten (NaN) elements: " + describe_mismatch(out, ref)
    return Outcome(out=out, error=relative_error(out, ref), plan=chosen, launches=log, workspace=workspace)


def assert_close_to_reference(outcome: Outcome, problem: ConvProblem, tolerance: float | None = None):
    tolerance = TOLERANCE[problem.dtype] if tolerance is None else tolerance
    assert outcome.error <= tolerance, (
        f"{outcome.plan.kernel_name}: relative error {outcome.error:.3e} > {tolerance:.0e} for {problem.describe()}"
    )


def small_tile(problem: ConvProblem, block_k: int = 16) -> Tile:
    """A 16-step tile so tiny interpreter shapes still have several K steps to split."""
    fit = lambda extent: min(64, pow2_at_least(extent, 16))  # noqa: E731
    return Tile(block_m=fit(problem.gemm_m), block_n=fit(problem.gemm_n), block_k=block_k)


#: Realistic layers the GPU suites check (depthwise, grouped, channel multiplier; 1-D to 3-D).
GPU_LAYERS = {
    "mobilenetv2-144x56": dict(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, padding=1),
    "mobilenetv2-s2": dict(batch=32, groups=144, in_channels=144, input_size=(56, 56), filter_size=3, stride=2, padding=1),
    "efficientnet-k5": dict(batch=32, groups=240, in_channels=240, input_size=(28, 28), filter_size=5, padding=2),
    "convnext-k7": dict(batch=32, groups=96, in_channels=96, input_size=(56, 56), filter_size=7, padding=3),
    "replknet-k31": dict(batch=8, groups=128, in_channels=128, input_size=(28, 28), filter_size=31, padding=15),
    "dilated-asym": dict(batch=16, groups=64, in_channels=64, input_size=(33, 31), filter_size=3, dilation=2, padding=((1, 3), (2, 2))),
    "resnext-cpg4": dict(batch=32, groups=32, in_channels=128, input_size=(28, 28), filter_size=3, padding=1),
    "multiplier-kpg2": dict(batch=16, groups=96, in_channels=96, out_channels=192, input_size=(28, 28), filter_size=3, padding=1),
    "conformer-1d-k31": dict(batch=32, groups=256, in_channels=256, input_size=(512,), filter_size=31, padding=15),
    "mamba-1d-k4": dict(batch=16, groups=512, in_channels=512, input_size=(1024,), filter_size=4, padding=((3, 0),)),
    "x3d-3d": dict(batch=8, groups=96, in_channels=96, input_size=(8, 28, 28), filter_size=3, padding=1),
}


def assert_bitwise_repeatable(problem: ConvProblem, chosen, x, dy) -> None:
    """Two runs of ``chosen`` on the same inputs: its family ran both times, and dW is bitwise equal."""
    with record_launches() as log:
        first = dispatch_conv_grouped(problem, x, dy, plan=chosen)
        second = dispatch_conv_grouped(problem, x, dy, plan=chosen)
    assert [r.family for r in log] == [chosen.family, chosen.family]
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
