"""Hook specifications: the contract between the provider core and its plugins.

Kernel families implement the family hooks (``convwgrad_register_families``
through ``convwgrad_compile``); selectors implement the choice hooks
(``convwgrad_choose_split_k``, ``convwgrad_select``). Hooks are called with
keyword arguments only. A family hook that is handed a spec of another family
returns ``None``, so ``firstresult`` hooks reach the family that owns the spec.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("convwgrad")
hookimpl = pluggy.HookimplMarker("convwgrad")


# ----------------------------------------------------------------- families
@hookspec
def convwgrad_register_families(registry):
    """Register the kernel families this plugin provides.

    Call ``registry.add(name, priority=..., description=..., splits_k=..., max_split_k=...)``
    once per family. A higher priority is preferred when several families
    admit a problem; the aten fallback registers the lowest.

    :param convwgrad.provider.registry.FamilyRegistry registry: the registry to fill.
    """


@hookspec
def convwgrad_candidate_specs(problem, target, group_merge):
    """Return the kernel specs this plugin would consider for ``problem``.

    Each is a :class:`~convwgrad.provider.spec.KernelSpec` with ``split_k=1``;
    the split-K selector sets the degree for families that split. List the
    preferred spec first. Return an empty list (or ``None``) to offer nothing.

    :param convwgrad.provider.problem.ConvProblem problem: the weight gradient to compute.
    :param convwgrad.provider.target.TargetInfo target: where it will run.
    :param int|None group_merge: a pinned merge degree, or None. A family that
        merges groups offers its candidates at exactly this degree (even one it
        will refuse, so the refusal reaches the caller); others may ignore it.
    """


@hookspec(firstresult=True)
def convwgrad_support(problem, spec, target):
    """Decide whether ``spec`` can compute ``problem`` on ``target``.

    Return a :class:`~convwgrad.provider.spec.Verdict`; a refusal carries
    human-readable reasons. Return ``None`` if ``spec`` belongs to another family.

    :param problem: the :class:`ConvProblem`.
    :param spec: the :class:`KernelSpec` to judge.
    :param target: the :class:`TargetInfo`.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_workspace_nbytes(problem, spec):
    """Return the bytes of scratch memory ``spec`` needs for ``problem`` (0 for none).

    The dispatcher allocates exactly this much and passes it to
    :func:`convwgrad_launch`. Return ``None`` if ``spec`` belongs to another family.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_grid(problem, spec, target):
    """Return the launch grids of ``spec``, one ``(x, y, z)`` tuple per kernel launched.

    Return ``None`` if ``spec`` belongs to another family; ``()`` if the family
    launches no Triton kernel.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_launch(problem, spec, target, input, grad_output, out, workspace):
    """Compute dW of ``problem`` into ``out`` with ``spec``.

    ``input`` and ``grad_output`` match ``problem`` (shape, dtype, device);
    ``out`` has shape ``problem.weight_size`` and the problem's dtype;
    ``workspace`` is a contiguous uint8 tensor of :func:`convwgrad_workspace_nbytes`
    bytes, or ``None`` when that is 0; its bytes may be left from an earlier
    call (eager calls reuse a workspace kept per thread and stream). Launch on
    the tensors' device.

    Return the list of kernels launched, by name, so callers can check what
    ran; ``None`` if ``spec`` belongs to another family.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_prepare_launch(problem, spec, target, input, grad_output, out):
    """Bind a launch of ``spec`` to tensors laid out like ``input``, ``grad_output`` and ``out``.

    The dispatcher calls this once per call signature (shapes, strides, dtype, device,
    plan) and keeps the result, so a training step's repeated calls skip planning,
    checks and argument building: validate here, not in ``run``.

    Return a :class:`~convwgrad.provider.spec.BoundLaunch` whose
    ``run(input, grad_output, out, workspace)`` computes dW for tensors with the
    same metadata as those given here and returns it: into ``out`` when it is a
    tensor, else into a contiguous dW it allocates (or, for a family whose library
    returns its own, that one). ``workspace`` is as for :func:`convwgrad_launch`, but
    at least (not exactly) that many bytes: the kept one may be longer.
    ``run`` must not synchronise with the device or read device memory on the host,
    so that CUDA graphs can capture it. ``out`` here is ``None`` (dW contiguous)
    or a tensor whose strides every later ``out`` shares.

    Return ``None`` if ``spec`` belongs to another family, or to leave the
    binding to the dispatcher, which then calls :func:`convwgrad_launch` on every run.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_compile(problem, spec, target):
    """Compile the kernels of ``spec`` for ``target`` without launching them.

    Return a list of :class:`~convwgrad.provider.aot.CompiledKernel`, one per
    kernel, ``[]`` for a family with nothing to compile, ``None`` if ``spec``
    belongs to another family.

    Stops at first non-None result.
    """


# ----------------------------------------------------------------- selectors
@hookspec(firstresult=True)
def convwgrad_tuned_spec(problem, target):
    """Return a spec measured best for ``problem`` on ``target`` (a tuning cache), or ``None``.

    plan() consults this before the policy, judges the spec with
    :func:`convwgrad_support` like any other, and falls back to the policy (with
    a warning) when it is refused. Pins bypass it.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_choose_split_k(problem, spec, target, base_programs, max_split_k):
    """Return the split-K degree for ``spec`` (a family that splits K) on ``target``.

    :param int base_programs: programs the spec's first kernel launches at
        ``split_k=1`` (from its family's :func:`convwgrad_grid`).
    :param int max_split_k: the largest degree the spec's family runs.

    Return ``None`` to leave the choice to the next selector.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def convwgrad_select(problem, target, candidates, families):
    """Choose one spec among the admitted candidates.

    :param candidates: list of ``(KernelSpec, Verdict)`` for every candidate,
        admitted or not, in the order the families listed them.
    :param families: the :class:`~convwgrad.provider.registry.FamilyRegistry`.

    Return a :class:`~convwgrad.provider.registry.Choice` naming the spec and
    the rule that picked it, or ``None`` to leave the choice to the next selector.

    Stops at first non-None result.
    """
