"""Routing: the highest-priority admitted family, unless a measured rule says aten is faster.

The aten fallback is taken when nothing else admits the problem, or when a
rule below says torch's own kernel measured faster for that class of problem
on that backend. Every choice carries the rule that fired, for explain().
"""

from __future__ import annotations

import math

from convwgrad.provider.registry import Choice

FALLBACK_FAMILY = "aten"

#: Depthwise filters up to this many taps stay with cuDNN on CUDA for 2-D/3-D problems:
#: on H200 (bf16 channels_last, N=32, 35 published layers, 2026-12-02) the best merged
#: config lost to cuDNN on all 29 2-D layers of 3x3 to 7x7 (1.4x-11x slower) and won on
#: all 4 of 13x13 to 31x31 (0.3x-0.4x) and both 1-D layers (k=4: 0.14x, k=31: 0.6x).
#: 9x9 and 11x11 were not measured; they go to the merged family.
CUDNN_WINS_UP_TO_TAPS = 49


def aten_measured_faster(problem, target, family: str) -> str | None:
    """Why aten is faster than ``family`` for ``problem``'s class on ``target``, or None."""
    if target.backend != "cuda":
        return None  # no measurement elsewhere yet
    if family == "wgrad_splitk":
        return "H200, 2026-12-02: split-K 1.5x-19x slower than cuDNN on all 6 bench demo layers"
    if family == "wgrad_merged" and problem.spatial_dims >= 2 and math.prod(problem.filter_size) <= CUDNN_WINS_UP_TO_TAPS:
        return (f"H200, 2026-12-02: merged 1.4x-11x slower than cuDNN on all 29 2-D depthwise layers with "
                f"<= {CUDNN_WINS_UP_TO_TAPS} taps")
    return None


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
    measured = aten_measured_faster(problem, target, best.family)
    if measured and fallback is not None:
        return Choice(spec=fallback, rule=f"measured: aten is faster than {best.family} on {target.backend} ({measured})")
    return Choice(
        spec=best,
        rule=f"priority: {best.family} is the highest-priority family admitting the problem; first admitted candidate",
    )
