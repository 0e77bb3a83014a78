"""The split-K policy: fill one wave of resident programs, groups included, never an empty split.

Order of operations (each a function, tested on its own):
1. ``wanted``: programs for ``TARGET_WAVES`` waves over the base grid (programs at
   split_k = 1, which already counts groups / Gm), so a grouped problem whose tiles
   are few but whose groups are many asks for few splits; while the base grid is
   under one full wave, also enough splits that none reduces more than
   ``MAX_BLOCKS_PER_SPLIT`` block_k steps;
2. ``cap``: clamp to the reduction (at least ``MIN_BLOCKS_PER_SPLIT`` block_k steps a
   split), to the grid-axis limit (split_k multiplies the group axis) and to the
   family's workspace bound;
3. ``on_ladder``: round to the nearest degree of ``SPLIT_LADDER`` within the cap;
4. ``snap``: on targets with several L2 domains (gfx950: 8 XCDs, which take
   workgroups round-robin), round so that base * split_k is a multiple of the domain
   count, within the cap; when the cap is below one full step, keep the legal
   unsnapped degree. A problem with groups <= 1 skips the snap: the plain formula.
"""

from __future__ import annotations

import math

from convwgrad.provider.spec import cdiv as _cdiv

#: Waves of resident programs the split aims for. One wave is compute_units x
#: (max_warps_per_cu / num_warps) programs: 16 four-warp programs per H200 SM, so 3/16 of a
#: wave is 3 a SM. Chosen on the H200 sweep (bf16, 365 layers, 2026-12-02;
#: notes/RESULTS-selectors.md) by scoring each candidate rule on the configs the sweep
#: timed: 1/8 to 1/2 wave x 16 to 128 steps per split x a cap of 16/32; 3/16 of a wave with
#: 32 steps a split (with the merge-degree rule) captured 0.991 of the oracle on the corpus,
#: 0.986 on the random grid. The first policy's full wave, read off 6 demo layers, had
#: captured 0.94 of the best split.
TARGET_WAVES = 3 / 16
#: The degrees the split is rounded to (nearest, in ratio). They are the degrees the H200
#: sweep timed on every shape, so every degree the policy picks there has a measurement
#: behind it; near the optimum the curve is flat (16 vs 32: within 8% on 9 of 10 layers).
SPLIT_LADDER = (1, 4, 16, 32)
#: Each split reduces at least this many block_k steps, so the fp32 workspace
#: round trip stays small next to the split's own loads.
MIN_BLOCKS_PER_SPLIT = 4
#: While the base grid is under one wave, no split reduces more than this many block_k
#: steps: long serial reductions on few programs were the slow side of the same fit.
MAX_BLOCKS_PER_SPLIT = 32


def wave_programs(spec, target) -> int:
    """Programs one wave holds: every compute unit full of this spec's programs."""
    per_cu = max(1, target.max_warps_per_cu // spec.tile.num_warps)
    return target.compute_units * per_cu


def wanted(spec, target, base_programs: int, k_steps: int = 1) -> int:
    wave = wave_programs(spec, target)
    split = max(1, math.ceil(TARGET_WAVES * wave / max(1, base_programs)))
    if base_programs < wave:
        split = max(split, _cdiv(k_steps, MAX_BLOCKS_PER_SPLIT))
    return split


def cap(problem, spec, target, max_split_k: int | None = None) -> int:
    """The largest legal degree: K steps, grid-axis limit, the family's own bound."""
    k_steps = _cdiv(problem.gemm_k, spec.tile.block_k)
    group_programs = max(1, problem.groups // max(1, spec.group_merge))  # the axis split_k multiplies
    limit = min(max(1, k_steps // MIN_BLOCKS_PER_SPLIT), target.max_grid[0] // group_programs)
    return max(1, limit if max_split_k is None else min(limit, max_split_k))


def on_ladder(split_k: int, limit: int) -> int:
    """The ``SPLIT_LADDER`` degree nearest ``split_k`` (by ratio) that ``limit`` allows."""
    allowed = [step for step in SPLIT_LADDER if step <= limit] or [1]
    return min(allowed, key=lambda step: abs(math.log(step / split_k)))


def snap(split_k: int, base_programs: int, domains: int, limit: int) -> int:
    """Round ``split_k`` so base_programs * split_k divides evenly over ``domains`` L2 domains,
    staying within ``limit``; the unsnapped degree when no multiple fits."""
    if domains <= 1:
        return split_k
    step = domains // math.gcd(max(1, base_programs), domains)  # degrees that balance are multiples of step
    if step == 1 or limit < step:
        return split_k
    up = _cdiv(split_k, step) * step
    if up <= limit:
        return up
    return (limit // step) * step


def choose_split_k(problem, spec, target, base_programs: int, max_split_k: int | None = None) -> int:
    """split_k for a tiled spec on ``target``; ``base_programs`` is its grid at split_k = 1,
    ``max_split_k`` the family's bound."""
    if spec.tile is None:
        return 1
    limit = cap(problem, spec, target, max_split_k)
    k_steps = _cdiv(problem.gemm_k, spec.tile.block_k)
    split = on_ladder(min(wanted(spec, target, base_programs, k_steps), limit), limit)
    if problem.groups <= 1:
        return split
    return snap(split, base_programs, target.l2_domains, limit)
