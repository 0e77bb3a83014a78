"""Routing: the highest-priority admitted family, unless a measured rule says aten is faster.

The aten fallback is taken when nothing else admits the problem, or when a
rule below says torch's own kernel measured faster for that class of problem
on that backend. Every choice carries the rule that fired, for explain().
"""

from __future__ import annotations

import math

from convwgrad.provider.registry import Choice

FALLBACK_FAMILY = "aten"

#: Undilated 2-D/3-D depthwise filters up to this many taps stay with cuDNN on CUDA.
#: H200 sweep (bf16 channels_last, N = 32, CUDA-graph timing, 2026-12-02,
#: notes/RESULTS-selectors.md, corpus + 50 random shapes): cuDNN beat the best merged config
#: on 202 of the 204 layers of that class with C % 16 == 0 (the two losses: ShuffleNetV2 96ch
#: 14x14 at 1.01x and EfficientNet-B3 816ch 19x19 5x5 s2, a cuDNN pathology no simple rule
#: predicts), while merged won all 110 other layers with C % 16 == 0: larger filters,
#: 1-D, dilated.
CUDNN_WINS_UP_TO_TAPS = 49
#: Merged loads are Gm-channel vectors only when Triton can prove the channel stride (C in
#: channels_last) a multiple of 16 elements; otherwise they stay element-wide. Every
#: one of the 51 swept layers with C % 16 != 0 ran faster in cuDNN than in any merged config.
VECTOR_CHANNEL_MULTIPLE = 16
#: Families the priority rule passes over: the router gives them a problem only in a class where
#: they were measured faster (:func:`opt_in_measured_faster`); elsewhere they run when pinned
#: (``plan(problem, family=...)``, ``convwgrad bench``) and are swept. Without this they would take
#: problems the others refuse (e.g. an odd channel count) from aten untimed. H200, 2026-12-03: the
#: shifted family (issue 11) was measured faster on large 2-D filters; the direct family (issue 10)
#: slower than cuDNN on every 2-D layer measured (0.3-0.6x), its class 1-D channels_last k=4 with channel counts merged
#: does not vectorise (:data:`DIRECT_1D_TAPS`, session 19); the aten channels_last
#: family (NCHW operands copied for cuDNN's channels_last kernels) faster than torch's NCHW path on
#: NCHW 5x5 and 7x7 layers (session 6, :data:`RELAYOUT_TAPS`); the staged family (issue 10) faster
#: than cuDNN in kernel time on most small depthwise layers inside models, but each eager call's host
#: time outweighs that in the host-bound eager steps measured, so its class is graph launches only
#: (:data:`STAGED_GRAPH_TAPS`), but for 9x9, where it replaces the shifted families (:data:`STAGED_LARGE_TAPS`).
OPT_IN_FAMILIES = (
    "wgrad_shifted", "wgrad_shifted_mma", "wgrad_short1d", "wgrad_direct", "wgrad_staged", "aten_channels_last",
)
#: Where the classes of several opt-in families hold a problem, the lowest number here wins (the rest: 1, then
#: the families' priority order). The staged family's 9x9 class (STAGED_LARGE_TAPS) lies inside the shifted
#: and shifted-MMA families' and was measured faster than both there.
OPT_IN_PRECEDENCE = {"wgrad_staged": 0}
#: Fewest filter taps for which the shifted family was measured faster than merged and cuDNN.
#: H200, bf16, tools/family_bench.py, 2026-12-03 (notes/PERF.md): 13x13 at 7x7 C1024 N=16
#: (21 us; merged 87, cuDNN 350), 27x27 at 14x14 C512 N=16 (89; 571, 1806), 31x31 at 56x56 C128
#: N=16 channels_last (455; 3143, 8085) and NCHW (459; 5523, 8230); the 1-D k=31 layer went the
#: other way (shifted 615 us, merged 377), and no filter between 7x7 and 13x13 was measured.
SHIFTED_FROM_TAPS = 13 * 13
#: bf16 channels_last: fewest taps for the shifted family, fitted on the 50 in-sample random shapes swept on an
#: H100 (notes/sweep/insample_h100.csv, session 18; isolated calls, every family's first tile at splits 1-32):
#: on every 2-D stride-1/2 depthwise layer of 9x9-11x11 there it beat merged (the router's choice before) and
#: cuDNN: 11x11 14x14 C1536 193 us (merged 592, cuDNN 1836), 11x11 28x28 C192 115 (318, 974), 11x11 s2 14x14
#: C640 44 (82, 602), 11x11 s2 112x112 C672 N=16 1095 (2770, 63033), 9x9 s2 7x7 C640 22 (27, 101), 9x9 112x112
#: C288 1872 (3838, 318202; the staged family's 889 was faster there, and is not routed above 7x7). Scored on
#: the 50 held-out shapes never used to fit it (notes/PERF.md "Session 18").
SHIFTED_CHANNELS_LAST_FROM_TAPS = 9 * 9
#: bf16 channels_last with a channel count its 8-channel blocks do not divide (element loads, one channel a
#: program): fewest taps for the shifted family. Fitted on the fitting set (notes/sweep/fit_h100.csv, H100,
#: isolated calls, session 19; the first 50 random shapes hold no odd channel count above 7x7): it beat cuDNN on
#: every such layer there, 9x9 s2 14x14 C325 3.9x, 31x31 7x7 C565 15x, 31x31 s2 56x56 C657 11.9x, and 9x9 56x56
#: C137 4.7x (the shifted-MMA family, 27x, takes that one: rows >= 14, stride 1).
SHIFTED_ODD_CHANNELS_FROM_TAPS = 9 * 9
#: The Triton shifted family's channel block in channels_last (plugins/wgrad_shifted CHANNEL_BLOCK; the selector
#: imports no plugin): a channel count it does not divide is loaded element-wide, one channel a program.
SHIFTED_CHANNEL_BLOCK = 8
#: Fewest filter taps, and narrowest output rows, for which the shifted-MMA family (issue 11) was
#: measured faster than the Triton shifted family, merged and cuDNN. H200, bf16, NCHW-contiguous,
#: graph replay, same process (tools/proto_shifted_mma.py --bench, notes/PERF.md "Session 11"):
#: RepLKNet-31B N=32 31x31 56x56 C128 117 us (shifted 984, cuDNN 16316), 29x29 28x28 C256 86 (486,
#: 7642), 27x27 14x14 C512 70 (274, 4517); SLaK 31x31 56x56 C96 N=16 49 (359, 6179); UniRepLKNet
#: 13x13 14x14 C320 N=32 46 (80, 673). It lost on the 7x7 plane (13x13 C1024: 74 us, shifted 61):
#: one 16-column block with 7 columns used, so rows narrower than 14 stay with the shifted family.
SHIFTED_MMA_FROM_TAPS = 13 * 13
SHIFTED_MMA_MIN_OUTPUT_WIDTH = 14
#: channels_last (the kernel reads the operands in place, session 12; 4 adjacent channels a vector load
#: where the strides allow, session 13: 153.6 us on the 31x31 layer below, 90.5 on the 29x29, 66.2 on the
#: 27x27, 66.8 on SLaK's): fewest taps measured faster there. Session 13 also measured UniRepLKNet's 13x13
#: 14x14 C320 N=32 layer at 36.8 us against the shifted family's 49.5, and 28x28 C160 N=4 at 19.3 against
#: 18.8: one win and one tie, so the class was not moved down before a model's steps say so.
#: H100, bf16, graph replay, same process (tools/proto_shifted_mma.py --layouts channels_last contiguous,
#: notes/PERF.md "Session 12"): RepLKNet-31B N=32 31x31 56x56 200 us (Triton shifted 883, cuDNN CL 15966),
#: 29x29 28x28 134 (407, 7079), 27x27 14x14 100 (181, 3338); SLaK 31x31 N=16 72 (391, 6512). It lost on
#: UniRepLKNet's 13x13 layers (14x14 C320 N=32: 59 us, shifted 50; 28x28 C160 N=4: 21, 19): a channels_last
#: row load touches a sector a lane, and 13x13 taps leave too little MMA work to hide it. Between 13x13 and
#: 27x27 nothing was measured, so channels_last starts at the smallest filter it won.
#: Session 18 moved it down to 11x11, fitted on the in-sample random shapes (H100, isolated calls,
#: notes/sweep/insample_h100.csv): 11x11 14x14 C1536 N=32 173 us (Triton shifted 193, merged 592, cuDNN 1836),
#: 11x11 28x28 C192 71 (115, 318, 974), 13x13 56x56 C48 66 (108, 414, 1275), 13x13 56x56 C32 62 (98, 306,
#: 886): the family was fastest on every such layer it admits, rows >= 14. It was not timed on 9x9 there.
#: Session 19 moved it to 9x9, fitted on the in-sample random shapes and the fitting set
#: (notes/sweep/{insample,fit}_h100.csv, H100, isolated calls): 9x9 56x56 C137 N=32 143 us (Triton shifted 827,
#: cuDNN 3892), 9x9 28x28 C240 78 (107, 869; the staged family's 67 was faster there, and takes such layers
#: first: STAGED_LARGE_TAPS).
SHIFTED_MMA_CHANNELS_LAST_FROM_TAPS = 9 * 9
#: channels_last output rows narrower than SHIFTED_MMA_MIN_OUTPUT_WIDTH (one 16-column MMA block a row, partly
#: empty). Fitted on the narrow-plane fitting set (shapes/depthwise_fit_narrow.csv: 9x9-31x31 on planes of 7, 10
#: and 13, half of them with C not a multiple of 8; notes/sweep/fit_narrow_h100.csv, H100, isolated calls, graph
#: replay, session 21) with the in-sample and fitting shapes' 7x7 planes:
#: - C not a multiple of 8 (the Triton shifted family loads element-wide, one channel a program): shifted-MMA
#:   fastest on 12 of 13 such layers from 9x9 on planes of 7-13, 1.04-2.8x the Triton shifted family (31x31 13x13
#:   C947 2.8x, 7x7 C565 1.4x); the loss, 11x11 13x13 C25, 0.85x.
#: - C a multiple of 8: the Triton shifted family wins every 7x7 plane (1.01-1.63x, 9 layers) and 9x9 on any
#:   plane; shifted-MMA wins 11x11 and 13x13 on a 13-column plane (1.14x, 1.06x) and 31x31 on 10- and 13-column
#:   ones (1.56x, 1.23x). 13x13 on a 10-column plane (0.95x) and 11x11 on one (0.99x) stay with the shifted family.
SHIFTED_MMA_NARROW_ODD_CHANNELS_FROM_WIDTH = 7
#: (narrowest output row, fewest taps) pairs of that class for channel counts the shifted family vectorises.
SHIFTED_MMA_NARROW_ROWS = ((13, 11 * 11), (10, 31 * 31))
SHIFTED_MMA_NARROW_ROWS_MEASUREMENT = (
    "H100, 2026-12-07: bf16 channels_last undilated depthwise filters on output rows narrower than "
    f"{SHIFTED_MMA_MIN_OUTPUT_WIDTH} (from {SHIFTED_MMA_NARROW_ODD_CHANNELS_FROM_WIDTH} columns with C not a "
    "multiple of 8, "
    "from 13 columns at 11x11 and 10 at 31x31 otherwise): 1.04-2.8x the Triton shifted family on 16 of 17 such "
    "layers of the narrow-plane fitting set")
#: The layouts the class was measured faster in: (fewest taps, the measurement explain() prints).
SHIFTED_MMA_MEASURED = {
    "contiguous": (SHIFTED_MMA_FROM_TAPS,
                   f"H200, 2026-12-04: bf16 NCHW undilated depthwise filters of >= {SHIFTED_MMA_FROM_TAPS} taps on "
                   f"rows of >= {SHIFTED_MMA_MIN_OUTPUT_WIDTH} columns, 1.7-8.4x the Triton shifted family and "
                   f"14-139x cuDNN on RepLKNet-31B's 27x27-31x31, SLaK's 31x31 and UniRepLKNet's 13x13 layers"),
    "channels_last": (SHIFTED_MMA_CHANNELS_LAST_FROM_TAPS,
                      f"H100, 2026-12-06: bf16 channels_last undilated depthwise filters of >= "
                      f"{SHIFTED_MMA_CHANNELS_LAST_FROM_TAPS} taps on rows of >= {SHIFTED_MMA_MIN_OUTPUT_WIDTH} "
                      f"columns, read in place (4 channels a vector load where the strides allow): 2.9-5.9x the "
                      f"Triton shifted family and 50-104x cuDNN on RepLKNet-31B's 27x27-31x31 and SLaK's 31x31 "
                      f"layers; RepLKNet-31B N=16 step 1.40x stock (A/A 0.99x, 2026-12-05); H100, 2026-12-07: "
                      f"1.1-1.6x the Triton shifted family and 3-11x merged on the 11x11-13x13 in-sample random "
                      f"shapes; H100, 2026-12-07: 1.4-5.8x the Triton shifted family on 9x9 in-sample and fitting "
                      f"shapes"),
}
#: Dilated 2-D depthwise filters of at least this many taps go to the shifted family from
#: DILATED_SHIFTED_FROM_MACS on (below, cuDNN). H200, bf16 channels_last, graph replay
#: (tools/family_bench.py, notes/data/dilated_h200_2026-12-03s5.txt): UniRepLKNet-T's 7x7
#: dilation-2 branch 5.4-6.2x cuDNN and 1.9-2.0x merged (28x28 C160 N=128: 272 us, merged 511,
#: cuDNN 1479; 14x14 C320 N=32: 36, 70, 226). On its 3x3 dilation-3..5 branches merged was the
#: faster family (1.2-1.5x shifted), and they stay with cuDNN: merged is not given dilated layers
#: (aten_measured_faster). Measured in bf16 only, so only bf16 is routed.
DILATED_SHIFTED_FROM_TAPS = 7 * 7
#: Fewest multiply-adds for which a dilated layer leaves cuDNN. Every dilated branch is 3-6x
#: faster alone in a Triton family, but what a model step gains depends on whether its host keeps
#: up: UniRepLKNet-T channels_last (tools/step_bench.py --same-model, H200, 2026-12-03,
#: notes/PERF.md "Session 5") with all 60 dilated branches given to shifted went 1.15x -> 1.30x
#: over stock at N=128 (GPU-bound: 228 ms a step) and 1.07x -> 0.98x at N=32 (host-bound: a
#: patched layer's extra host time is step time there). The 7x7 d2 branches span 4.9e7-2.0e8 MACs
#: at N=32 and 2.0e8-7.9e8 at N=128; this bound routes N=128's 28x28 and 14x14 ones and none at N=32.
DILATED_SHIFTED_FROM_MACS = 250_000_000
#: Dilated 2-D depthwise filters below DILATED_SHIFTED_FROM_TAPS (UniRepLKNet's 3x3 dilation-3..5
#: branches) go to the merged family from this many multiply-adds on, bf16 channels_last. Alone
#: (notes/data/dilated_h200_2026-12-03s5.txt, graph replay) merged ran them 3.8-5.5x cuDNN and
#: 1.2-1.5x shifted (28x28 C160 3x3 d3 N=32: 43 us, shifted 60, cuDNN 204; 14x14 C320 3x3 d4 N=128:
#: 77, 112, 422). In the model (UniRepLKNet-T channels_last, tools/step_bench.py --same-model, H200,
#: session 6, notes/data/step_bench_dilated3_h200_2026-12-03s6.txt, as the experiment
#: tools/route_experiments.py:small_dilated_to_merged): N=128 1.299x over stock (A/A 1.001) against
#: 1.207x without it (session 5); at N=32 the bound routes nothing (its branches are <= 3.6e7). The
#: branches span 3.6e7-1.4e8 at N=128 (stages 2-4); the bound takes stages 2 and 3 there.
DILATED_MERGED_FROM_MACS = 50_000_000
#: Filter taps of the NCHW class given to the aten channels_last family (NCHW operands copied to
#: channels_last, then cuDNN's channels_last dW), undilated, stride 1, bf16, from
#: RELAYOUT_FROM_MACS on. H200, bf16, graph replay beside torch's own NCHW path in one process
#: (tools/family_bench.py, notes/data/relayout_h200_2026-12-03s6.txt): ConvNeXt-T 7x7 layers at
#: N=64 4.3-9.0x (56x56 C96: 301 us against 1311; 7x7 C768: 53 against 477), EfficientNet-B0 5x5
#: at N=128 2.3-2.6x (28x28 C240: 380 against 886). Outside it the copies did not pay: MobileNetV2
#: 3x3 56x56 C144 1.17x, 3x3 stride 2 0.59x, a 1-D k=4 layer 0.16x; the merged family keeps 1-D k=31
#: (2.5x torch, the copies 1.27x). Filters between 7x7 and the shifted family's were not measured.
#: Inside EfficientNet-B0 NCHW at N=128 (tools/step_bench.py --layers, the grad_output autograd hands
#: over; notes/data/step_bench_layers_effb0_nchw_h200_2026-12-03s6.txt) the 7 layers this routes ran
#: 2.33-5.65x faster; the training step did not move (0.996x and 0.998x, A/A 1.006x), which is not
#: explained yet (notes/PERF.md, session 6).
RELAYOUT_TAPS = (5 * 5, 7 * 7)
#: The smallest layer of the class measured (ConvNeXt-T 7x7 C768 at 7x7, N=64: 1.2e8 multiply-adds,
#: 8.96x); below it the two copies' launches and host time are not measured against a smaller saving.
RELAYOUT_FROM_MACS = 100_000_000

#: Square filters the staged family takes where its kernels are launched from CUDA graphs
#: (target.launch == "graph": torch.compile(mode="reduce-overhead"), torch.cuda.graph), bf16
#: channels_last depthwise, undilated, stride 1 or 2. There only kernel time counts. Inside models
#: (tools/step_bench.py --layers: the grad_output autograd hands over, graph replay beside cuDNN in
#: one process, H200, session 8, notes/PERF.md) it was faster on every such layer of MobileNetV2 at
#: N=128 (17 layers, 3x3 s1/s2, 1.2-2.5x; 1.52x over the model's grouped dW) and of EfficientNet-B0
#: at N=128 (16 layers, 3x3/5x5 s1/s2, 1.07-2.02x; 2.30x over the model's dW, a 5x5 s2 14x14 C672
#: layer 765 -> 34 us). Training steps compiled with mode="reduce-overhead" (tools/step_bench.py
#: --compile reduce-overhead, stock and patched alternated, session 9,
#: notes/data/steps_graphroute_*_2026-12-04s9.txt): MobileNetV2 128 1.020x, EfficientNet-B0 128
#: 1.056x and 1.058x (its A/A arm: 1.003x). ConvNeXt-T's 7x7 layers at N=64, timed in the model with
#: L2 flushed before each call (--layers --cold-l2): 56x56 1.39-1.47x, 28x28 1.00-1.08x, 14x14
#: 1.12-1.24x, 7x7 0.75-0.86x (left out below); its compiled step with all 18 routed: 0.987x until
#: the compiled layer's bias add moved out of the op (frameworks/torch_ops.eager_conv), 1.005x after;
#: with this rule (15 routed, its three 7x7-plane layers left to cuDNN) 1.001x: no loss, no gain shown.
#: In eager steps the family lost (0.88-0.98x, host-bound: ~100 us of host time an eager call inside
#: autograd's engine thread), so the eager router gives it none of these (its 9x9 class: STAGED_LARGE_TAPS).
STAGED_GRAPH_TAPS = (3 * 3, 5 * 5, 7 * 7)
#: The smallest layer of the class measured faster (MobileNetV2 N=128, 14x14 -> 7x7 C576 3x3
#: stride 2: 3.3e7 multiply-adds); smaller ones were not measured.
STAGED_GRAPH_FROM_MACS = 30_000_000


#: Square filters the staged family takes for every launch, eager included (same class otherwise: bf16
#: channels_last depthwise, undilated, stride 1-2, output planes larger than the filter, >= STAGED_GRAPH_FROM_MACS):
#: there the router's choice before was the Triton shifted family, whose eager call costs the same host time
#: (a patched layer, two stages), so kernel time decides. Fitted on the in-sample random shapes and the fitting
#: set (notes/sweep/{insample,fit}_h100.csv, H100, isolated calls, session 19): faster than every other family on
#: all five such 9x9 layers, 1.6-2.4x the shifted family (112x112 C288 889 us against 1872; s2 56x56 C288 142
#: against 248; s2 112x112 C256 478 against 951; s2 56x56 C768 265 against 639; 28x28 C240 67 against 107, the
#: shifted-MMA family 78). On the 4x4-plane 9x9 s2 layer it ran 1.9x slower than shifted (the plane bound).
STAGED_LARGE_TAPS = (9 * 9,)
STAGED_LARGE_MEASUREMENT = (
    "H100, 2026-12-07: bf16 channels_last depthwise 9x9 filters of stride 1-2 on output planes larger than the filter: "
    "1.6-2.4x the Triton shifted family and 1.2x the shifted-MMA family on every such in-sample and fitting shape")


def _staged_measured_faster(problem, target) -> str | None:
    if (problem.spatial_dims != 2 or problem.cpg != 1 or problem.kpg != 1 or problem.dtype != "bf16"
            or problem.layout != "channels_last" or any(d != 1 for d in problem.dilation)):
        return None  # measured on bf16 channels_last depthwise layers only
    kh, kw = problem.filter_size
    taps = kh * kw
    if kh != kw or taps not in STAGED_GRAPH_TAPS + STAGED_LARGE_TAPS or problem.stride[0] != problem.stride[1] \
            or problem.stride[0] > 2:
        return None
    if math.prod(problem.output_size) <= taps:
        # a filter as large as the output plane is mostly padding, which the staged rows still load
        # (ConvNeXt-T's 7x7 filters over 7x7 outputs, C768, N=64, ran 0.72-0.82x cuDNN in that run)
        return None
    if problem.flops // 2 < STAGED_GRAPH_FROM_MACS:
        return None
    if taps in STAGED_LARGE_TAPS:
        return STAGED_LARGE_MEASUREMENT
    if target.launch != "graph":
        return None  # eager: the host time of a patched call outweighed the kernel's gain over cuDNN (see above)
    return (f"H200, 2026-12-04: launched from CUDA graphs, bf16 channels_last depthwise 3x3/5x5/7x7 filters of "
            f"stride 1-2, output planes larger than the filter, >= {STAGED_GRAPH_FROM_MACS:.1e} multiply-adds: "
            f"faster than cuDNN in kernel time on every such layer of MobileNetV2 and EfficientNet-B0 (N=128, "
            f"1.06-2.5x) and ConvNeXt-T (N=64, 1.0-1.47x), measured inside the models; reduce-overhead training "
            f"steps 1.020x and 1.056x, ConvNeXt-T 1.001x (no loss, no gain shown)")


#: Below this many useful multiply-adds a layer stays with cuDNN on CUDA whatever the family: what a
#: Triton kernel saves there is less than the host time a patched layer adds. H200, bf16
#: channels_last, UniRepLKNet-T at N=32 (tools/step_bench.py --layers, 2026-12-03): the merged
#: family saved 11-28 us of kernel time on the 3x3 d3-d5 branches at 7x7 (C=640, 9.0e6 MACs) and
#: 71-95 us on those at 14x14 (C=320, 1.8e7 MACs), against ~30-50 us of host time a patched layer
#: costs over the stock one in eager mode (tools/host_overhead.py, stock_layer vs patched_layer);
#: that model's eager step is host-bound (92 ms a step for 66 ms of kernels), so host time is step time.
#: Eager calls only: replayed from a CUDA graph (target.launch == "graph") a layer costs no host time, and the
#: family measured faster in kernel time takes it (rand-083, C32 11x11 on a 7x7 plane: shifted 5.35x cuDNN).
MIN_TRITON_MACS = 12_000_000
#: The families that rule was measured for (another plugin's family is its own author's to route).
SMALL_LAYER_RULE_FAMILIES = ("wgrad_merged", "wgrad_shifted")


def aten_measured_faster(problem, target, family: str) -> str | None:
    """Why aten is faster than ``family`` for ``problem``'s class on ``target``, or None."""
    if target.backend != "cuda":
        return None  # no measurement elsewhere yet
    if family in SMALL_LAYER_RULE_FAMILIES and target.launch != "graph" and problem.flops // 2 < MIN_TRITON_MACS:
        # a host-time rule: replayed from a CUDA graph a layer costs no host time, and kernel time decides
        return (f"H200, 2026-12-03: {problem.flops // 2:.2e} multiply-adds, below {MIN_TRITON_MACS:.1e}: the "
                f"kernel time a Triton family saves there is less than the host time a patched layer adds")
    if family == "wgrad_splitk":
        return ("H200 sweep, 2026-12-02: the split-K family (Gm = 1) slower than cuDNN on 350 of 365 "
                "depthwise layers")
    if family != "wgrad_merged":
        return None
    if problem.in_channels % VECTOR_CHANNEL_MULTIPLE:
        return (f"H200 sweep, 2026-12-02: with C={problem.in_channels} not a multiple of "
                f"{VECTOR_CHANNEL_MULTIPLE}, merged loads stay element-wide and cuDNN was faster on every such layer")
    undilated = all(d == 1 for d in problem.dilation)
    if not undilated and problem.spatial_dims >= 2 and not _small_dilated_measured_for_merged(problem):
        return ("H200, 2026-12-03: a patched dilated layer measured slower than the stock one as a whole in "
                "eager mode (forward + backward, UniRepLKNet-T's 7x7 d2 branch at 14x14, C=320, N=32: 778 vs "
                "597 us a call) although merged's dW kernel is 3.25x faster (70 vs 228 us): the patched "
                "layer's extra host time outweighs it")
    if problem.spatial_dims >= 2 and undilated and math.prod(problem.filter_size) <= CUDNN_WINS_UP_TO_TAPS:
        return (f"H200 sweep, 2026-12-02: cuDNN faster than merged on 202 of 204 undilated 2-D depthwise "
                f"layers with <= {CUDNN_WINS_UP_TO_TAPS} taps")
    return None


def _small_dilated_measured_for_merged(problem) -> bool:
    """UniRepLKNet's 3x3 dilated branches at training batch sizes (DILATED_MERGED_FROM_MACS)."""
    return (problem.spatial_dims == 2 and any(d > 1 for d in problem.dilation) and problem.cpg == 1
            and problem.dtype == "bf16"
            and problem.layout == "channels_last" and math.prod(problem.filter_size) < DILATED_SHIFTED_FROM_TAPS
            and _dilated_routed_off_cudnn(problem))


def _relayout_measured_faster(problem) -> str | None:
    if (problem.spatial_dims != 2 or problem.cpg != 1 or problem.kpg != 1 or problem.layout != "contiguous"
            or problem.dtype != "bf16" or any(s != 1 for s in problem.stride) or any(d != 1 for d in problem.dilation)):
        return None  # measured on bf16 NCHW depthwise layers of stride 1, undilated, only
    if math.prod(problem.filter_size) not in RELAYOUT_TAPS or problem.flops // 2 < RELAYOUT_FROM_MACS:
        return None
    return (f"H200, 2026-12-03: bf16 NCHW depthwise 5x5 and 7x7 filters of stride 1 and >= {RELAYOUT_FROM_MACS:.1e} "
            f"multiply-adds, copied to channels_last for cuDNN: 2.3-9.0x torch's own NCHW path on "
            f"EfficientNet-B0 and ConvNeXt-T layers")


def opt_in_measured_faster(problem, target, family: str) -> str | None:
    """Where an opt-in family was measured faster than merged and cuDNN (the measurement, for the
    rule), or None: only there does the router give it a problem."""
    if target.backend != "cuda":
        return None
    if family == "aten_channels_last":
        return _relayout_measured_faster(problem)
    if family == "wgrad_staged":
        return _staged_measured_faster(problem, target)
    if family == "wgrad_shifted_mma":
        return _shifted_mma_measured_faster(problem)
    if family == "wgrad_short1d":
        return _short1d_measured_faster(problem)
    if family == "wgrad_direct":
        return _direct_measured_faster(problem, target)
    if family != "wgrad_shifted":
        return None
    if problem.spatial_dims != 2 or problem.cpg != 1 or problem.kpg != 1 or problem.dtype == "fp32":
        return None  # fp32 (TF32 dots, 4-byte loads) was not measured
    taps = math.prod(problem.filter_size)
    if problem.layout == "channels_last" and problem.in_channels % SHIFTED_CHANNEL_BLOCK and not (
            taps >= SHIFTED_ODD_CHANNELS_FROM_TAPS and problem.dtype == "bf16" and all(d == 1 for d in problem.dilation)):
        return None  # measured with its 8-channel blocks in channels_last, and with odd channels from 9x9 only
    if all(d == 1 for d in problem.dilation):
        if problem.layout == "channels_last" and problem.in_channels % SHIFTED_CHANNEL_BLOCK:
            return (f"H100, 2026-12-07: bf16 channels_last undilated 2-D depthwise filters of >= "
                    f"{SHIFTED_ODD_CHANNELS_FROM_TAPS} taps with C={problem.in_channels} not a multiple of 8 (element "
                    f"loads): 3.9-15x cuDNN on every such 9x9-31x31 fitting shape")
        if taps >= SHIFTED_FROM_TAPS:
            return (f"H200, 2026-12-03: undilated 2-D depthwise filters of >= {SHIFTED_FROM_TAPS} taps, 4.1-12x "
                    f"faster than merged and 15-20x cuDNN on RepLKNet-31B's 13x13, 27x27 and 31x31 layers")
        if taps >= SHIFTED_CHANNELS_LAST_FROM_TAPS and problem.dtype == "bf16" and problem.layout == "channels_last":
            return (f"H100, 2026-12-07: bf16 channels_last undilated 2-D depthwise filters of >= "
                    f"{SHIFTED_CHANNELS_LAST_FROM_TAPS} taps, 1.2-3.1x merged and 4.5-170x cuDNN on the 9x9 and "
                    f"11x11 in-sample random shapes (stride 1 and 2)")
        return None
    if taps < DILATED_SHIFTED_FROM_TAPS or problem.dtype != "bf16" or problem.layout != "channels_last":
        return None  # measured on UniRepLKNet-T's 7x7 d2 branches, bf16 channels_last, only
    if not _dilated_routed_off_cudnn(problem):
        return None  # smaller dilated layers: the host time a patched layer adds can cost more than it saves
    return (f"H200, 2026-12-03: dilated 2-D depthwise filters of >= {DILATED_SHIFTED_FROM_TAPS} taps and >= "
            f"{DILATED_SHIFTED_FROM_MACS:.1e} multiply-adds, bf16 channels_last: 5.4-6.2x cuDNN and ~2x merged on "
            f"UniRepLKNet-T's 7x7 dilation-2 branches, and the N=128 model step faster with them routed")


def _dilated_routed_off_cudnn(problem) -> bool:
    """A dilated 2-D depthwise layer in a class the router takes from cuDNN by its multiply-adds (the
    Triton shifted family's, DILATED_SHIFTED_FROM_MACS, or the merged family's, DILATED_MERGED_FROM_MACS):
    below those bounds a patched layer's host time was measured to cost an eager step more than it saves."""
    taps, macs = math.prod(problem.filter_size), problem.flops // 2
    return macs >= (DILATED_SHIFTED_FROM_MACS if taps >= DILATED_SHIFTED_FROM_TAPS else DILATED_MERGED_FROM_MACS)


#: Dilated filters (UniRepLKNet's branches) on the shifted-MMA family, in the classes the router already
#: takes from cuDNN (_dilated_routed_off_cudnn), rows of >= SHIFTED_MMA_MIN_OUTPUT_WIDTH columns. H100, bf16,
#: N=32, graph replay, same process (tools/proto_shifted_mma.py, notes/PERF.md "Session 14"), channels_last:
#: 14x14 C320 7x7 d2 34.0 us (Triton shifted 41.9, cuDNN 234.5), 28x28 C160 3x3 d3 39.6 (shifted 62.0,
#: cuDNN 221.6), 56x56 C80 3x3 d4 62.8 (merged 97.4, shifted 179.6, cuDNN 358.0); NCHW: 35.2 (cuDNN
#: 197.0), 34.8 (59.0), 43.9 (123.4). It lost on the 7x7 C640 3x3 d5 branch (rows of 7: 34.1 against
#: cuDNN's 26.0), which the width bound leaves out.
SHIFTED_MMA_DILATED_MEASUREMENT = (
    "H100, 2026-12-06: bf16 dilated depthwise filters (UniRepLKNet-T's 3x3 d3-d5 and 7x7 d2 branches) on rows "
    f"of >= {SHIFTED_MMA_MIN_OUTPUT_WIDTH} columns, in the classes taken from cuDNN by multiply-adds: 5.6-6.9x "
    "cuDNN channels_last and 1.23-2.86x the Triton shifted and merged families (channels_last), 1.7-5.6x torch's "
    "NCHW path")


#: Fewest taps of the 1-D class the shifted-MMA family's sequence kernels take (bf16 depthwise, stride 1,
#: undilated, both layouts; channels_last runs the cooperative cl4 kernel). H100, graph replay, same process
#: (tools/seq_bench.py, notes/PERF.md "Session 16"), the family's planned split, against merged (the router's
#: choice before) and cuDNN: Conformer L512 C256 k31 N=32 NCHW 25.5 us (merged 79.7, cuDNN 199.2), channels_last
#: 23.8 (56.6, 256.3); L256 C512 k15 N=32 24.5 / 22.8 (40.8 / 29.5); L2048 C512 k31 N=32 166 / 157 (578 / 372);
#: Hyena-like L1024 C768 k128 N=8 37 / 35 (571 / 289). It lost on Mamba's k=4 (L2048 C1024 N=16: 157 / 150
#: against merged's 133 / 77): 128 tap slots a position for 4 taps, and the staging binds either way.
SHIFTED_MMA_SEQUENCE_FROM_TAPS = 15
LAYOUTS_MEASURED_1D = ("contiguous", "channels_last")
SHIFTED_MMA_SEQUENCE_MEASUREMENT = (
    f"H100, 2026-12-07: bf16 1-D depthwise filters of >= {SHIFTED_MMA_SEQUENCE_FROM_TAPS} taps (stride 1, undilated), "
    "both layouts: 1.3-15x merged and 4-35x cuDNN on Conformer k=15/31, a k=31 L=2048 layer and a k=128 one")


#: The short-1-D family's class: bf16 NCHW 1-D depthwise filters of these taps (stride 1, undilated). H100,
#: graph replay, same process (tools/seq_bench.py, notes/data/short1d_h100_2026-12-07s17.txt), the family's
#: planned split, against merged (the router's choice before) and cuDNN: Mamba L2048 C1024 k4 pad 3 N=16 64.4 us
#: (merged 133.5, cuDNN 202.9; grad_output rows L + 3: the _xvec kernel), L2048 C5120 k4 N=4 71.0 (145.4, 250.0),
#: TCN L1024 C512 k3 N=32 27.8 (51.5, 83.5). In channels_last it lost to merged on all three (its element loads:
#: 286.8 against 77.2 on Mamba), so channels_last stays merged; filters of 2 and 5-9 taps were not measured.
SHORT1D_MEASURED_TAPS = (3, 4)
SHORT1D_MEASUREMENT = (
    "H100, 2026-12-07: bf16 NCHW 1-D depthwise filters of 3-4 taps (stride 1, undilated): 1.85-2.07x merged and "
    "3.0-3.5x cuDNN on Mamba k=4 (d=1024, 5120) and a TCN k=3 layer")


#: The direct family's class: bf16 channels_last 1-D depthwise filters of these taps (stride 1, undilated) whose
#: channel count merged does not load as vectors (C % VECTOR_CHANNEL_MULTIPLE != 0; merged, 1.1x direct where it
#: does, is refused there by the rule above and the layer went to cuDNN). Fitted on the fitting set
#: (notes/sweep/fit_h100.csv, H100, isolated calls, session 19): L1024 C517 k4 N=32 79.5 us (cuDNN 350), L4096
#: C147 k4 104.6 -> 131 (cuDNN 437; the short-1-D family, NCHW-routed only, 105). Other taps were not measured.
DIRECT_1D_TAPS = (4,)
DIRECT_1D_MEASUREMENT = (
    f"H100, 2026-12-07: bf16 channels_last 1-D depthwise filters of {', '.join(map(str, DIRECT_1D_TAPS))} taps with a "
    f"channel count not a multiple of {VECTOR_CHANNEL_MULTIPLE} (merged loads stay element-wide): 3.3-4.4x cuDNN")


def _direct_measured_faster(problem, target) -> str | None:
    if (problem.spatial_dims == 1 and problem.cpg == 1 and problem.kpg == 1 and problem.dtype == "bf16"
            and problem.layout == "channels_last" and tuple(problem.stride) == (1,) and tuple(problem.dilation) == (1,)
            and problem.filter_size[0] in DIRECT_1D_TAPS and problem.in_channels % VECTOR_CHANNEL_MULTIPLE
            and (target.launch == "graph" or problem.flops // 2 >= MIN_TRITON_MACS)):
        return DIRECT_1D_MEASUREMENT
    return None


def _short1d_measured_faster(problem) -> str | None:
    if (problem.spatial_dims == 1 and problem.cpg == 1 and problem.kpg == 1 and problem.dtype == "bf16"
            and problem.layout == "contiguous" and tuple(problem.stride) == (1,) and tuple(problem.dilation) == (1,)
            and problem.filter_size[0] in SHORT1D_MEASURED_TAPS):
        return SHORT1D_MEASUREMENT
    return None


def _shifted_mma_measured_faster(problem) -> str | None:
    """The class the shifted-MMA family was measured faster on (bf16, a layout of SHIFTED_MMA_MEASURED,
    stride-1 depthwise 2-D filters, output rows of >= 14 columns; undilated: at least that layout's
    taps; dilated: the classes routed off cuDNN, SHIFTED_MMA_DILATED_MEASUREMENT; 1-D: the sequence kernels'
    class, SHIFTED_MMA_SEQUENCE_MEASUREMENT): its measurement, or None."""
    if (problem.spatial_dims == 1 and problem.cpg == 1 and problem.kpg == 1 and problem.dtype == "bf16"
            and problem.layout in LAYOUTS_MEASURED_1D and tuple(problem.stride) == (1,)
            and tuple(problem.dilation) == (1,) and problem.filter_size[0] >= SHIFTED_MMA_SEQUENCE_FROM_TAPS):
        return SHIFTED_MMA_SEQUENCE_MEASUREMENT
    if (problem.spatial_dims != 2 or problem.cpg != 1 or problem.kpg != 1 or problem.dtype != "bf16"
            or problem.layout not in SHIFTED_MMA_MEASURED or any(s != 1 for s in problem.stride)):
        return None  # fp16 runs the same kernel but was not timed; the rest it refuses or was not measured on
    if any(d != 1 for d in problem.dilation):
        if problem.output_size[1] < SHIFTED_MMA_MIN_OUTPUT_WIDTH or not _dilated_routed_off_cudnn(problem):
            return None
        return SHIFTED_MMA_DILATED_MEASUREMENT
    from_taps, measurement = SHIFTED_MMA_MEASURED[problem.layout]
    taps = math.prod(problem.filter_size)
    if taps < from_taps:
        return None
    if problem.output_size[1] < SHIFTED_MMA_MIN_OUTPUT_WIDTH:
        return _shifted_mma_narrow_rows_measured(problem, taps)
    return measurement


def _shifted_mma_narrow_rows_measured(problem, taps: int) -> str | None:
    """The channels_last classes of output rows narrower than SHIFTED_MMA_MIN_OUTPUT_WIDTH where the
    shifted-MMA family was measured faster than the Triton shifted family (SHIFTED_MMA_NARROW_ROWS)."""
    if problem.layout != "channels_last":
        return None  # NCHW: measured slower on the 7x7 plane (SHIFTED_MMA_FROM_TAPS), nothing else timed
    width = problem.output_size[1]
    if problem.in_channels % SHIFTED_CHANNEL_BLOCK:
        measured = width >= SHIFTED_MMA_NARROW_ODD_CHANNELS_FROM_WIDTH
    else:
        measured = any(width >= from_width and taps >= from_taps for from_width, from_taps in SHIFTED_MMA_NARROW_ROWS)
    return SHIFTED_MMA_NARROW_ROWS_MEASUREMENT if measured else None


def _aten_if_measured_faster(problem, target, spec, admitted) -> Choice | None:
    """The fallback's Choice where aten was measured faster than ``spec``'s family (and admits the
    problem), else None."""
    fallback = next((s for s in admitted if s.family == FALLBACK_FAMILY), None)
    measured = aten_measured_faster(problem, target, spec.family)
    if measured and fallback is not None:
        return Choice(spec=fallback, rule=f"measured: aten is faster than {spec.family} on {target.backend} ({measured})")
    return None


def select(problem, target, candidates, families) -> Choice | None:
    admitted = [spec for spec, verdict in candidates if verdict]
    if not admitted:
        return None
    measured_classes = [(spec, measured) for spec in admitted if spec.family in OPT_IN_FAMILIES
                        and (measured := opt_in_measured_faster(problem, target, spec.family))]
    if measured_classes:  # an opt-in family where it was measured faster comes first
        spec, measured = min(measured_classes, key=lambda pair: OPT_IN_PRECEDENCE.get(pair[0].family, 1))  # stable
        return _aten_if_measured_faster(problem, target, spec, admitted) or Choice(
            spec=spec, rule=f"measured: {spec.family} is faster than the families above it and aten on "
                            f"{target.backend} ({measured}); first admitted candidate")
    routed = [spec for spec in admitted if spec.family not in OPT_IN_FAMILIES]
    if not routed:  # only opt-in families offered: a pin chose them
        spec = admitted[0]
        return Choice(spec=spec, rule=f"pinned: {spec.family} is opt-in, routed only where measured faster (routing.OPT_IN_FAMILIES); "
                                      "first admitted candidate")
    passed_over = sorted({spec.family for spec in admitted} - {spec.family for spec in routed})
    admitted = routed
    order = {name: rank for rank, name in enumerate(families.names())}
    best = min(admitted, key=lambda spec: order.get(spec.family, len(order)))  # stable: first listed wins ties
    if best.family == FALLBACK_FAMILY:
        refused = sorted({s.family for s, v in candidates if not v and s.family != FALLBACK_FAMILY} - set(passed_over))
        why = f"no Triton family admits the problem ({', '.join(refused)} refused)" if refused else "no other family offered a candidate"
        if passed_over:
            why += f"; {', '.join(passed_over)} admits it but is opt-in, routed only where measured faster"
        return Choice(spec=best, rule=f"fallback: {why}")
    measured = ""
    if best.family == "wgrad_merged" and target.backend == "cuda" and _small_dilated_measured_for_merged(problem):
        measured = (f" (dilated 2-D depthwise below {DILATED_SHIFTED_FROM_TAPS} taps, >= {DILATED_MERGED_FROM_MACS:.1e} "
                    f"multiply-adds, bf16 channels_last: measured 3.8-5.5x cuDNN alone on H200, UniRepLKNet-T N=128 "
                    f"1.30x over stock with them routed, 2026-12-03)")
    return _aten_if_measured_faster(problem, target, best, admitted) or Choice(
        spec=best,
        rule=f"priority: {best.family} is the highest-priority family admitting the problem{measured}; first admitted candidate",
    )
