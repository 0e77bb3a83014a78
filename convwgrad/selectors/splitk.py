"""A simple split-K policy: enough workgroups to fill the device, never an empty split."""

from __future__ import annotations

import math

#: Workgroups per compute unit the split aims for. The split-K programs are
#: latency-bound (gathered loads), so several must share each unit: on H200 the
#: bench demo set improved monotonically from 2 up to 16-32 programs per SM
#: (MobileNetV2 3x3: spk2 1374 us, spk8 1056, spk16 917, spk32 894), 2026-12-02.
TARGET_WAVES = 16
#: Each split reduces at least this many block_k steps, so the fp32 workspace
#: round trip stays small next to the split's own loads.
MIN_BLOCKS_PER_SPLIT = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def choose_split_k(problem, spec, target, base_programs: int) -> int:
    """split_k for a tiled spec: fill ``TARGET_WAVES`` programs per compute unit of ``target``.

    ``base_programs`` is the spec's grid at split_k = 1 (groups / Gm times its tiles).
    """
    if spec.tile is None:
        return 1
    wanted = _cdiv(TARGET_WAVES * target.compute_units, base_programs)
    k_steps = _cdiv(problem.gemm_k, spec.tile.block_k)
    group_programs = _cdiv(problem.groups, spec.group_merge)  # the grid axis split_k multiplies
    cap = min(max(1, k_steps // MIN_BLOCKS_PER_SPLIT), target.max_grid[0] // group_programs)
    return max(1, min(wanted, cap))
