"""The aten fallback family: torch's own convolution backward, so every valid problem gets an answer.

It has the lowest priority: the selector takes it only when no Triton family
admits the problem (or where a selection rule says it is faster). On CPU
tensors without TRITON_INTERPRET=1 it is what runs.
"""

from __future__ import annotations

from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.reference import aten_weight_grad
from convwgrad.provider.spec import KernelSpec, Verdict

FAMILY = "aten"
PRIORITY = 0


def _mine(spec) -> bool:
    return spec.family == FAMILY


def not_supported_reasons(problem, spec) -> list[str]:
    reasons = []
    if spec.dtype != problem.dtype:
        reasons.append(f"spec dtype {spec.dtype} != problem dtype {problem.dtype}")
    if spec.split_k != 1:
        reasons.append(f"split_k={spec.split_k}: aten computes dW in one call and cannot split K")
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: aten does not merge groups")
    if spec.tile is not None:
        reasons.append("aten takes no tile")
    return reasons


@hookimpl
def convwgrad_register_families(registry):
    registry.add(FAMILY, priority=PRIORITY, description="torch's aten.convolution_backward (cuDNN/MIOpen/CPU)")


@hookimpl
def convwgrad_candidate_specs(problem, target):
    return [KernelSpec(family=FAMILY, dtype=problem.dtype)]


@hookimpl
def convwgrad_support(problem, spec, target):
    if _mine(spec):
        return Verdict.from_reasons(not_supported_reasons(problem, spec))


@hookimpl
def convwgrad_workspace_nbytes(problem, spec):
    if _mine(spec):
        return 0


@hookimpl
def convwgrad_grid(problem, spec, target):
    if _mine(spec):
        return ()


@hookimpl
def convwgrad_launch(problem, spec, target, input, grad_output, out, workspace):
    if _mine(spec):
        out.copy_(aten_weight_grad(problem, input, grad_output))
        return ["aten.convolution_backward"]


@hookimpl
def convwgrad_compile(problem, spec, target):
    if _mine(spec):
        return []
