"""plan() and explain(): which kernel computes a problem, and why.

Planning is cheap (no compilation, no timing): it asks each family for its
candidate specs, lets the split-K selector set degrees, asks each family
whether it admits its specs, and lets the selector choose.
"""

from __future__ import annotations

import math
import weakref

import attrs

from .diagnostics import warn_at_caller
from .manager import families, get_plugin_manager
from .problem import ConvProblem
from .registry import Choice
from .spec import KernelSpec, Tile, Verdict
from .target import TargetInfo, cudnn_conv_allows_tf32, resolve_target

#: Keyword pins plan() accepts; each forces one field of every candidate.
PINS = ("family", "split_k", "group_merge", "tile")


@attrs.frozen(kw_only=True, cache_hash=True)
class Plan:
    problem: ConvProblem
    target: TargetInfo
    spec: KernelSpec
    #: one (x, y, z) grid per kernel launched; () for a family with no Triton kernel
    grid: tuple[tuple[int, int, int], ...]
    workspace_nbytes: int
    #: the selection rule that chose this spec
    rule: str

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def kernel_name(self) -> str:
        return self.spec.kernel_name()

    @property
    def group_merge(self) -> int:
        return self.spec.group_merge

    @property
    def split_k(self) -> int:
        return self.spec.split_k

    @property
    def two_stage(self) -> bool:
        return self.spec.two_stage


class NoCandidateError(ValueError):
    """No candidate spec admits the problem; the message lists every candidate's reasons."""

    def __init__(self, message: str, candidates=()):
        super().__init__(message, tuple(candidates))
        self.candidates = list(candidates)

    def __str__(self) -> str:
        return self.args[0]

    @classmethod
    def build(cls, problem: ConvProblem, target: TargetInfo, candidates, pins: dict) -> "NoCandidateError":
        pinned = f" with pins {pins}" if pins else ""
        lines = [f"no kernel admits {problem.describe()} on {target.name}{pinned}:"]
        if not candidates:
            lines.append("  (no family offered a candidate)")
        for spec, verdict in candidates:
            lines.append(f"  {spec.kernel_name()}: {verdict}")
        return cls("\n".join(lines), candidates)


def _check_pins(pins: dict, registry) -> None:
    unknown = set(pins) - set(PINS)
    if unknown:
        raise TypeError(f"unknown pin(s) {sorted(unknown)}; plan() takes {', '.join(PINS)}")
    if "family" in pins and pins["family"] not in registry:
        raise ValueError(f"family={pins['family']!r} is not registered; known: {', '.join(registry.names())}")
    if "tile" in pins and not isinstance(pins["tile"], Tile):
        raise TypeError(f"tile pin must be a Tile, got {pins['tile']!r}")
    for name in ("split_k", "group_merge"):
        value = pins.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={pins[name]!r}: must be a positive int")


def candidates(problem: ConvProblem, target=None, **pins) -> list[tuple[KernelSpec, Verdict]]:
    """Every candidate spec for ``problem`` with its verdict, pins applied."""
    pm = get_plugin_manager()
    registry = families(pm)
    target = resolve_target(target)
    _check_pins(pins, registry)
    offered = pm.hook.convwgrad_candidate_specs(problem=problem, target=target, group_merge=pins.get("group_merge"))
    offered = [spec for specs in offered for spec in specs or ()]
    seen: set[KernelSpec] = set()
    judged = []
    for spec in offered:
        if "family" in pins and spec.family != pins["family"]:
            continue
        if "tile" in pins:  # a family that takes no tile (aten's) then refuses it, with its reason
            spec = attrs.evolve(spec, tile=pins["tile"])
        if "group_merge" in pins and spec.group_merge != pins["group_merge"]:
            spec = attrs.evolve(spec, group_merge=pins["group_merge"])
        if "split_k" in pins:
            spec = attrs.evolve(spec, split_k=pins["split_k"])
        elif registry[spec.family].splits_k:
            grids = pm.hook.convwgrad_grid(problem=problem, spec=attrs.evolve(spec, split_k=1), target=target)
            base = max(1, math.prod(grids[0])) if grids else 1  # a spec its gate refuses may size to 0
            chosen = pm.hook.convwgrad_choose_split_k(problem=problem, spec=spec, target=target, base_programs=base,
                                                      max_split_k=registry[spec.family].max_split_k)
            spec = attrs.evolve(spec, split_k=chosen or 1)
        if spec in seen:
            continue
        seen.add(spec)
        verdict = pm.hook.convwgrad_support(problem=problem, spec=spec, target=target)
        if verdict is None:
            verdict = Verdict.refuse(f"no plugin judges family {spec.family!r}")
        judged.append((spec, verdict))
    return judged


def plan_spec(problem: ConvProblem, spec: KernelSpec, target: TargetInfo, rule: str) -> Plan:
    """The plan that runs ``spec`` as given (already judged admissible)."""
    pm = get_plugin_manager()
    grid = pm.hook.convwgrad_grid(problem=problem, spec=spec, target=target)
    nbytes = pm.hook.convwgrad_workspace_nbytes(problem=problem, spec=spec)
    return Plan(
        problem=problem,
        target=target,
        spec=spec,
        grid=tuple(grid or ()),
        workspace_nbytes=int(nbytes or 0),
        rule=rule,
    )


def _choose(problem, target, judged) -> Choice | None:
    pm = get_plugin_manager()
    return pm.hook.convwgrad_select(
        problem=problem, target=target, candidates=judged, families=families(pm)
    )


def plan(problem: ConvProblem, target=None, **pins) -> Plan:
    """Choose the kernel for ``problem`` on ``target`` (a profile name, device, or None).

    Pins (``family=``, ``split_k=``, ``group_merge=``, ``tile=``) force a
    choice; a pin no family admits raises :class:`NoCandidateError`
    (a ``ValueError``) carrying every refusal reason.
    """
    target = resolve_target(target)
    pm = get_plugin_manager()
    tuned = None if pins else pm.hook.convwgrad_tuned_spec(problem=problem, target=target)
    key = (*_cache_key(pm, problem, target, pins), tuned)
    cache = _plans.setdefault(pm, {})
    cached = cache.get(key)
    if cached is not None:
        return cached
    chosen = None if tuned is None else _tuned(pm, problem, target, tuned)
    if chosen is None:
        judged = candidates(problem, target, **pins)
        choice = _choose(problem, target, judged)
        if choice is None:
            raise NoCandidateError.build(problem, target, judged, pins)
        chosen = plan_spec(problem, choice.spec, target, choice.rule)
    if len(cache) >= PLAN_CACHE_SIZE:
        cache.clear()
    cache[key] = chosen
    return chosen


def _tuned(pm, problem, target, spec) -> Plan | None:
    verdict = pm.hook.convwgrad_support(problem=problem, spec=spec, target=target)
    if verdict is None:
        verdict = Verdict.refuse(f"no plugin judges family {spec.family!r}")
    if not verdict:
        warn_at_caller(f"tuning cache entry {spec.kernel_name()} for {problem.describe()} is refused now "
                       f"({verdict}); using the policy")
        return None
    return plan_spec(problem, spec, target, f"tuned: measured best on {target.name} (tuning cache)")


def clear_plan_cache() -> None:
    """Forget every cached plan (a tuning cache that reloads calls this), and every call the
    dispatcher prepared from one."""
    global _epoch
    _plans.clear()
    _epoch += 1


def planning_epoch() -> int:
    """How many times the plan cache was cleared: what the dispatcher's prepared calls check."""
    return _epoch


_epoch = 0
#: Environment variables a selector reads while planning (the built-in tuning cache's file).
#: plan() asks its hooks every call; the dispatcher's prepared calls skip plan(), so they
#: watch these (and :func:`planning_epoch`) instead. A tuning file rewritten in place under the
#: same name is seen by plan() at once and by prepared calls after :func:`clear_plan_cache`.
PLANNING_ENVIRONMENT = ("CONVWGRAD_TUNING_CACHE",)


#: Plans kept per plugin manager. A training step plans each layer every call, so a
#: repeat must cost a dict lookup (about a microsecond), not the ~0.5 ms of planning.
PLAN_CACHE_SIZE = 4096
_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cache_key(pm, problem, target, pins) -> tuple:
    plugins = frozenset(id(plugin) for plugin in pm.get_plugins())
    # Families read torch's TF32 switch when they build candidates, so it is part of the key.
    return problem, target, tuple(sorted(pins.items())), cudnn_conv_allows_tf32(), plugins


@attrs.frozen
class Explanation:
    problem: ConvProblem
    target: TargetInfo
    candidates: list
    plan: Plan | None
    error: str | None = None

    def __str__(self) -> str:
        lines = [f"problem: {self.problem.describe()}", f"target:  {self.target}"]
        lines.append(
            f"gemm:    M={self.problem.gemm_m} N={self.problem.gemm_n} K={self.problem.gemm_k} "
            f"x {self.problem.groups} groups"
        )
        lines.append("candidates (by family priority):")
        for spec, verdict in self.candidates:
            mark = "*" if self.plan is not None and spec == self.plan.spec else " "
            lines.append(f" {mark} {spec.kernel_name()}: {verdict}")
        if self.plan is not None:
            p = self.plan
            lines.append(
                f"choice:  {p.kernel_name} (family {p.family}, gm {p.group_merge}, spk {p.split_k}, "
                f"grid {list(p.grid)}, workspace {p.workspace_nbytes} B)"
            )
            lines.append(f"rule:    {p.rule}")
        else:
            lines.append(f"choice:  none\n{self.error}")
        return "\n".join(lines)


def explain(problem: ConvProblem, target=None, **pins) -> Explanation:
    """Every candidate with its verdict, and the choice plan() makes (a tuning cache's entry
    included); ``print()`` it to read it."""
    target = resolve_target(target)
    judged = candidates(problem, target, **pins)
    choice = _choose(problem, target, judged)
    rank = {name: i for i, name in enumerate(families().names())}
    judged = sorted(judged, key=lambda c: rank.get(c[0].family, len(rank)))  # stable: family order kept
    pm = get_plugin_manager()
    tuned = None if pins else pm.hook.convwgrad_tuned_spec(problem=problem, target=target)
    chosen = None if tuned is None else _tuned(pm, problem, target, tuned)
    if chosen is not None:  # what plan() returns: the tuning cache's entry, still admitted
        return Explanation(problem, target, judged, chosen)
    if choice is None:
        return Explanation(problem, target, judged, None, str(NoCandidateError.build(problem, target, judged, pins)))
    return Explanation(problem, target, judged, plan_spec(problem, choice.spec, target, choice.rule))
