"""An experiment's selector plugin: NCHW 2-D depthwise layers go to the aten channels_last family
(input and grad_output copied to channels_last, then cuDNN's channels_last dW).

For bf16 NCHW depthwise layers torch runs its own NCHW kernel, not cuDNN (issue 10: a median 33x
above the floor, 2.8x slower than cuDNN channels_last). With this plugin registered, a model run
shows what the copies buy in a real backward:

    python tools/step_bench.py --same-model --with-control --layouts contiguous \\
        --models convnext_tiny:64 --plugin tools/route_nchw.py:plugin

Not a routing rule: every NCHW depthwise layer, no size threshold; the measurement decides what
goes into selectors/routing.py.
"""

from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.registry import Choice

FAMILY = "aten_channels_last"


class RouteNchwDepthwiseToChannelsLast:
    @hookimpl(tryfirst=True)
    def convwgrad_select(self, problem, target, candidates, families):
        if (target.backend != "cuda" or problem.spatial_dims != 2 or problem.layout != "contiguous"
                or problem.cpg != 1):
            return None
        spec = next((s for s, verdict in candidates if verdict and s.family == FAMILY), None)
        if spec is None:
            return None
        return Choice(spec=spec, rule=f"experiment (tools/route_nchw.py): NCHW 2-D depthwise to {FAMILY}; "
                                      "first admitted candidate")


plugin = RouteNchwDepthwiseToChannelsLast()
