"""Building blocks of the families that compute dW in one call of torch's own backward (the aten
fallback, aten channels_last): their shared refusals and their bound launch. No Triton here."""

from __future__ import annotations

import torch

from convwgrad.provider.spec import BoundLaunch


def whole_call_reasons(problem, spec) -> list[str]:
    """What a family computing dW in one aten call refuses in a spec: another dtype, a split, a
    group merge, a tile."""
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


def bind_whole_call(weight_grad, kernels) -> BoundLaunch:
    """``weight_grad(x, dy) -> dW`` as a bound launch: dW returned as torch computed it (no copy)
    when it is contiguous, else a contiguous copy; written into ``out`` when one is given. Where
    ``weight_grad`` is :func:`~convwgrad.provider.reference.aten_weight_grad_call`'s one aten call,
    the launch says so (``aten_call``), and the native warm path makes that call itself."""

    def run(x, dy, out, workspace):
        if x.requires_grad or dy.requires_grad:  # a plain dW, as the Triton families give: no graph
            x, dy = x.detach(), dy.detach()
        dw = weight_grad(x, dy)
        if out is None:
            return dw if dw.is_contiguous() else dw.contiguous()
        if out.requires_grad:  # written in place like a kernel's output, not recorded by autograd
            with torch.no_grad():
                return out.copy_(dw)
        return out.copy_(dw)

    return BoundLaunch(run=run, kernels=kernels, aten_call=getattr(weight_grad, "aten_call", None))
