"""Problem descriptions as text: ``N=32,C=144,H=56,W=56,k=3,s=1,g=144`` and CSV rows of the same keys."""

from __future__ import annotations

import csv

from .provider.problem import ConvProblem

#: keys a shape may give; spatial dims are whichever of D, H, W (or L for 1-D) appear
KEYS = {
    "name": "label for tables",
    "N": "batch",
    "C": "input channels",
    "K": "output channels (default C)",
    "g": "groups (default 1; alias G)",
    "D": "input depth (3-D)",
    "H": "input height (2-D, 3-D)",
    "W": "input width",
    "L": "input length (1-D; alias of W alone)",
    "k": "filter size, every dim (or kd, kh, kw)",
    "s": "stride (default 1)",
    "p": "padding (default d*(k-1)//2, 'same' for odd k at stride 1)",
    "d": "dilation (default 1)",
    "dtype": "fp16, bf16 or fp32",
    "layout": "contiguous or channels_last",
}


def _get(fields: dict, *names, default=None):
    for name in names:
        if name in fields and fields[name] not in ("", None):
            return fields[name]
    return default


def problem_from_fields(fields: dict, *, dtype: str = "bf16", layout: str = "channels_last") -> tuple[str, ConvProblem]:
    """(label, problem) from a dict of the KEYS above; values may be strings."""
    unknown = set(fields) - set(KEYS) - {"G", "kd", "kh", "kw"}
    if unknown:
        raise ValueError(f"unknown shape keys {sorted(unknown)}; known: {', '.join(KEYS)}, kd, kh, kw")
    num = lambda *names, default=None: (  # noqa: E731
        int(v) if (v := _get(fields, *names, default=default)) is not None else None
    )
    spatial = [(key, num(key)) for key in ("D", "H", "W")]
    spatial = [(key, v) for key, v in spatial if v is not None]
    if not spatial and num("L") is not None:
        spatial = [("W", num("L"))]
    if not spatial:
        raise ValueError(f"shape {fields} gives no spatial size (D, H, W or L)")
    k = num("k")
    filter_size = []
    for key, _ in spatial:
        size = num(f"k{key.lower()}", default=k)
        if size is None:
            raise ValueError(f"shape {fields} gives no filter size for {key} (k or k{key.lower()})")
        filter_size.append(size)
    dilation = num("d", default=1)
    stride = num("s", default=1)
    padding_given = num("p")
    padding = [padding_given if padding_given is not None else dilation * (f - 1) // 2 for f in filter_size]
    batch, channels = num("N"), num("C")
    if batch is None or channels is None:
        raise ValueError(f"shape {fields} needs N and C")
    problem = ConvProblem.build(
        batch=batch,
        groups=num("g", "G", default=1),
        in_channels=channels,
        out_channels=num("K", default=channels),
        input_size=[v for _, v in spatial],
        filter_size=filter_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        dtype=_get(fields, "dtype", default=dtype),
        layout=_get(fields, "layout", default=layout),
    )
    label = _get(fields, "name", default=None) or ",".join(f"{k}={v}" for k, v in fields.items() if k != "name")
    return label, problem


def parse_shape(text: str, **defaults) -> tuple[str, ConvProblem]:
    fields = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"shape item {item!r} is not KEY=VALUE (in {text!r})")
        fields[key.strip()] = value.strip()
    return problem_from_fields(fields, **defaults)


def read_csv(path: str, **defaults) -> list[tuple[str, ConvProblem]]:
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if any(v.strip() for v in r.values() if v)]
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            out.append(problem_from_fields({k.strip(): (v or "").strip() for k, v in row.items()}, **defaults))
        except ValueError as exc:
            raise ValueError(f"{path}:{line}: {exc}") from None
    return out


#: The demo set `convwgrad bench` runs with no arguments, on a GPU: depthwise
#: layers of published networks at N=32, plus one grouped (cpg=4) layer.
GPU_DEMO = (
    "name=mobilenetv2-144x56,N=32,C=144,H=56,W=56,k=3,s=1,g=144",
    "name=mobilenetv2-144x56-s2,N=32,C=144,H=56,W=56,k=3,s=2,g=144",
    "name=efficientnet-240x28-k5,N=32,C=240,H=28,W=28,k=5,s=1,g=240",
    "name=convnext-t-96x56-k7,N=32,C=96,H=56,W=56,k=7,s=1,g=96",
    "name=resnext-g32-cpg4,N=32,C=128,H=56,W=56,k=3,s=1,g=32",
    "name=conformer-conv1d-k31,N=32,C=256,L=512,k=31,g=256",
)
#: The demo set through the Triton interpreter (no GPU): the same kinds of layer, tiny.
CPU_DEMO = (
    "name=depthwise-3x3,N=2,C=8,H=8,W=8,k=3,g=8",
    "name=grouped-cpg4,N=2,C=8,K=8,H=6,W=6,k=3,g=2",
    "name=conv1d-k31,N=2,C=4,L=40,k=31,g=4",
)
