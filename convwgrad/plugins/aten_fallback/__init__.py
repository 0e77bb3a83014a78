"""The aten fallback family: torch's own convolution backward, so every valid problem gets an answer.

It has the lowest priority: the selector takes it only when no Triton family
admits the problem (or where a selection rule says it is faster). On CPU
tensors without TRITON_INTERPRET=1 it is what runs.
"""

from __future__ import annotations

from convwgrad.provider.blocks.aten import bind_whole_call, whole_call_reasons
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.reference import aten_weight_grad, aten_weight_grad_call
from convwgrad.provider.spec import BoundLaunch, KernelSpec

FAMILY = "aten"
PRIORITY = 0


def not_supported_reasons(problem, spec, target) -> list[str]:
    return whole_call_reasons(problem, spec)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype)]


KERNELS = ("aten.convolution_backward",)


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    out.copy_(aten_weight_grad(problem, input, grad_output))
    return list(KERNELS)


def prepare(problem, spec, target, input, grad_output, out) -> BoundLaunch:
    """torch's own dW, returned as torch computed it (no copy) when no ``out`` is given."""
    return bind_whole_call(aten_weight_grad_call(problem), KERNELS)


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="torch's aten.convolution_backward (cuDNN/MIOpen/CPU)",
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    launch=launch,
    prepare=prepare,
)
