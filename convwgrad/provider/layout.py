"""Tensor-side helpers shared by the core, the families and the tools: dtypes, layouts, the current device."""

from __future__ import annotations

import torch

#: torch dtypes of the problem's short dtype names
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def to_layout(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor`` (N, C, *spatial) in ``layout``: "contiguous", or "channels_last" (channels
    innermost, for 1-D, 2-D and 3-D alike)."""
    if layout != "channels_last":
        return tensor.contiguous()
    if tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    if tensor.dim() == 5:
        return tensor.contiguous(memory_format=torch.channels_last_3d)
    return tensor.transpose(1, 2).contiguous().transpose(1, 2)


def layout_of(tensor: torch.Tensor) -> str:
    """The problem layout a tensor is stored in: "channels_last" when channels are innermost
    (and it is not also plain contiguous), else "contiguous" (other strides are copied)."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(tensor.dim())
    if fmt is not None and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=fmt):
        return "channels_last"
    if tensor.dim() == 3 and tensor.stride(1) == 1 and tensor.shape[1] > 1 and tensor.shape[2] > 1:
        return "channels_last"
    return "contiguous"


#: torch's own getter behind torch.cuda.current_device() (which adds a Python frame and a lazy-init
#: check: ~1 us of host time a call on the H200 machine); CUDA is initialised by the time a bound
#: launch or the dispatcher's workspace asks it on a CUDA device
current_cuda_device = getattr(torch._C, "_cuda_getDevice", None) or (lambda: torch.cuda.current_device())
