"""Drop-ins for ``torch.nn.functional.conv1d/2d/3d`` whose weight gradient comes from convwgrad
when ``groups > 1`` (torch's own call otherwise, or inside ``convwgrad.disabled()``)."""

from .frameworks.patching import conv1d, conv2d, conv3d, grouped_conv

__all__ = ["conv1d", "conv2d", "conv3d", "grouped_conv"]
