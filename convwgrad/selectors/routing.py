"""Routing: the highest-priority admitted family, unless a measured rule says aten is faster.

The aten fallback is taken when nothing else admits the problem, or when a
rule below says torch's own kernel measured faster for that class of problem
on that backend. Every choice carries the rule that fired, for explain().
"""

from __future__ import annotations

from convwgrad.provider.registry import Choice

FALLBACK_FAMILY = "aten"

#: (backend, family) pairs where aten measured faster than the family on every
#: problem class tried, so the family is not chosen by default there (pins still
#: reach it). H200, bf16 channels_last, `convwgrad bench` demo set, 2026-12-02:
#: best split-K config 1.5x (ResNeXt cpg=4) to 19x (MobileNetV2 3x3) slower than
#: cuDNN. Drop an entry once a measurement shows the family winning a class.
ATEN_MEASURED_FASTER = {
    ("cuda", "wgrad_splitk"): "H200 bench, 2026-12-02: split-K 1.5x-19x slower than cuDNN on all 6 demo layers",
}


def select(problem, target, candidates, families) -> Choice | None:
    admitted = [spec for spec, verdict in candidates if verdict]
    if not admitted:
        return None
    order = {name: rank for rank, name in enumerate(families.names())}
    best = min(admitted, key=lambda spec: order.get(spec.family, len(order)))  # stable: first listed wins ties
    fallback = next((spec for spec in admitted if spec.family == FALLBACK_FAMILY), None)
    if best.family == FALLBACK_FAMILY:
        refused = sorted({s.family for s, v in candidates if not v and s.family != FALLBACK_FAMILY})
        why = f"no Triton family admits the problem ({', '.join(refused)} refused)" if refused else "no other family offered a candidate"
        return Choice(spec=best, rule=f"fallback: {why}")
    measured = ATEN_MEASURED_FASTER.get((target.backend, best.family))
    if measured and fallback is not None:
        return Choice(spec=fallback, rule=f"measured: aten is faster than {best.family} on {target.backend} ({measured})")
    return Choice(
        spec=best,
        rule=f"priority: {best.family} is the highest-priority family admitting the problem; first admitted candidate",
    )
