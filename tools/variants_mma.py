"""Plan pins of the shifted-MMA family for ``tools/family_bench.py --variants``: its planned split degree,
about half and twice that (the 1-D sequence kernels' split policy was chosen before measuring), and the
Triton shifted family as the other large-filter candidate."""

from __future__ import annotations

import convwgrad

FAMILY = "wgrad_shifted_mma"


def variants(problem):
    try:
        planned = convwgrad.plan(problem, family=FAMILY).split_k
    except ValueError:
        return [("shifted_mma", {"family": FAMILY})]   # refused: family_bench prints the reason
    splits = sorted({planned, max(2, planned // 2), min(1024, 2 * planned)})
    pins = [(f"shifted_mma spk{s}{' (planned)' if s == planned else ''}", {"family": FAMILY, "split_k": s})
            for s in splits]
    return [*pins, ("shifted (Triton)", {"family": "wgrad_shifted"})]
