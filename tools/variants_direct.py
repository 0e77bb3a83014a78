"""Plan pins of the direct family to time against cuDNN (issue 10), at most 8 a layer.

    python tools/family_bench.py --variants tools/variants_direct.py:variants ...

Two kernels, both selectable by the tile (one device run compares them):
- tile kernel (block_n > 1): [taps, channels, columns] fp32 accumulators, taps padded to a power
  of two; 4 pins: the default tile (32 accumulators a thread), the 64 and 16 a thread tiles, and
  the default at half the split (a smaller workspace);
- sliding kernel (block_n = 1): taps unrolled, each input column loaded and converted once per
  step and filter row; 4 pins over channels a thread (16-byte loads at 8 bf16, 4 at 2) and
  columns a step (reuse grows with block_k: (block_k + k - 1) loads for block_k * k FMAs a row).
Every pin is planned for sm_90 first; one the family refuses is left out (so a 1x1 filter, or
taps past 81, has no sliding pins).
"""

from __future__ import annotations

import math

import attrs

from convwgrad.plugins.wgrad_direct import launcher, tile_for
from convwgrad.provider import PROFILES, Tile
from convwgrad.provider.plan import NoCandidateError, plan
from convwgrad.provider.spec import pow2_at_least

FAMILY = "wgrad_direct"
TARGET = PROFILES["sm_90"]
MAX_VARIANTS = 8
#: Channels a thread in the sliding kernel by filter taps: taps x channels accumulators stay
#: near 64-100 registers (3x3: 8 channels, 16-byte bf16 loads; 7x7: 2, 4-byte loads).
SLIDING_CHANNELS_PER_THREAD = ((9, 8), (25, 4), (49, 2), (81, 1))


def _sliding_cpt(taps: int) -> int:
    return next((cpt for limit, cpt in SLIDING_CHANNELS_PER_THREAD if taps <= limit), 1)


def _label(tile: Tile, split: int) -> str:
    kind = "sliding" if tile.block_n == 1 else f"tile t{tile.block_n}"
    return f"direct {kind} c{tile.block_m} w{tile.block_k} nw{tile.num_warps} s{split}"


def _pin(problem, tile: Tile, split_k: int | None = None):
    pins = {"family": FAMILY, "tile": tile}
    if split_k is not None:
        pins["split_k"] = split_k
    try:
        chosen = plan(problem, TARGET, **pins)
    except NoCandidateError:
        return None
    return _label(tile, chosen.split_k), {**pins, "split_k": chosen.split_k}


def variants(problem) -> list[tuple[str, dict]]:
    out = []
    base = tile_for(problem, TARGET)
    channels = pow2_at_least(problem.out_channels)
    tiles = [base, tile_for(problem, TARGET, acc_per_thread=64)]
    if base.block_k > 1:
        tiles.append(attrs.evolve(base, block_k=base.block_k // 2))
    elif base.block_m > 1:
        tiles.append(attrs.evolve(base, block_m=base.block_m // 2))
    for tile in dict.fromkeys(tiles):
        out.append(_pin(problem, tile))
    default = out[0]
    if default is not None and default[1]["split_k"] > 1:
        out.append(_pin(problem, base, max(1, default[1]["split_k"] // 2)))

    taps = math.prod(problem.filter_size)
    if 1 < taps <= launcher.MAX_SLIDING_TAPS:
        cpt = _sliding_cpt(taps)
        warp = TARGET.warp_size
        sliding = []
        for cpt_, warps, block_w in ((cpt, 1, 4), (cpt, 1, 8), (max(1, cpt // 2), 2, 4), (1, 1, 8)):
            block_c = min(cpt_ * warp * warps, max(channels, warp * warps))
            while taps * block_w > launcher.MAX_SLIDING_PRODUCTS and block_w > 1:
                block_w //= 2
            sliding.append(Tile(block_m=block_c, block_n=1, block_k=block_w, num_warps=warps, num_stages=1))
        for tile in dict.fromkeys(sliding):
            out.append(_pin(problem, tile))
    out = [v for v in out if v is not None]
    labels = dict.fromkeys(label for label, _ in out)
    unique = [next(v for v in out if v[0] == label) for label in labels]
    return unique[:MAX_VARIANTS]


#: Tile-kernel tiles at <= ~64 registers a thread on sm_90 (offline, Triton 3.9: m16n64k1w4 55-56,
#: m16n16k4w4 56; the planned tiles take 104-121 and ncu showed them latency-bound at 25%
#: occupancy, session 4), and one 80-register tile at 8 warps: does occupancy pay for the fewer
#: FMAs a load?
OCCUPANCY_TILES = ((16, 64, 1, 4), (16, 16, 4, 4), (16, 64, 2, 4), (32, 64, 2, 8))


def occupancy_variants(problem) -> list[tuple[str, dict]]:
    """The planned tile beside the low-register ones above (each at the split the planner picks).

        python tools/family_bench.py --variants tools/variants_direct.py:occupancy_variants ...
    """
    out = [_pin(problem, tile_for(problem, TARGET))]
    for m, n, k, w in OCCUPANCY_TILES:
        out.append(_pin(problem, Tile(block_m=m, block_n=n, block_k=k, num_warps=w, num_stages=1)))
    unique = {}
    for label, pins in (v for v in out if v is not None):
        unique.setdefault(label, pins)
    return list(unique.items())[:MAX_VARIANTS]
