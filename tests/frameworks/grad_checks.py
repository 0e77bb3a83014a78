"""Gradient comparisons for bf16 training steps on the GPU, shared by the compile and CUDA-graph
suites: an fp32 reference and FlashAttention's three-way bound."""

import copy

import torch
import torch.nn.functional as F

import convwgrad
from convwgrad.provider.reference import relative_error

#: Relative error a bf16 (autocast) parameter gradient may have beyond twice its baseline's.
BF16_TOL = 2e-2


def grads(model) -> dict:
    """name: a copy of the parameter's gradient (a later step or replay may overwrite the tensor)."""
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing, f"no gradient for {missing}"
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def fp32_reference_grads(model, x, target) -> dict:
    """Gradients of a copy of ``model`` in fp32, eager, no autocast, stock torch everywhere
    (run with TF32 off): what every bf16 run of the step approximates."""
    reference = copy.deepcopy(model).float()
    reference.zero_grad(set_to_none=True)
    with convwgrad.disabled():
        F.cross_entropy(reference(x.float()), target).backward()
    return grads(reference)


def assert_within_bf16_noise(got: dict, baseline: dict, reference: dict, *, what: str, tol: float = BF16_TOL):
    """Each gradient in ``got`` is no further from the fp32 ``reference`` than twice ``baseline``'s
    own error plus ``tol`` (FlashAttention's three-way bound). A direct comparison of two bf16 runs
    fails on gradients that bf16 rounding leaves ill-conditioned: a BatchNorm weight feeding a
    spatial mean, whose terms cancel to a small sum, differs by ~100 % between stock eager and stock
    compiled on the H200 with no convwgrad in the model. Here such a gradient passes on its own
    noise, while a wrong gradient still fails."""
    assert got.keys() == baseline.keys() == reference.keys()
    failures = []
    for name, ref in reference.items():
        assert got[name].dtype == baseline[name].dtype, name
        ours, theirs = relative_error(got[name], ref.double()), relative_error(baseline[name], ref.double())
        if not ours <= 2 * theirs + tol:
            failures.append(f"{name}: {ours:.2e} vs fp32, baseline {theirs:.2e}")
    assert not failures, f"{what}: " + "; ".join(failures)
