"""Plan pins of the shifted-view family to sweep on a GPU, for ``tools/family_bench.py --variants``.

``variants(problem)`` returns at most 8 labelled pins for one layer, the set thought to hold the
winner (none of these numbers is measured yet; issue 11):

- channels_last with C % 8 == 0: the channel-block kernel (group_merge = 8, 16-byte loads) at
  its two tiles (block_k 16 at 4 warps, 32 at 8 warps), two split degrees each, block_k 16 at
  num_stages 1 (255 registers at 3 stages); plus the one-channel kernel (element-wide loads) as
  a control;
- NCHW (or C % 8 != 0): the one-channel kernel at the unfolded tile and the M = 64 folded tile
  (wgmma on sm_90), block_k 64, two split degrees each, and num_stages 1 (fewer registers).

- the outer-product kernel (pin only: a tile with block_n >= 128), after those, at most
  ``OUTER_VARIANTS``: 16 output columns x 2 ky a program with 64 (n, oh) rows a step, and 32
  output columns x 1 ky with 32 rows (both mma.sync on sm_90; 16-byte loads in NCHW when W and OW
  are multiples of 8), each at the selector's split degree (branch shifted-v2, issue 11).

Split degrees: the selector's own (``plan()`` without a split pin) and about twice / half of it,
so the sweep brackets the policy's choice.
"""

from __future__ import annotations

import attrs

import convwgrad
from convwgrad.plugins import wgrad_shifted
from convwgrad.provider import Tile
from convwgrad.provider.target import resolve_target

FAMILY = "wgrad_shifted"
MAX_VARIANTS = 8  # of the shifted kernels; the outer kernel's come after them
#: (block_ow, block_k, ky_chunk) of the outer-product kernel's pins. Not yet measured.
OUTER_SHAPES = ((16, 64, 2), (32, 32, 1))
OUTER_VARIANTS = len(OUTER_SHAPES)  # MAX_VARIANTS + OUTER_VARIANTS <= 10 a layer


def _label(tile: Tile, group_merge: int, split_k: int) -> str:
    cb = f" cb{group_merge}" if group_merge > 1 else ""
    kind = "outer" if tile.block_n >= wgrad_shifted.launcher.OUTER_MIN_BLOCK_N else "shifted"
    return f"{kind} {tile.name}{cb} s{split_k}"


def _planned_split_unchecked(problem, target, tile: Tile) -> int:
    """The split degree the selector proposes for ``tile`` (before the family's gate judges it)."""
    from convwgrad.provider.plan import candidates

    for spec, _verdict in candidates(problem, target, family=FAMILY, tile=tile, group_merge=1):
        return spec.split_k
    return 1


def outer_variants(problem, target="sm_90") -> list[tuple[str, dict]]:
    """The outer-product kernel's pins (one channel a program, group_merge 1), the selector's split."""
    out = []
    for block_ow, block_k, ky_chunk in OUTER_SHAPES:
        tile = wgrad_shifted.outer_tile(problem, block_ow, block_k, ky_chunk)
        try:
            # the selector sizes splits by programs, not by the outer kernel's (n, oh) steps: clamp
            spec = convwgrad.plan(problem, target, family=FAMILY, tile=tile, group_merge=1, split_k=1).spec
            steps = wgrad_shifted.launcher.outer_geometry(problem, spec).steps
            split_k = max(1, min(_planned_split_unchecked(problem, target, tile), steps))
            pins = {"family": FAMILY, "tile": tile, "group_merge": 1, "split_k": split_k}
            convwgrad.plan(problem, target, **pins)
        except ValueError:  # refused (e.g. a filter too wide for the tile): the others stand
            continue
        if all(p["tile"] != tile for _, p in out):
            out.append((_label(tile, 1, split_k), pins))
    return out[:OUTER_VARIANTS]


def _planned_split(problem, target, tile: Tile, group_merge: int) -> int:
    return convwgrad.plan(problem, target, family=FAMILY, tile=tile, group_merge=group_merge).split_k


def variants(problem, target="sm_90") -> list[tuple[str, dict]]:
    """Labelled ``plan()`` pins, e.g. ``("shifted m32n32k16w4s3 cb8 s16", {"family": ..., "tile": ...,
    "group_merge": 8, "split_k": 16})``; only pins plan() admits for ``problem`` on ``target``."""
    specs = wgrad_shifted.candidate_specs(problem, resolve_target(target))
    blocked = [s for s in specs if s.group_merge > 1]
    single = [s for s in specs if s.group_merge == 1 and s.tile.block_k == wgrad_shifted.BLOCK_K_CHOICES[0]]
    chosen = []
    if blocked:
        chosen += [(s.tile, s.group_merge, factor) for s in blocked for factor in (1, 2)]
        # block_k 16 at 4 warps took 255 registers on sm_90 at num_stages 3: the 1-stage control
        chosen += [(attrs.evolve(blocked[0].tile, num_stages=1), blocked[0].group_merge, 1)]
        chosen += [(single[0].tile, 1, 1)]
    else:
        chosen += [(s.tile, 1, factor) for s in single for factor in (1, 2, 0.5)]
        chosen += [(attrs.evolve(single[0].tile, num_stages=1), 1, 1)]
    out, seen = [], set()
    for tile, group_merge, factor in chosen:
        base = _planned_split(problem, target, tile, group_merge)
        split_k = max(1, int(base * factor))
        pins = {"family": FAMILY, "tile": tile, "group_merge": group_merge, "split_k": split_k}
        key = (tile, group_merge, split_k)
        if key in seen:
            continue
        try:
            convwgrad.plan(problem, target, **pins)
        except ValueError:  # a degree past the reduction's steps: skip it, the others stand
            continue
        seen.add(key)
        out.append((_label(tile, group_merge, split_k), pins))
    return out[:MAX_VARIANTS] + outer_variants(problem, target)


#: split degrees of the split sweep (``split_variants``): ncu on the 31x31 channels_last layer
#: (2026-12-03, session 3) showed the planned cb8 kernel at 512 programs = 1.94 waves of its 264
#: slots (227 registers: 2 programs an SM), so up to half its time a partial wave; these bracket
#: one, two and three full waves for the layers of the issue.
SPLIT_SWEEP = (4, 8, 12, 16, 24, 33, 48, 66)


def split_variants(problem, target="sm_90") -> list[tuple[str, dict]]:
    """The planned tile of the shifted kernel at every degree of ``SPLIT_SWEEP`` plan() admits."""
    planned = convwgrad.plan(problem, target, family=FAMILY)
    out = []
    for split_k in SPLIT_SWEEP:
        pins = {"family": FAMILY, "tile": planned.spec.tile, "group_merge": planned.spec.group_merge, "split_k": split_k}
        try:
            convwgrad.plan(problem, target, **pins)
        except ValueError:
            continue
        out.append((_label(planned.spec.tile, planned.spec.group_merge, split_k), pins))
    return out


if __name__ == "__main__":  # print the variants of the layers (no GPU needed)
    from convwgrad.provider import ConvProblem

    layers = {
        "replknet 31x31 56 C128": dict(batch=32, groups=128, in_channels=128, input_size=(56, 56), filter_size=31,
                                       padding=15),
        "replknet 27x27 14 C512": dict(batch=16, groups=512, in_channels=512, input_size=(14, 14), filter_size=27,
                                       padding=13),
        "replknet 13x13 7 C1024": dict(batch=32, groups=1024, in_channels=1024, input_size=(7, 7), filter_size=13,
                                       padding=6),
        "1-D L2048 C512 k31": dict(batch=32, groups=512, in_channels=512, input_size=(2048,), filter_size=31,
                                   padding=15),
    }
    for name, layer in layers.items():
        for layout in ("channels_last", "contiguous"):
            print(f"== {name} {layout}")
            for label, pins in variants(ConvProblem.build(**layer, dtype="bf16", layout=layout)):
                print("  ", label)
