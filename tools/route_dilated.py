"""An experiment's selector plugin: dilated 2-D depthwise layers go to the shifted family.

The built-in router keeps them with cuDNN (selectors/routing.py): the merged family lost in a
host-bound eager UniRepLKNet-T step at batch 32, and the shifted family was never measured on
them in a model. It was measured on one alone (H200, bf16 channels_last, N=32, 28x28, C=160, 7x7
dilation 2, graph replay, notes/data/shifted_h200_2026-12-03s3.txt): shifted 73 us, merged 146,
cuDNN 426. UniRepLKNet-T's dilated branches are ~8 ms of its 18.6 ms of grouped dW a step at
batch 32. With this plugin registered, a model run shows what routing them gives, batch by batch:

    python tools/step_bench.py --same-model --with-control --models unireplknet_t:128 \\
        --plugin tools/route_dilated.py:plugin

Not a routing rule: no batch or size threshold, no aten fallback; what the measurement says
decides whether one goes into selectors/routing.py. (It did: session 5 measured 1.30x at N=128 and
0.98x at N=32 with this plugin; the built-in rule now routes the 7x7 dilation-2 branches of
>= 2.5e8 multiply-adds to shifted, 1.21x at N=128.)

``merged_small_dilated`` is the next experiment: on top of the built-in router, dilated 2-D
depthwise filters below 49 taps (UniRepLKNet's 3x3 dilation-3..5 branches) with at least
MERGED_FROM_MACS multiply-adds go to the merged family, measured 3.8-5.5x cuDNN on them alone:

    python tools/step_bench.py --same-model --with-control --models unireplknet_t:32,unireplknet_t:128 \
        --layouts channels_last --plugin tools/route_dilated.py:merged_small_dilated
"""

import math

from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.registry import Choice

FAMILY = "wgrad_shifted"
#: UniRepLKNet-T's 3x3 dilated branches: 1.4e8 / 7.2e7 / 3.6e7 multiply-adds at N=128 (stages 2-4),
#: 3.6e7 and less at N=32, whose host-bound step lost with dilated branches routed: this bound
#: takes stages 2 and 3 at N=128 (36 layers) and nothing at N=32.
MERGED_FROM_MACS = 50_000_000
#: the filter size from which the built-in rule gives dilated layers to the shifted family
SHIFTED_DILATED_TAPS = 49


class RouteDilatedToShifted:
    @hookimpl(tryfirst=True)
    def convwgrad_select(self, problem, target, candidates, families):
        dilated = any(d > 1 for d in problem.dilation)
        if target.backend != "cuda" or problem.spatial_dims != 2 or not dilated or problem.cpg != 1:
            return None
        spec = next((s for s, verdict in candidates if verdict and s.family == FAMILY), None)
        if spec is None:
            return None
        return Choice(spec=spec, rule=f"experiment (tools/route_dilated.py): dilated 2-D depthwise to {FAMILY}; "
                                      "first admitted candidate")


plugin = RouteDilatedToShifted()


class RouteSmallDilatedToMerged:
    @hookimpl(tryfirst=True)
    def convwgrad_select(self, problem, target, candidates, families):
        dilated = any(d > 1 for d in problem.dilation)
        if (target.backend != "cuda" or problem.spatial_dims != 2 or not dilated or problem.cpg != 1
                or math.prod(problem.filter_size) >= SHIFTED_DILATED_TAPS or problem.flops // 2 < MERGED_FROM_MACS):
            return None
        spec = next((s for s, verdict in candidates if verdict and s.family == "wgrad_merged"), None)
        if spec is None:
            return None
        return Choice(spec=spec, rule="experiment (tools/route_dilated.py:merged_small_dilated): dilated 2-D "
                                      f"depthwise below {SHIFTED_DILATED_TAPS} taps, >= {MERGED_FROM_MACS:.1e} "
                                      "multiply-adds, to wgrad_merged; first admitted candidate")


merged_small_dilated = RouteSmallDilatedToMerged()
