"""Experiments' selector plugins: each gives one class of layer to one family on CUDA, on top of
the built-in router, so that a model run shows what routing that class would give. Not routing
rules (no aten fallback, thresholds only where said); a measurement decides what goes into
selectors/routing.py. Register one with ``tools/step_bench.py --plugin tools/route_experiments.py:NAME``:

``dilated_to_shifted``: every dilated 2-D depthwise layer to the shifted family. Measured alone
(H200, bf16 channels_last, N=32, 28x28 C160 7x7 d2, graph replay): shifted 73 us, merged 146,
cuDNN 426. In UniRepLKNet-T (session 5): 1.30x over stock at N=128, 0.98x at N=32; the built-in
rule now routes the 7x7 dilation-2 branches of >= 2.5e8 multiply-adds (1.21x at N=128).

    python tools/step_bench.py --same-model --with-control --models unireplknet_t:128 \\
        --plugin tools/route_experiments.py:dilated_to_shifted

``small_dilated_to_merged``: dilated 2-D depthwise filters below the built-in rule's 49 taps
(UniRepLKNet's 3x3 dilation-3..5 branches) with at least MERGED_FROM_MACS multiply-adds to the
merged family, measured 3.8-5.5x cuDNN on them alone:

    python tools/step_bench.py --same-model --with-control --models unireplknet_t:32,unireplknet_t:128 \\
        --layouts channels_last --plugin tools/route_experiments.py:small_dilated_to_merged

``nchw_to_channels_last``: NCHW 2-D depthwise layers to the aten channels_last family (input and
grad_output copied to channels_last, then cuDNN's channels_last dW). For bf16 NCHW depthwise
layers torch runs its own NCHW kernel, not cuDNN (issue 10: a median 33x above the floor, 2.8x
slower than cuDNN channels_last):

    python tools/step_bench.py --same-model --with-control --layouts contiguous \\
        --models convnext_tiny:64 --plugin tools/route_experiments.py:nchw_to_channels_last

``depthwise_to_aten``: every 2-D depthwise layer to torch (cuDNN), the built-in rules off for them:
the arm that tells whether a model's Triton-routed layers win in its eager step (UniRepLKNet-T at
batch 32 ran 0.94-0.96x in sessions 5-6 with 15 layers shifted):

    python tools/step_bench.py --same-model --with-control --layouts channels_last \
        --models unireplknet_t:32 --plugin tools/route_experiments.py:depthwise_to_aten

``small_depthwise_to_staged``: the staged family's class (2-D depthwise up to 9x9, stride 1-2,
undilated, channels_last) to it, for the models whose small filters cuDNN serves today (ConvNeXt-T,
MobileNetV2, EfficientNet-B0 in channels_last); its kernel measured 1.21x / 1.77x cuDNN on two
layers alone (session 7):

    python tools/step_bench.py --same-model --with-control --layouts channels_last \
        --models convnext_tiny:64,mobilenetv2_100:128 --plugin tools/route_experiments.py:small_depthwise_to_staged

``large_depthwise_to_staged``: only the layers where the staged kernel measured faster inside the
models, eager call and graph replay alike (session 8, with the tiled stage 2): 3x3 layers of
>= 3e8 multiply-adds (MobileNetV2 128's 112x112 and 56x56 layers: 1.27-1.55x) and 7x7 layers of
>= 9e8 (ConvNeXt-T 64's 56x56 layers: 1.05-1.15x); smaller ones lose to cuDNN there, or gain less
than the patched layer's host time:

    python tools/step_bench.py --same-model --with-control --layouts channels_last \
        --models convnext_tiny:64,mobilenetv2_100:128 --plugin tools/route_experiments.py:large_depthwise_to_staged

``large_channels_last_to_shifted_mma``: the shifted-MMA family's NCHW class (undilated stride-1 bf16
depthwise filters of >= 13x13 on rows of >= 14 columns) in channels_last, where the kernel reads the
operands in place (session 12: RepLKNet-31B N=16 1.404x stock with its 22 large layers on it). The
built-in rule now takes channels_last from 27x27 only (13x13 measured slower than the shifted family):

    python tools/step_bench.py --same-model --with-control --layouts channels_last \\
        --models replknet31b:16 --plugin tools/route_experiments.py:large_channels_last_to_shifted_mma

``staged_graph_class_eager``: the staged family's graph-only class (bf16 channels_last depthwise 3x3/5x5/7x7,
stride 1-2, >= 3e7 multiply-adds: routing._staged_measured_faster for a graph launch) in eager calls too. Session 9
measured the eager steps losing (0.88-0.98x) at ~100 us of host time an eager call; the native warm path (session
15) brought a patched call's host time to aten's (session 18: conv2d_weight -3.6 us, the op +3.6 us over aten):

    python tools/step_bench.py --same-model --with-control --layouts channels_last \\
        --models mobilenetv2_100:128,efficientnet_b0:128,convnext_tiny:64 \\
        --plugin tools/route_experiments.py:staged_graph_class_eager

(Until session 5 these lived in tools/route_dilated.py, ``plugin`` and ``merged_small_dilated``,
and tools/route_nchw.py, ``plugin``; notes/data logs name them so.)
"""

import math

from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.registry import Choice
from convwgrad.provider.target import PROFILES, launched
from convwgrad.selectors import routing
from convwgrad.selectors.routing import DILATED_SHIFTED_FROM_TAPS, SHIFTED_MMA_FROM_TAPS, SHIFTED_MMA_MIN_OUTPUT_WIDTH

#: UniRepLKNet-T's 3x3 dilated branches: 1.4e8 / 7.2e7 / 3.6e7 multiply-adds at N=128 (stages 2-4),
#: 3.6e7 and less at N=32, whose host-bound step lost with dilated branches routed: this bound
#: takes stages 2 and 3 at N=128 (36 layers) and nothing at N=32.
MERGED_FROM_MACS = 50_000_000


class RouteExperiment:
    """Gives the 2-D depthwise CUDA problems ``applies(problem)`` accepts to ``family``'s first
    admitted candidate; leaves every other problem to the router."""

    def __init__(self, name: str, family: str, what: str, applies):
        self.name, self.family, self.what, self.applies = name, family, what, applies

    @hookimpl(tryfirst=True)
    def convwgrad_select(self, problem, target, candidates, families):
        if target.backend != "cuda" or problem.spatial_dims != 2 or problem.cpg != 1 or not self.applies(problem):
            return None
        spec = next((s for s, verdict in candidates if verdict and s.family == self.family), None)
        if spec is None:
            return None
        return Choice(spec=spec, rule=f"experiment (tools/route_experiments.py:{self.name}): {self.what} to "
                                      f"{self.family}; first admitted candidate")


def _dilated(problem) -> bool:
    return any(d > 1 for d in problem.dilation)


dilated_to_shifted = RouteExperiment("dilated_to_shifted", "wgrad_shifted", "dilated 2-D depthwise", _dilated)
small_dilated_to_merged = RouteExperiment(
    "small_dilated_to_merged", "wgrad_merged",
    f"dilated 2-D depthwise below {DILATED_SHIFTED_FROM_TAPS} taps, >= {MERGED_FROM_MACS:.1e} multiply-adds",
    lambda p: _dilated(p) and math.prod(p.filter_size) < DILATED_SHIFTED_FROM_TAPS
    and p.flops // 2 >= MERGED_FROM_MACS)
nchw_to_channels_last = RouteExperiment("nchw_to_channels_last", "aten_channels_last", "NCHW 2-D depthwise",
                                        lambda p: p.layout == "contiguous")
depthwise_to_aten = RouteExperiment("depthwise_to_aten", "aten", "2-D depthwise", lambda p: True)
small_depthwise_to_staged = RouteExperiment(
    "small_depthwise_to_staged", "wgrad_staged", "2-D depthwise up to 9x9, stride <= 2, undilated, channels_last",
    lambda p: p.layout == "channels_last" and max(p.filter_size) <= 9 and max(p.stride) <= 2
    and all(d == 1 for d in p.dilation))
#: Multiply-adds from which the staged kernel beat cuDNN inside the models, by filter side (session 8)
STAGED_FROM_MACS = {3: 300_000_000, 7: 900_000_000}
large_depthwise_to_staged = RouteExperiment(
    "large_depthwise_to_staged", "wgrad_staged", "3x3 depthwise of >= 3e8 and 7x7 of >= 9e8 multiply-adds",
    lambda p: p.layout == "channels_last" and p.filter_size[0] == p.filter_size[1] in STAGED_FROM_MACS
    and p.flops // 2 >= STAGED_FROM_MACS[p.filter_size[0]] and max(p.stride) <= 2 and all(d == 1 for d in p.dilation))
#: EfficientNet-B0's 5x5 stride-2 layer at 14x14, C672, N=128: cuDNN 778 us, the staged kernel 36 us in the
#: model (session 9, --layers --cold-l2); the same shape at N=32 (MobileNetV3-Large) cuDNN runs in 21 us,
#: EfficientNet-B3's 19x19 C816 at N=32 in 301 us. The one saving in these models larger than any eager
#: call's host time: does an eager step gain from it alone?
cudnn_5x5_s2_to_staged = RouteExperiment(
    "cudnn_5x5_s2_to_staged", "wgrad_staged", "5x5 stride-2 depthwise of >= 640 channels, bf16 channels_last",
    lambda p: p.layout == "channels_last" and p.dtype == "bf16" and p.filter_size == (5, 5) and p.stride == (2, 2)
    and p.in_channels >= 640 and all(d == 1 for d in p.dilation))
large_channels_last_to_shifted_mma = RouteExperiment(
    "large_channels_last_to_shifted_mma", "wgrad_shifted_mma",
    f"bf16 channels_last undilated stride-1 depthwise of >= {SHIFTED_MMA_FROM_TAPS} taps on rows of >= "
    f"{SHIFTED_MMA_MIN_OUTPUT_WIDTH} columns",
    lambda p: p.layout == "channels_last" and p.dtype == "bf16" and math.prod(p.filter_size) >= SHIFTED_MMA_FROM_TAPS
    and p.output_size[1] >= SHIFTED_MMA_MIN_OUTPUT_WIDTH and all(s == 1 for s in p.stride)
    and all(d == 1 for d in p.dilation))
staged_graph_class_eager = RouteExperiment(
    "staged_graph_class_eager", "wgrad_staged",
    "the staged family's graph-launch class in eager calls (3x3-7x7; its 9x9 class is eager's already)",
    lambda p: routing._staged_measured_faster(p, launched(PROFILES["sm_90"], "graph")) is not None)
