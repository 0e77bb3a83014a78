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
    "L": "input length (1-D only; alias of W alone)",
    "k": "filter size, every dim (or kd, kh, kw)",
    "s": "stride (default 1)",
    "p": "padding (default d*(k-1)//2, 'same' for odd k at stride 1)",
    "d": "dilation (default 1)",
    "dtype": "fp16, bf16 or fp32",
    "layout": "contiguous or channels_last",
}
#: per-dim filter sizes, each beside the spatial key it sizes; they override k for that dim
PER_DIM_FILTER_KEYS = {"kd": "D", "kh": "H", "kw": "W"}
#: another name of a key, and the key it names
ALIASES = {"G": "g"}
_NUMERIC = ("N", "C", "K", "g", "G", "D", "H", "W", "L", "k", "kd", "kh", "kw", "s", "p", "d")


def _given(fields: dict, name: str):
    value = fields.get(name)
    return None if value in ("", None) else value


def _int_fields(fields: dict) -> dict:
    """The numeric keys' values as ints; a value that is not one is refused by its key."""
    out = {}
    for key in _NUMERIC:
        value = _given(fields, key)
        if value is None:
            continue
        try:
            out[key] = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={value!r} is not an integer") from None
    return out


def problem_from_fields(fields: dict, *, dtype: str = "bf16", layout: str = "channels_last") -> tuple[str, ConvProblem]:
    """(label, problem) from a dict of the KEYS above; values may be strings.

    Errors name the key at fault, not the shape: parse_shape() and read_csv() say which shape.
    """
    unknown = set(fields) - set(KEYS) - set(ALIASES) - set(PER_DIM_FILTER_KEYS)
    if unknown:
        raise ValueError(f"unknown shape keys {sorted(unknown)}; known: {', '.join(KEYS)}, "
                         f"{', '.join(PER_DIM_FILTER_KEYS)}, {', '.join(ALIASES)}")
    num = _int_fields(fields)
    for alias, key in ALIASES.items():
        if alias in num and key in num and num[alias] != num[key]:
            raise ValueError(f"{key}={num[key]} and its alias {alias}={num[alias]} disagree: give one")
    spatial = [(key, num[key]) for key in ("D", "H", "W") if key in num]
    if "L" in num:
        if spatial:
            raise ValueError(f"L is the length of a 1-D shape; this one also gives "
                             f"{', '.join(key for key, _ in spatial)}: give L alone, or D, H, W")
        spatial = [("W", num["L"])]
    if not spatial:
        raise ValueError("no spatial size: give D, H, W (3-D), H, W (2-D) or L (1-D)")
    dims = {key for key, _ in spatial}
    stray = [name for name, dim in PER_DIM_FILTER_KEYS.items() if name in num and dim not in dims]
    if stray:
        raise ValueError(f"{', '.join(stray)} sizes a dim this shape does not have (it has {', '.join(sorted(dims))})")
    filter_size = []
    for key, _ in spatial:
        size = num.get(f"k{key.lower()}", num.get("k"))
        if size is None:
            raise ValueError(f"no filter size for {key}: give k (every dim) or k{key.lower()}")
        filter_size.append(size)
    dilation = num.get("d", 1)
    padding = [num["p"] if "p" in num else dilation * (f - 1) // 2 for f in filter_size]
    missing = [key for key in ("N", "C") if key not in num]
    if missing:
        raise ValueError(f"no {' or '.join(missing)}: a shape needs N (batch) and C (input channels)")
    problem = ConvProblem.build(
        batch=num["N"],
        groups=num.get("g", num.get("G", 1)),
        in_channels=num["C"],
        out_channels=num.get("K", num["C"]),
        input_size=[v for _, v in spatial],
        filter_size=filter_size,
        stride=num.get("s", 1),
        padding=padding,
        dilation=dilation,
        dtype=_given(fields, "dtype") or dtype,
        layout=_given(fields, "layout") or layout,
    )
    label = _given(fields, "name") or ",".join(f"{k}={v}" for k, v in fields.items() if k != "name")
    return label, problem


def parse_shape(text: str, **defaults) -> tuple[str, ConvProblem]:
    """(label, problem) of ``N=32,C=144,H=56,W=56,k=3,g=144``; a ValueError names the shape and the key."""
    fields = {}
    try:
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"item {item!r} is not KEY=VALUE")
            if key in fields:
                raise ValueError(f"{key} is given twice ({key}={fields[key]}, {key}={value.strip()})")
            fields[key] = value.strip()
        return problem_from_fields(fields, **defaults)
    except ValueError as exc:
        raise ValueError(f"shape {text!r}: {exc}") from None


def read_csv(path: str, **defaults) -> list[tuple[str, ConvProblem]]:
    """(label, problem) per non-blank row of a CSV whose header names KEYS; a ValueError names file and line."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = [name.strip() for name in reader.fieldnames or ()]
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise ValueError(f"{path}:1: column {', '.join(repeated)} appears twice in the header")
        rows = [(reader.line_num, r) for r in reader if any(v.strip() for v in r.values() if isinstance(v, str))]
    out = []
    for line, row in rows:
        try:
            if None in row:  # csv puts a row's cells beyond the header under the key None
                raise ValueError(f"{len(row[None])} more cells than the header's {len(header)} columns")
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
