"""Routing: the highest-priority family that admits the problem, the aten fallback last."""

from __future__ import annotations

from convwgrad.provider.registry import Choice

FALLBACK_FAMILY = "aten"


def select(problem, target, candidates, families) -> Choice | None:
    admitted = [spec for spec, verdict in candidates if verdict]
    if not admitted:
        return None
    order = {name: rank for rank, name in enumerate(families.names())}
    best = min(admitted, key=lambda spec: order.get(spec.family, len(order)))  # stable: first listed wins ties
    if best.family == FALLBACK_FAMILY:
        refused = sorted({s.family for s, v in candidates if not v and s.family != FALLBACK_FAMILY})
        why = f"no Triton family admits the problem ({', '.join(refused)} refused)" if refused else "no other family offered a candidate"
        return Choice(spec=best, rule=f"fallback: {why}")
    return Choice(
        spec=best,
        rule=f"priority: {best.family} is the highest-priority family admitting the problem; first admitted candidate",
    )
