"""FamilyPlugin: the hook implementations of one kernel family, built from plain functions.

Every family answers the same hooks the same way (return None for another
family's spec, wrap refusal reasons in a Verdict), so that logic lives here
once and a family module only supplies what is its own:

    plugin = FamilyPlugin(
        name="wgrad_splitk", priority=10, description="...", splits_k=True,
        candidate_specs=candidate_specs, not_supported_reasons=not_supported_reasons,
        workspace_nbytes=launcher.workspace_nbytes, grids=launcher.grids,
        launch=launcher.launch, prepare=launcher.prepare, compile=launcher.compile_kernels,
    )

The core registers it by ``"module:plugin"`` in DEFAULT_PLUGINS; a third-party
family can point its entry point at such an object too.
"""

from __future__ import annotations

from typing import Callable

from .hookspecs import hookimpl
from .spec import Verdict


def split_policy_of_problem(choose: Callable) -> Callable:
    """A ``choose_split_k`` for FamilyPlugin from a policy that reads the problem alone (``choose(problem)``,
    the NVRTC families' splits of the batch or of the sequence units), held to the plan's ``max_split_k``."""
    return lambda problem, spec, target, base_programs, max_split_k: min(choose(problem), max_split_k)


class FamilyPlugin:
    def __init__(
        self,
        *,
        name: str,
        priority: int,
        description: str,
        candidate_specs: Callable,  # (problem, target, group_merge) -> list[KernelSpec]
        not_supported_reasons: Callable,  # (problem, spec, target) -> list[str]
        launch: Callable,  # (problem, spec, target, input, grad_output, out, workspace) -> list[str]
        workspace_nbytes: Callable = lambda problem, spec: 0,
        grids: Callable = lambda problem, spec: (),
        compile: Callable = lambda problem, spec, target: [],
        #: (problem, spec, target, input, grad_output, out) -> BoundLaunch; without it the
        #: dispatcher calls ``launch`` on every run
        prepare: Callable | None = None,
        admission_note: Callable = lambda problem, spec, target: "",
        splits_k: bool = False,
        max_split_k: int = 1,
        #: (problem, spec, target, base_programs, max_split_k) -> int: the family's own split policy for its
        #: tiled specs; without it the shared split-K selector chooses
        choose_split_k: Callable | None = None,
    ):
        self.name = name
        self.priority = priority
        self.description = description
        self.splits_k = splits_k
        self.max_split_k = max_split_k
        self._candidate_specs = candidate_specs
        self._reasons = not_supported_reasons
        self._launch = launch
        self._workspace_nbytes = workspace_nbytes
        self._grids = grids
        self._compile = compile
        self._prepare = prepare
        self._note = admission_note
        self._choose_split_k = choose_split_k

    def __repr__(self) -> str:
        return f"<FamilyPlugin {self.name}>"

    def _mine(self, spec) -> bool:
        return spec.family == self.name

    @hookimpl
    def convwgrad_register_families(self, registry):
        registry.add(self.name, priority=self.priority, description=self.description, splits_k=self.splits_k,
                     max_split_k=self.max_split_k)

    @hookimpl
    def convwgrad_candidate_specs(self, problem, target, group_merge):
        return self._candidate_specs(problem, target, group_merge)

    @hookimpl
    def convwgrad_support(self, problem, spec, target):
        if not self._mine(spec):
            return None
        reasons = self._reasons(problem, spec, target)
        if reasons:
            return Verdict.from_reasons(reasons)
        return Verdict.admit(note=self._note(problem, spec, target))

    @hookimpl
    def convwgrad_workspace_nbytes(self, problem, spec):
        if self._mine(spec):
            return self._workspace_nbytes(problem, spec)

    @hookimpl
    def convwgrad_grid(self, problem, spec, target):
        if self._mine(spec):
            return self._grids(problem, spec)

    @hookimpl
    def convwgrad_launch(self, problem, spec, target, input, grad_output, out, workspace):
        if self._mine(spec):
            return self._launch(problem, spec, target, input, grad_output, out, workspace)

    @hookimpl
    def convwgrad_prepare_launch(self, problem, spec, target, input, grad_output, out):
        if self._mine(spec) and self._prepare is not None:
            return self._prepare(problem, spec, target, input, grad_output, out)

    @hookimpl
    def convwgrad_choose_split_k(self, problem, spec, target, base_programs, max_split_k):
        if self._mine(spec) and self._choose_split_k is not None and spec.tile is not None:
            return self._choose_split_k(problem, spec, target, base_programs, max_split_k)
        return None

    @hookimpl
    def convwgrad_compile(self, problem, spec, target):
        if self._mine(spec):
            return self._compile(problem, spec, target)
