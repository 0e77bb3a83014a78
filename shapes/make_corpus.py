#!/usr/bin/env python3
"""Build the depthwise weight-gradient shape corpus (stdlib only, deterministic).

Writes four CSV files next to this script, header ``name,N,C,g,D,H,W,L,k,s,p,d``
(the keys ``convwgrad.shapes.read_csv`` accepts; every row has ``g = C``, i.e.
depthwise, and K defaults to C):

``depthwise_corpus.csv`` -- depthwise layers of published networks
    Every row has N=32.  2-D rows give H and W (square), 1-D rows give L; D is
    always empty.  ``p`` is empty (reader default ``d*(k-1)//2``, which is what
    the reference implementations use for odd k) except for the Mamba causal
    conv, whose reference ``nn.Conv1d(padding=d_conv-1)`` is written as p=3.
    ``d`` is 1 except for UniRepLKNet's dilated re-param branches.  The source
    architecture and role are in ``name``:
    ``<arch>[-<role>]-<C>x<H>-k<k>-s<s>[-d<d>]`` (1-D: ``<C>xL<L>``).

    How the layers were extracted: each network is traced stage by stage from
    its reference configuration (the tables below / the builder functions),
    tracking the channel count and the *input* spatial size of every depthwise
    conv (stride-2 layers are listed at their input size; a stride-s conv with
    padding (k-1)//2 maps size n to ceil(n/s)).  Inputs are 224x224 for the
    ImageNet models unless noted (EfficientNet-B3 300, B4 380, EfficientNetV2-S
    300 train / 384 eval, Xception 299).  Layers that repeat identically inside
    a network appear once, and a layer already contributed by an earlier
    network is not repeated: rows are distinct by (C, spatial size, k, s, d, p);
    the first network in the order below that has the layer names it.  So later
    networks contribute only their new layers -- MnasNet-A1's 11 depthwise
    layers all coincide with MobileNetV2/V3/EfficientNet-B0 layers and it adds
    no row.  Dilation counts: UniRepLKNet's dilated branches (e.g. 7x7 d=2,
    3x3 d=3/4/5) are kept beside plain layers of the same (C, spatial, k, s),
    since they are different problems; without them the corpus is still well
    over 150 layers distinct by (C, spatial, k, s) alone (printed by main()).

    Sources (reference implementation used for exact values):
      * MobileNet v1 x1.0/x0.75/x0.5 (Howard et al. 2017; TF-slim
        mobilenet_v1.py).  The paper's table lists the last dw 1024 at s2 on a
        7x7 input; every reference implementation uses s1 there, as here.
      * MobileNetV2 x1.0/x1.4 (Sandler et al. 2018; torchvision, channels
        _make_divisible(c*1.4, 8), hidden = round(in*t)).
      * MobileNetV3 large/small (Howard et al. 2019, Table 1/2; timm arch_def).
      * MobileNetV4 conv-small/conv-medium (Qin et al. 2024; timm
        mobilenetv3.py arch_def, UIB: optional "start" dw (kernel a, stride 1
        when a mid dw exists) on the input channels and a "mid" dw (kernel k,
        block stride) on the expanded channels).
      * EfficientNet B0/B3/B4 (Tan & Le 2019; TF reference / timm): width 1.2
        depth 1.4 @300 for B3, width 1.4 depth 1.8 @380 for B4, channels
        round_filters(c*w, 8), repeats ceil(n*depth).
      * EfficientNetV2-S (Tan & Le 2021, Table 4; official effnetv2 config:
        train_size 300, eval_size 384): the MBConv stages 4-6 only (stages 1-3
        are Fused-MBConv, no depthwise).  Listed at both 300 and 384.
      * ConvNeXt T/S/B/L (Liu et al. 2022) and ConvNeXt V2 atto/femto/pico/
        nano/huge (Woo et al. 2023): one 7x7 dw per block at 56/28/14/7 (T/S
        and V2-T, V2-B, V2-L have the same layers as V1 T/B/L).
      * RepLKNet-31B/31L (Ding et al. 2022; DingXiaoH/RepLKNet-pytorch
        replknet.py): stem dw3x3 s1 and s2 at 112, large kernels 31/29/27/13
        at 56/28/14/7 with their parallel 5x5 re-param branch (trained, merged
        only at inference), transition dw3x3 s2 between stages.
      * UniRepLKNet A/F/P/N/T/S (Ding et al. 2024; AILab-CVC/UniRepLKNet
        unireplknet.py, default kernel sizes): 3x3 in stage 1 at 56, 13x13 in
        stages 2-4 at 28/14/7, plus the 3x3 blocks mixed into stage 3 of T and
        S.  For T and S also the trained dilated re-param branches of each
        13x13 (k 5,7,3,3,3 with d 1,2,3,4,5).  The released ImageNet configs do
        not use 11x11; the 11x11 rows ("unireplknet-s-k11") are UniRepLKNet-S
        widths with 11x11 blocks (DRB branches k 5,5,3,3,3 d 1..5 from the
        reference code), as in the paper's kernel-size study -- UNSURE that an
        11x11 UniRepLKNet-S was published exactly so; treat as a variant.
      * ShuffleNetV2 x0.5/x1.0/x1.5/x2.0 (Ma et al. 2018; torchvision): per
        stage the downsampling unit's two dw3x3 s2 (branch1 on the input
        channels, branch2 on C_out/2) and the repeated units' dw3x3 on C_out/2.
      * GhostNet x1.0 (Han et al. 2020; timm/official ghostnet.py cfgs): the
        ghost modules' cheap dw3x3 (on ceil(c/2) channels), the stride-2 dw
        k x k on the expanded channels, and the shortcut dw k x k on the input
        channels where the block changes width or stride.
      * MnasNet-A1 (Tan et al. 2019; timm _gen_mnasnet_a1, stem 32).
      * Xception (Chollet 2017; Keras/timm legacy): 299 input, separable convs
        at 147/74/37 (entry), 19 (middle flow, 728 ch), 19 and 10 (exit).
      * Conformer conv module (Gulati et al. 2020; torchaudio/ESPnet use k=31,
        ESPnet/NeMo small recipes k=15) at the S/M/L encoder widths 144/256/512
        and L in {256, 512, 1024} frames after 4x subsampling.
      * Mamba causal conv1d (Gu & Dao 2023; mamba_ssm Mamba block, d_conv=4,
        d_inner = 2*d_model): 130M/370M/790M -> C 1536/2048/3072, L in
        {512, 1024, 2048}, padding 3.

``depthwise_random.csv`` -- a stratified random grid of 100 depthwise shapes
    Drawn with ``random.Random(2026)``.  Strata: every 2-D combination of
    kernel k in {3,5,7,9,11,13,31} x stride {1,2} x square spatial size
    {7,14,28,56,112} once (70), 12 of those drawn again, and every 1-D
    combination of L in {256,1024,4096} x k in {4,15,31} (stride 1) twice (18):
    100 strata, shuffled.  Channel counts: 12 of the 100 shapes (12%, chosen
    at random) get an odd C drawn from [15, 1023] -- these CANNOT be merged
    (C not divisible by 2); the other 88 get C from a list of multiples of 8
    (16..2048 for 2-D, 128..4096 for 1-D).  N starts at 32 and is halved to 16
    and then 8 while N*C*H*W >= 2e8; a C that would not fit even at N=8, or
    that repeats an earlier (C, spatial, k, s), is drawn again.  Padding is the
    reader's default, d=1.  Names: ``rand-<idx>-k<k>-s<s>-<C>x<H>`` (1-D
    ``<C>xL<L>``).

``depthwise_fit.csv`` -- 40 more random depthwise shapes for fitting the router, never for scoring it
    Drawn with ``random.Random(2027)`` from the same strata (40 of them at random) and the same batch
    and channel rules, but half of them with an odd C: the first 50 random shapes (the in-sample set of
    session 18) hold 6 odd-C shapes, none with a filter above 7x7, so nothing in-sample measured the
    odd-C large-filter class the held-out 50 lost most on.  A (C, spatial, k, s) of the random grid is
    drawn again.  Names: ``fit-<idx>-...``.

``depthwise_fit_narrow.csv`` -- 24 large filters over narrow planes, for fitting one routing class
    Drawn with ``random.Random(2028)``: 9x9, 11x11, 13x13 and 31x31 filters, stride 1, over 7x7, 10x10 and
    13x13 planes (output rows narrower than the shifted-MMA family's routed 14), each stratum twice, the
    second draw with an odd C; no (C, spatial, k, s) of the other two random sets again.  The first
    fitting set held one such odd-C row (fit-018) and it disagreed with the in-sample one (rand-005), so
    the class could not be fitted.  Names: ``narrow-<idx>-...``.

Run ``python shapes/make_corpus.py``; it rewrites the four files and prints counts.
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections import Counter, namedtuple

HEADER = ["name", "N", "C", "g", "D", "H", "W", "L", "k", "s", "p", "d"]
HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 32
SEED = 2026
ELEMENT_LIMIT = 2e8

# family: group for counting; arch/role: label in the name; spatial: (H, W) for 2-D, (L,) for 1-D
Layer = namedtuple("Layer", "family arch role C spatial k s p d")


def dw2(family, arch, C, hw, k, s=1, role="", d=1):
    return Layer(family, arch, role, C, (hw, hw), k, s, None, d)


def dw1(family, arch, C, L, k, s=1, role="", p=None):
    return Layer(family, arch, role, C, (L,), k, s, p, 1)


def down(n, s):
    """Output size of a stride-s conv with padding (k-1)//2 (odd k): ceil(n/s)."""
    return -(-n // s)


def make_divisible(v, divisor=8):
    """TF/torchvision _make_divisible / EfficientNet round_filters."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# ---------------------------------------------------------------- MobileNet v1
def mobilenet_v1(alpha, tag):
    fam, arch = "mobilenetv1", f"mobilenetv1-{tag}"
    c = lambda v: max(int(v * alpha), 8)  # noqa: E731  (TF-slim depth())
    # (dw channels, stride) in order; first conv 3x3 s2 -> 112
    seq = [(32, 1), (64, 2), (128, 1), (128, 2), (256, 1), (256, 2)] + [(512, 1)] * 5 + [(512, 2), (1024, 1)]
    size, rows = 112, []
    for ch, s in seq:
        rows.append(dw2(fam, arch, c(ch), size, 3, s))
        size = down(size, s)
    return rows


# ---------------------------------------------------------------- inverted residual tracer (MBv2, EfficientNet, MnasNet)
def inverted_residual(fam, arch, stem, size, stages, width=1.0, depth=1.0, hidden_fn=None):
    """stages: (expand t, kernel, stride, out channels, repeats) -- the MBv2 / EfficientNet table form."""
    rows, inp = [], make_divisible(stem * width) if width != 1.0 else stem
    for t, k, s, c, n in stages:
        out = make_divisible(c * width) if width != 1.0 else c
        for i in range(int(math.ceil(n * depth))):
            stride = s if i == 0 else 1
            hidden = inp if t == 1 else (hidden_fn(inp, t) if hidden_fn else inp * t)
            rows.append(dw2(fam, arch, hidden, size, k, stride))
            size, inp = down(size, stride), out
    return rows


MBV2 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 3, 2, 32, 3), (6, 3, 2, 64, 4), (6, 3, 1, 96, 3), (6, 3, 2, 160, 3), (6, 3, 1, 320, 1)]
EFFNET = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
MNASNET_A1 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (3, 5, 2, 40, 3), (6, 3, 2, 80, 4), (6, 3, 1, 112, 2), (6, 5, 2, 160, 3), (6, 3, 1, 320, 1)]


def mobilenet_v2(width, tag):
    # torchvision: hidden_dim = int(round(inp * t)); channels _make_divisible(c * width, 8)
    return inverted_residual("mobilenetv2", f"mobilenetv2-{tag}", 32, 112, MBV2, width=width,
                             hidden_fn=lambda inp, t: int(round(inp * t)))


def efficientnet(tag, width, depth, res):
    return inverted_residual("efficientnet", f"efficientnet-{tag}", 32, down(res, 2), EFFNET, width=width, depth=depth)


def efficientnetv2_s(res):
    # stem 24 s2, stage1 FusedMB s1, stage2 FusedMB s2 (48), stage3 FusedMB s2 (64): no depthwise; then MBConv
    size = down(down(down(res, 2), 2), 2)
    return inverted_residual("efficientnetv2", f"efficientnetv2-s-{res}", 64, size,
                             [(4, 3, 2, 128, 6), (6, 3, 1, 160, 9), (6, 3, 2, 256, 15)])


def mnasnet_a1():
    return inverted_residual("mnasnet", "mnasnet-a1", 32, 112, MNASNET_A1)


# ---------------------------------------------------------------- MobileNetV3 (explicit expansion sizes, Table 1/2)
def mobilenet_v3(tag, table):
    fam, arch = "mobilenetv3", f"mobilenetv3-{tag}"
    size, rows = 112, []
    for k, exp, _out, s in table:
        rows.append(dw2(fam, arch, exp, size, k, s))
        size = down(size, s)
    return rows


MBV3_LARGE = [  # (k, exp, out, s); stem 16 @112
    (3, 16, 16, 1), (3, 64, 24, 2), (3, 72, 24, 1), (5, 72, 40, 2), (5, 120, 40, 1), (5, 120, 40, 1),
    (3, 240, 80, 2), (3, 200, 80, 1), (3, 184, 80, 1), (3, 184, 80, 1), (3, 480, 112, 1), (3, 672, 112, 1),
    (5, 672, 160, 2), (5, 960, 160, 1), (5, 960, 160, 1)]
MBV3_SMALL = [
    (3, 16, 16, 2), (3, 72, 24, 2), (3, 88, 24, 1), (5, 96, 40, 2), (5, 240, 40, 1), (5, 240, 40, 1),
    (5, 120, 48, 1), (5, 144, 48, 1), (5, 288, 96, 2), (5, 576, 96, 1), (5, 576, 96, 1)]


# ---------------------------------------------------------------- MobileNetV4 (UIB)
MNV4_SMALL = {  # timm mobilenetv4_conv_small; stem 32 s2 -> 112; stages 0-1 are plain convs to 64 ch @28
    "stem": (64, 28),
    "blocks": ["uir_r1_a5_k5_s2_e3_c96", "uir_r4_a0_k3_s1_e2_c96", "uir_r1_a3_k0_s1_e4_c96",
               "uir_r1_a3_k3_s2_e6_c128", "uir_r1_a5_k5_s1_e4_c128", "uir_r1_a0_k5_s1_e4_c128",
               "uir_r1_a0_k5_s1_e3_c128", "uir_r2_a0_k3_s1_e4_c128"],
}
MNV4_MEDIUM = {  # timm mobilenetv4_conv_medium; stem 32 s2 -> 112; stage 0 FusedIB s2 -> 48 ch @56
    "stem": (48, 56),
    "blocks": ["uir_r1_a3_k5_s2_e4_c80", "uir_r1_a3_k3_s1_e2_c80",
               "uir_r1_a3_k5_s2_e6_c160", "uir_r2_a3_k3_s1_e4_c160", "uir_r1_a3_k5_s1_e4_c160",
               "uir_r1_a3_k3_s1_e4_c160", "uir_r1_a3_k0_s1_e4_c160", "uir_r1_a0_k0_s1_e2_c160",
               "uir_r1_a3_k0_s1_e4_c160",
               "uir_r1_a5_k5_s2_e6_c256", "uir_r1_a5_k5_s1_e4_c256", "uir_r2_a3_k5_s1_e4_c256",
               "uir_r1_a0_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256", "uir_r1_a3_k5_s1_e2_c256",
               "uir_r1_a5_k5_s1_e4_c256", "uir_r2_a0_k0_s1_e4_c256", "uir_r1_a5_k0_s1_e2_c256"],
}


def mobilenet_v4(tag, cfg):
    fam, arch = "mobilenetv4", f"mobilenetv4-conv-{tag}"
    inp, size = cfg["stem"]
    rows = []
    for token in cfg["blocks"]:
        opts = {part[0]: part[1:] for part in token.split("_")[1:]}
        r, a, k, s, e, c = (int(opts["r"]), int(opts["a"]), int(opts["k"]), int(opts["s"]), float(opts["e"]), int(opts["c"]))
        for i in range(r):
            stride = s if i == 0 else 1
            if a:  # start dw on the input channels; takes the stride only when there is no mid dw
                start_stride = stride if not k else 1
                rows.append(dw2(fam, arch, inp, size, a, start_stride, role="start"))
                size = down(size, start_stride)
                if not k:
                    stride = 1
            mid = make_divisible(inp * e)
            if k:
                rows.append(dw2(fam, arch, mid, size, k, stride, role="mid"))
                size = down(size, stride)
            inp = c
    return rows


# ---------------------------------------------------------------- ConvNeXt / ConvNeXt V2
def convnext(fam, arch, dims):
    return [dw2(fam, arch, c, hw, 7) for c, hw in zip(dims, (56, 28, 14, 7))]


# ---------------------------------------------------------------- RepLKNet
def replknet(tag, dims, kernels=(31, 29, 27, 13), small=5):
    fam, arch = "replknet", f"replknet-{tag}"
    rows = [dw2(fam, arch, dims[0], 112, 3, 1, role="stem"), dw2(fam, arch, dims[0], 112, 3, 2, role="stem")]
    for i, (c, hw, k) in enumerate(zip(dims, (56, 28, 14, 7), kernels)):
        rows.append(dw2(fam, arch, c, hw, k, role="lk"))
        rows.append(dw2(fam, arch, c, hw, small, role="small"))  # parallel 5x5 re-param branch (trained)
        if i < 3:
            rows.append(dw2(fam, arch, dims[i + 1], hw, 3, 2, role="trans"))
    return rows


# ---------------------------------------------------------------- UniRepLKNet
DRB_BRANCHES = {13: ((5, 1), (7, 2), (3, 3), (3, 4), (3, 5)), 11: ((5, 1), (5, 2), (3, 3), (3, 4), (3, 5))}


def unireplknet(tag, dims, stage3_has_3x3, branches, lk=13):
    fam, arch = "unireplknet", f"unireplknet-{tag}"
    rows = [dw2(fam, arch, dims[0], 56, 3)]
    for i, (c, hw) in enumerate(zip(dims[1:], (28, 14, 7)), start=1):
        if i == 2 and stage3_has_3x3:
            rows.append(dw2(fam, arch, c, hw, 3))
        rows.append(dw2(fam, arch, c, hw, lk, role="lk"))
        if branches:
            rows += [dw2(fam, arch, c, hw, bk, role="drb", d=bd) for bk, bd in DRB_BRANCHES[lk]]
    return rows


# ---------------------------------------------------------------- ShuffleNetV2
def shufflenet_v2(tag, outs):
    fam, arch = "shufflenetv2", f"shufflenetv2-{tag}"
    rows, inp, size = [], 24, 56  # conv1 3x3 s2 (24 ch) -> 112, maxpool -> 56
    for out in outs:
        half = out // 2
        rows.append(dw2(fam, arch, inp, size, 3, 2, role="b1"))   # branch1 dw on the input
        rows.append(dw2(fam, arch, half, size, 3, 2, role="b2"))  # branch2 dw after its 1x1 (inp -> out/2)
        size = down(size, 2)
        rows.append(dw2(fam, arch, half, size, 3, 1))             # repeated units
        inp = out
    return rows


# ---------------------------------------------------------------- GhostNet
GHOSTNET_CFG = [  # k, exp, out, se, s  (official cfgs, flattened)
    (3, 16, 16, 0, 1), (3, 48, 24, 0, 2), (3, 72, 24, 0, 1), (5, 72, 40, .25, 2), (5, 120, 40, .25, 1),
    (3, 240, 80, 0, 2), (3, 200, 80, 0, 1), (3, 184, 80, 0, 1), (3, 184, 80, 0, 1), (3, 480, 112, .25, 1),
    (3, 672, 112, .25, 1), (5, 672, 160, .25, 2), (5, 960, 160, 0, 1), (5, 960, 160, .25, 1),
    (5, 960, 160, 0, 1), (5, 960, 160, .25, 1)]


def ghostnet():
    fam, arch = "ghostnet", "ghostnet-100"
    rows, inp, size = [], 16, 112
    for k, exp, out, _se, s in GHOSTNET_CFG:
        rows.append(dw2(fam, arch, math.ceil(exp / 2), size, 3, 1, role="cheap"))   # ghost1 cheap op
        if s > 1:
            rows.append(dw2(fam, arch, exp, size, k, s, role="dw"))                 # conv_dw on mid
        osize = down(size, s)
        rows.append(dw2(fam, arch, math.ceil(out / 2), osize, 3, 1, role="cheap"))  # ghost2 cheap op
        if inp != out or s != 1:
            rows.append(dw2(fam, arch, inp, size, k, s, role="shortcut"))           # shortcut dw
        inp, size = out, osize
    return rows


# ---------------------------------------------------------------- Xception
def xception():
    fam = arch = "xception"
    # 299 -> conv 3x3 s2 valid 149 -> conv 3x3 valid 147; separable convs (dw in-channels) then maxpool s2
    seq = [(64, 147), (128, 147), (128, 74), (256, 74), (256, 37), (728, 37)] + [(728, 19)] * 26 + \
          [(728, 19), (728, 19), (1024, 10), (1536, 10)]
    return [dw2(fam, arch, c, hw, 3) for c, hw in seq]


# ---------------------------------------------------------------- 1-D
def conformer():
    rows = []
    for tag, c in (("s", 144), ("m", 256), ("l", 512)):
        for k in (31, 15):
            for L in (256, 512, 1024):
                rows.append(dw1("conformer", f"conformer-{tag}", c, L, k))
    return rows


def mamba():
    rows = []
    for tag, c in (("130m", 1536), ("370m", 2048), ("790m", 3072)):
        for L in (512, 1024, 2048):
            rows.append(dw1("mamba", f"mamba-{tag}", c, L, 4, p=3))
    return rows


def published_layers():
    rows = []
    rows += mobilenet_v1(1.0, "100") + mobilenet_v1(0.75, "075") + mobilenet_v1(0.5, "050")
    rows += mobilenet_v2(1.0, "100") + mobilenet_v2(1.4, "140")
    rows += mobilenet_v3("large", MBV3_LARGE) + mobilenet_v3("small", MBV3_SMALL)
    rows += mobilenet_v4("small", MNV4_SMALL) + mobilenet_v4("medium", MNV4_MEDIUM)
    rows += efficientnet("b0", 1.0, 1.0, 224) + efficientnet("b3", 1.2, 1.4, 300) + efficientnet("b4", 1.4, 1.8, 380)
    rows += efficientnetv2_s(300) + efficientnetv2_s(384)
    rows += convnext("convnext", "convnext-ts", (96, 192, 384, 768))
    rows += convnext("convnext", "convnext-b", (128, 256, 512, 1024))
    rows += convnext("convnext", "convnext-l", (192, 384, 768, 1536))
    for tag, dims in (("atto", (40, 80, 160, 320)), ("femto", (48, 96, 192, 384)), ("pico", (64, 128, 256, 512)),
                      ("nano", (80, 160, 320, 640)), ("huge", (352, 704, 1408, 2816))):
        rows += convnext("convnext", f"convnextv2-{tag}", dims)
    rows += replknet("31b", (128, 256, 512, 1024)) + replknet("31l", (192, 384, 768, 1536))
    rows += unireplknet("a", (40, 80, 160, 320), False, False)
    rows += unireplknet("f", (48, 96, 192, 384), False, False)
    rows += unireplknet("p", (64, 128, 256, 512), False, False)
    rows += unireplknet("n", (80, 160, 320, 640), False, False)
    rows += unireplknet("t", (80, 160, 320, 640), True, True)
    rows += unireplknet("s", (96, 192, 384, 768), True, True)
    rows += unireplknet("s-k11", (96, 192, 384, 768), False, True, lk=11)
    rows += shufflenet_v2("050", (48, 96, 192)) + shufflenet_v2("100", (116, 232, 464))
    rows += shufflenet_v2("150", (176, 352, 704)) + shufflenet_v2("200", (244, 488, 976))
    rows += ghostnet() + mnasnet_a1() + xception()
    rows += conformer() + mamba()
    return rows


# ---------------------------------------------------------------- output
def key(layer):
    """Identity of a layer as a problem: (C, spatial, k, s) plus dilation and explicit padding."""
    return (layer.C, layer.spatial, layer.k, layer.s, layer.d, layer.p)


def out_size(n, k, s, p, d):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def size_label(C, spatial):
    return f"{C}xL{spatial[0]}" if len(spatial) == 1 else f"{C}x{spatial[0]}"


def row_of(name, N, C, spatial, k, s, p, d):
    H = W = L = ""
    if len(spatial) == 1:
        L = spatial[0]
    else:
        H, W = spatial
    return {"name": name, "N": N, "C": C, "g": C, "D": "", "H": H, "W": W, "L": L, "k": k, "s": s,
            "p": "" if p is None else p, "d": d}


def check_row(row):
    spatial = [int(row[x]) for x in ("H", "W", "L") if row[x] != ""]
    k, s, d = int(row["k"]), int(row["s"]), int(row["d"])
    p = int(row["p"]) if row["p"] != "" else d * (k - 1) // 2
    assert all(out_size(n, k, s, p, d) >= 1 for n in spatial), row
    assert "," not in row["name"], row


def write(path, rows):
    for row in rows:
        check_row(row)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def build_corpus():
    seen, kept, raw = set(), [], Counter()
    for layer in published_layers():
        raw[layer.family] += 1
        if key(layer) in seen:
            continue
        seen.add(key(layer))
        kept.append(layer)
    rows = []
    for layer in kept:
        parts = [layer.arch] + ([layer.role] if layer.role else [])
        parts += [size_label(layer.C, layer.spatial), f"k{layer.k}", f"s{layer.s}"]
        if layer.d != 1:
            parts.append(f"d{layer.d}")
        rows.append(row_of("-".join(parts), BATCH, layer.C, layer.spatial, layer.k, layer.s, layer.p, layer.d))
    return rows, kept, raw


CH2D = [16, 24, 32, 40, 48, 64, 72, 80, 96, 120, 128, 144, 160, 192, 240, 256, 288, 320, 384, 480, 512,
        576, 640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048]
CH1D = [128, 144, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
N_RANDOM, N_ODD = 100, 12
FIT_SEED, N_FIT = 2027, 40
#: A second fitting set for one class the router cannot decide from the first (session 20): large filters over
#: narrow planes (output rows < 14), where the shifted-MMA family is kept off and the Triton shifted family with
#: odd channel counts ran 2x slower than it (fit-018: 31x31 on 7x7, C565). Two draws a stratum, one odd C.
NARROW_SEED = 2028
STRATA_NARROW = [(k, s, (hw, hw)) for k in (9, 11, 13, 31) for s in (1,) for hw in (7, 10, 13)]


STRATA_2D = [(k, s, (hw, hw)) for k in (3, 5, 7, 9, 11, 13, 31) for s in (1, 2) for hw in (7, 14, 28, 56, 112)]
STRATA_1D = [(k, 1, (L,)) for L in (256, 1024, 4096) for k in (4, 15, 31)]


def build_random():
    rng = random.Random(SEED)
    strata = STRATA_2D + rng.sample(STRATA_2D, N_RANDOM - len(STRATA_2D) - 2 * len(STRATA_1D)) + STRATA_1D * 2
    rng.shuffle(strata)
    odd = set(rng.sample(range(N_RANDOM), N_ODD))
    return draw_rows(rng, strata, odd, "rand")


def build_fit(random_rows):
    """The fitting set: N_FIT strata of the random grid's, half with an odd C, none repeating its shapes."""
    rng = random.Random(FIT_SEED)
    strata = rng.sample(STRATA_2D + STRATA_1D, N_FIT)
    odd = set(rng.sample(range(N_FIT), N_FIT // 2))
    taken = {(int(r["C"]), tuple(int(r[a]) for a in ("H", "W")) if r["H"] else (int(r["L"]),), int(r["k"]), int(r["s"]))
             for r in random_rows}
    return draw_rows(rng, strata, odd, "fit", seen=taken)


def build_fit_narrow(taken_rows):
    """The narrow-plane fitting set: every STRATA_NARROW stratum twice, the second draw with an odd C."""
    rng = random.Random(NARROW_SEED)
    strata = [stratum for stratum in STRATA_NARROW for _ in range(2)]
    odd = set(range(1, len(strata), 2))
    taken = {(int(r["C"]), tuple(int(r[a]) for a in ("H", "W")) if r["H"] else (int(r["L"]),), int(r["k"]), int(r["s"]))
             for r in taken_rows}
    return draw_rows(rng, strata, odd, "narrow", seen=taken)


def draw_rows(rng, strata, odd, prefix, seen=None):
    rows, seen = [], set() if seen is None else set(seen)
    for i, (k, s, spatial) in enumerate(strata):
        elems = math.prod(spatial)
        while True:
            C = rng.randrange(15, 1024, 2) if i in odd else rng.choice(CH1D if len(spatial) == 1 else CH2D)
            N = BATCH
            while N * C * elems >= ELEMENT_LIMIT and N > 8:
                N //= 2
            if N * C * elems < ELEMENT_LIMIT and (C, spatial, k, s) not in seen:
                break
        seen.add((C, spatial, k, s))
        name = f"{prefix}-{i:03d}-k{k}-s{s}-{size_label(C, spatial)}"
        rows.append(row_of(name, N, C, spatial, k, s, None, 1))
    return rows


def main():
    corpus, kept, raw = build_corpus()
    rand = build_random()
    write(os.path.join(HERE, "depthwise_corpus.csv"), corpus)
    write(os.path.join(HERE, "depthwise_random.csv"), rand)
    fit = build_fit(rand)
    write(os.path.join(HERE, "depthwise_fit.csv"), fit)
    narrow = build_fit_narrow(rand + fit)
    write(os.path.join(HERE, "depthwise_fit_narrow.csv"), narrow)
    n_csk = len({(l.C, l.spatial, l.k, l.s) for l in kept})
    print(f"depthwise_corpus.csv: {len(corpus)} distinct layers (of {sum(raw.values())} traced); "
          f"{n_csk} distinct by (C, spatial, k, s) alone")
    for fam, n in Counter(l.family for l in kept).items():
        print(f"  {fam:16s} {n:4d} rows  ({raw[fam]} traced before de-duplication)")
    n_odd = sum(int(r["C"]) % 2 for r in rand)
    print(f"depthwise_random.csv: {len(rand)} rows, {n_odd} odd-C ({n_odd / len(rand):.0%} unmergeable), "
          f"N: {dict(Counter(r['N'] for r in rand))}")
    print(f"depthwise_fit.csv: {len(fit)} rows, {sum(int(r['C']) % 2 for r in fit)} odd-C")
    print(f"depthwise_fit_narrow.csv: {len(narrow)} rows, {sum(int(r['C']) % 2 for r in narrow)} odd-C")


if __name__ == "__main__":
    main()
