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
decides whether one goes into selectors/routing.py.
"""

from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.registry import Choice

FAMILY = "wgrad_shifted"


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
