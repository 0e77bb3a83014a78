"""The aten channels_last family (NCHW operands copied for cuDNN's channels_last kernels) as a
family_bench variant, beside torch's default NCHW path (family_bench's "cudnn" row on NCHW
inputs) and the planned family:

    python tools/family_bench.py --variants tools/variants_relayout.py:variants --layouts contiguous ...
"""

from __future__ import annotations

FAMILY = "aten_channels_last"


def variants(problem) -> list[tuple[str, dict]]:
    if problem.layout != "contiguous":
        return []
    return [("channels_last copies + aten", {"family": FAMILY})]
