"""The staged family: depthwise dW of small 2-D filters on CUDA cores, input rows staged in
shared memory by asynchronous copies (Gluon).

Registration layer; the kernel is in :mod:`.kernels`, the gate, work units, grids and split policy
in :mod:`.launcher`. Built for the 3x3-9x9 depthwise layers of MobileNet/EfficientNet/ConvNeXt in
channels_last, where cuDNN runs 6-12x above the floor. Opt-in (``selectors.routing.OPT_IN_FAMILIES``):
its kernel is faster than cuDNN on most of those layers in kernel time (H200, sessions 8-9, inside
MobileNetV2 and EfficientNet-B0 at N=128 on every depthwise layer, 1.07-2.5x, and on ConvNeXt-T's 7x7
layers but its 7x7-plane ones), so the router gives it that class where the kernels are launched from
CUDA graphs (``routing.STAGED_GRAPH_TAPS``: reduce-overhead training steps 1.020x MobileNetV2, 1.056x
EfficientNet-B0, 1.001x ConvNeXt-T). An eager call's host time (~100 us in autograd's engine thread)
outweighed the saving in the host-bound eager steps measured (0.88-0.98x), so eager calls get nothing;
pin it with ``plan(problem, family="wgrad_staged")``. Its copies are NVIDIA's cp.async (sm_80+) or CDNA4's
global -> LDS loads (gfx950: compiled on the CPU with Triton 3.9, never run on hardware); it refuses
other targets and the interpreter (Gluon has none) with that reason.
"""

from __future__ import annotations

from convwgrad.provider.blocks.checks import tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.spec import KernelSpec, Tile

from . import launcher

FAMILY = "wgrad_staged"
#: Below the direct family (5); opt-in besides.
PRIORITY = 4
#: One warp (32 channels) a program; the rest of the default tile is launcher.default_tile_shape's.
DEFAULT_WARPS = 1


def tile_for(problem, target) -> Tile:
    """One warp of one channel a thread (64 channels on gfx950's wave64: not measured there)."""
    return Tile(block_m=target.warp_size * DEFAULT_WARPS, num_warps=DEFAULT_WARPS,
                **launcher.default_tile_shape(problem))


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype, tile=tile_for(problem, target), group_merge=group_merge or 1,
                       wide_index=needs_wide_index(problem))]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.staged_available(problem, spec, target)
    if reasons:  # the grids and units of a spec the gate refuses mean nothing
        return reasons
    return tiled_kernel_reasons(problem, spec, target, launcher.grids, launcher.MAX_BLOCKS,
                                launcher.reduction_steps, min_block=1, powers_of_two=False)


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise 2-D dW of small filters on CUDA cores: channels_last rows staged in shared memory "
                "by cp.async (Gluon), taps unrolled on fp32 registers; deterministic split",
    splits_k=True,
    max_split_k=MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    workspace_nbytes=workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    choose_split_k=launcher.choose_split_k,
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
