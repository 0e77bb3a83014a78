"""Issue 11: the shifted-MMA family (convwgrad/plugins/wgrad_shifted_mma) timed beside cuDNN (NCHW and
channels_last), the Triton shifted family and the router's choice, on large-filter layers in NCHW.

Session 11 wrote the kernel here first (variant 1, one CTA a channel: 223 us on RepLKNet-31B's 31x31
layer; variant 2, one warp a channel: 117 us; git 9776001 holds both); it is the family's
kernel now, and its numerics are tests/plugins/wgrad_shifted_mma/test_shifted_mma_gpu.py's.

Usage (GPU machine, repo root):
  python tools/proto_shifted_mma.py [--json F] [--only LAYER ...] [--layouts contiguous channels_last]
  # graph replay / eager us a call; in channels_last the family's stage-1 kernels side by side: the one
  # for any strides (mma_any) and the cooperative one loading 4 channels a vector (mma_cl4; session 13,
  # which also timed 8 channels, git 275dc2e). Session 12 timed copying channels_last to NCHW first: slower on every layer
  # (git c52017f has that arm).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

BENCH_LAYERS = [  # (name, N, C, H, k[, dilation]): RepLKNet-31B's large filters at batch 32, UniRepLKNet's 13x13,
    # SLaK, and UniRepLKNet-T's dilated branches (padding dilation x (k - 1) / 2: the same size out)
    ("replk31b-56-c128-k31", 32, 128, 56, 31), ("replk31b-28-c256-k29", 32, 256, 28, 29),
    ("replk31b-14-c512-k27", 32, 512, 14, 27), ("replk31b-7-c1024-k13", 32, 1024, 7, 13),
    ("unirep-14-c320-k13", 32, 320, 14, 13), ("slak-56-c96-k31", 16, 96, 56, 31),
    ("replk31b-56-c128-k31-n8", 8, 128, 56, 31), ("unirep-28-c160-k13-n4", 4, 160, 28, 13),
    ("unirep-14-c320-k7-d2", 32, 320, 14, 7, 2), ("unirep-7-c640-k3-d5", 32, 640, 7, 3, 5),
    ("unirep-28-c160-k3-d3", 32, 160, 28, 3, 3), ("unirep-56-c80-k3-d4", 32, 80, 56, 3, 4),
]

#: Issue 10's small filters on rows of >= 14 columns (ConvNeXt-T N=64 7x7, EfficientNet-B0 and MobileNetV2 N=128),
#: timed only where --only names them: does the 16 x 16 tap tile beat torch's NCHW path and the aten
#: channels_last family (NCHW copied for cuDNN) there? Not measured yet (session 14 wrote the list).
SMALL_FILTER_LAYERS = [
    ("convnext-56-c96-k7-n64", 64, 96, 56, 7), ("convnext-28-c192-k7-n64", 64, 192, 28, 7),
    ("convnext-14-c384-k7-n64", 64, 384, 14, 7), ("effb0-28-c240-k5-n128", 128, 240, 28, 5),
    ("effb0-14-c672-k5-n128", 128, 672, 14, 5), ("mbv2-56-c144-k3-n128", 128, 144, 56, 3),
]


def bench(json_path, only=None, layouts=("contiguous",)):
    import torch

    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; bf16; us: graph replay / eager; "
          f"mma_any / mma_cl4: the family's prepared call with its kernel for any strides / the "
          f"cooperative channels_last kernel (4 channels a vector load)")
    for layout in layouts:
        for name, n, c, h, k, *dilation in BENCH_LAYERS + [l for l in SMALL_FILTER_LAYERS if only and l[0] in only]:
            if only and name not in only:
                continue
            rows.append(_bench_layer(layout, name, n, c, h, k, *dilation))
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(rows, indent=1))


def _bench_layer(layout, name, n, c, h, k, d=1):
    import torch

    import convwgrad
    from convwgrad.plugins.wgrad_shifted_mma import launcher
    from convwgrad.provider import ConvProblem, reference_weight_grad, relative_error
    from convwgrad.provider.dispatch import dispatch_conv_grouped
    from convwgrad.provider.plan import NoCandidateError
    sys.path.insert(0, os.path.dirname(__file__))
    from step_bench import _eager_time_us, _graph_time_us

    p = d * (k - 1) // 2
    problem = ConvProblem.build(batch=n, groups=c, in_channels=c, input_size=(h, h), filter_size=k, padding=p,
                                dilation=d, dtype="bf16", layout=layout)
    g = torch.Generator(device="cuda").manual_seed(c + k)
    x = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
    dy = torch.randn(n, c, h, h, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.empty(c, 1, k, k, device="cuda", dtype=torch.bfloat16)
    xcl, dycl = x.to(memory_format=torch.channels_last), dy.to(memory_format=torch.channels_last)
    xl, dyl = (xcl, dycl) if layout == "channels_last" else (x, dy)

    def cudnn(x=x, dy=dy):
        return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [p, p], [d, d], False, [0, 0], c,
                                                   [False, True, False])[1]

    plans = {}
    try:   # the Triton shifted family, where it admits the layer
        plans["shifted"] = convwgrad.plan(problem, "cuda", family="wgrad_shifted")
    except NoCandidateError as exc:
        print(f"{layout[:4]} {name}: no wgrad_shifted arm ({exc})", flush=True)
    plans["routed"] = convwgrad.plan(problem, "cuda")
    mma_plan = convwgrad.plan(problem, "cuda", family="wgrad_shifted_mma")
    workspace = torch.empty(mma_plan.workspace_nbytes, dtype=torch.uint8, device="cuda")
    variants = {"mma_any": 0}
    if layout == "channels_last":
        variants.update({f"mma_cl{ch}": ch for ch in launcher.COOPERATIVE_CHANNEL_COUNTS})
    bound = {label: launcher.prepare(problem, mma_plan.spec, mma_plan.target, xl, dyl, None, cooperative_channels=ch)
             for label, ch in variants.items()}
    calls = {"cudnn_nchw": cudnn, "cudnn_cl": lambda: cudnn(xcl, dycl),
             **{label: (lambda b=b: b.run(xl, dyl, None, workspace)) for label, b in bound.items()},
             **{label: (lambda chosen=chosen: dispatch_conv_grouped(problem, xl, dyl, plan=chosen))
                for label, chosen in plans.items()}}
    ref = reference_weight_grad(problem, x, dy, device=x.device) if n * c * h * h <= 2 ** 24 else None
    row = dict(layer=name, layout=layout, N=n, C=c, H=h, k=k, dilation=d, routed_family=plans["routed"].family)
    for label, b in bound.items():
        calls[label]()
        row[f"{label}_kernel"] = b.kernels[0]
    if ref is not None:
        for label in (*variants, "routed"):
            if label in calls:
                out = calls[label]()
                row[f"{label}_err"] = relative_error(out, ref)
    for label, fn in calls.items():
        row[label] = (_graph_time_us(fn), _eager_time_us(fn))
    floor = max(2 * (x.numel() + dy.numel()) / 4.25e12, 2 * n * c * h * h * k * k / 700e12) * 1e6
    row["floor_us"] = floor
    mma = min(row[label][0] for label in variants)
    baseline = "cudnn_cl" if layout == "channels_last" else "cudnn_nchw"
    errs = ", ".join(f"{key[:-4]} {value:.1e}" for key, value in row.items() if key.endswith("_err"))
    shifted = f"{row['shifted'][0] / mma:5.2f}x shifted" if "shifted" in row else "no shifted arm"
    print(f"{layout[:4]} {name:24s} floor {floor:6.1f} | "
          + " | ".join(f"{lab} {row[lab][0]:7.1f}/{row[lab][1]:7.1f}" for lab in calls)
          + f" | best mma {row[baseline][0] / mma:5.1f}x {baseline}, {shifted}, "
          f"{mma / floor:5.1f}x floor; routed {row['routed_family']}" + (f"; err {errs}" if errs else ""), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--only", action="append", help="this layer only (repeatable)")
    ap.add_argument("--layouts", nargs="+", default=["contiguous"], choices=["contiguous", "channels_last"])
    a = ap.parse_args()
    bench(a.json, a.only, tuple(a.layouts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
