"""The aten channels_last family: torch's own convolution backward, on channels_last copies of
NCHW operands.

For an NCHW depthwise layer in bf16 or fp32, torch does not call cuDNN: its own NCHW depthwise
kernel computes dW (aten's ``use_cudnn_depthwise`` takes cuDNN for NCHW only in fp16, undilated,
C >= 32, and where its workload table says so; channels_last always goes to cuDNN), and that kernel
runs a median 33x above the memory floor on the H200 against cuDNN channels_last's 6-12x (issue
10). Copying input and grad_output to channels_last first costs two reads and two writes of
memory-bound traffic (about twice the floor) and hands the layer to cuDNN's channels_last
kernels. Whether that is faster is a measurement per class of layer, so the family is opt-in
(selectors/routing.py): pinned, benched and swept everywhere, routed only where it was measured
faster. ``explain`` names the copies in the family's description and kernel list. The copies are
temporaries the size of the layer's input and grad_output, freed when the call returns: a routed
layer's backward holds that much more memory while it runs.

A 1-D layer (N, C, L) is computed as the 2-D layer (N, C, 1, L) it is a view of (torch's own 1-D
convolutions take that route too). No Triton kernel: one module, like the aten fallback (the jit
and launcher layers are empty).
"""

from __future__ import annotations

import attrs
import torch

from convwgrad.provider.blocks.aten import bind_whole_call, whole_call_reasons
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.reference import aten_weight_grad_call
from convwgrad.provider.spec import BoundLaunch, KernelSpec

FAMILY = "aten_channels_last"
#: Above the aten fallback, below every Triton family: only the order among opt-in families
#: where more than one was measured faster for a class.
PRIORITY = 1
#: torch's channels_last memory format by spatial rank (a 1-D layer runs as 2-D with height 1)
MEMORY_FORMATS = {1: torch.channels_last, 2: torch.channels_last, 3: torch.channels_last_3d}
KERNELS = ("aten.copy_ (to channels_last)", "aten.convolution_backward")


#: Backends the copies are for: cuDNN's channels_last kernels. On the CPU, oneDNN's channels_last
#: depthwise dW was found wrong where its NCHW path is right (fuzzing, torch 2.13, session 6: bf16
#: 2-D with dilation in height and stride 1 in ~15% of random shapes, relative error >= 1.3; fp32/bf16
#: 3-D whose padding reaches past the input, garbage), and a CPU gains nothing from the copies.
BACKENDS = ("cuda",)


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = whole_call_reasons(problem, spec)
    if problem.layout != "contiguous":
        reasons.append(f"layout={problem.layout}: the operands are not NCHW, aten takes them as they are")
    if target.backend not in BACKENDS:
        reasons.append(f"backend={target.backend}: the copies exist to reach cuDNN's channels_last kernels; on the "
                       f"CPU oneDNN's channels_last depthwise dW is wrong for bf16 dilated and 3-D padded layers "
                       f"where its NCHW path is right")
    if problem.dtype == "fp16" and (any(d > 1 for d in problem.dilation) or problem.symmetric_padding is None):
        reasons.append("dtype=fp16 with dilation or asymmetric padding: cuDNN's channels_last fp16 dW measured "
                       "8x the error of torch's own NCHW path there (H200, 1.7e-3 against 2.1e-4, session 6)")
    return reasons


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype)]


def as_2d(problem):
    """The 2-D problem of a 1-D one: a height-1 input and filter, unit stride and dilation there."""
    return attrs.evolve(problem, input_size=(1, *problem.input_size), filter_size=(1, *problem.filter_size),
                        stride=(1, *problem.stride), padding=((0, 0), *problem.padding),
                        dilation=(1, *problem.dilation))


def relayout_call(problem):
    """``f(input, grad_output) -> dW``: both copied to channels_last, then aten's dW (its weight
    stand-in takes the layout from them). dW comes back in the weight's channels_last strides;
    for a depthwise (C, 1, k, k) weight those differ from contiguous only in the size-1 dim."""
    memory_format = MEMORY_FORMATS[problem.spatial_dims]
    if problem.spatial_dims == 1:
        backward = aten_weight_grad_call(as_2d(problem))

        def weight_grad(input, grad_output):  # (N, C, L) -> (N, C, 1, L): views, then the copies
            dw = backward(input.unsqueeze(2).contiguous(memory_format=memory_format),
                          grad_output.unsqueeze(2).contiguous(memory_format=memory_format))
            return dw.squeeze(2)  # (K, cpg, 1, k) -> (K, cpg, k): a view

        return weight_grad
    backward = aten_weight_grad_call(problem)

    def weight_grad(input, grad_output):
        return backward(input.contiguous(memory_format=memory_format),
                        grad_output.contiguous(memory_format=memory_format))

    return weight_grad


def launch(problem, spec, target, input, grad_output, out, workspace) -> list[str]:
    out.copy_(relayout_call(problem)(input, grad_output))
    return list(KERNELS)


def prepare(problem, spec, target, input, grad_output, out) -> BoundLaunch:
    """dW as aten computed it when it is contiguous (a depthwise weight's is), else a contiguous
    copy; written into ``out`` when one is given."""
    return bind_whole_call(relayout_call(problem), KERNELS)


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="torch's aten.convolution_backward on channels_last copies of NCHW operands (cuDNN's "
                "channels_last kernels instead of torch's NCHW depthwise kernel); opt-in",
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    launch=launch,
    prepare=prepare,
)
