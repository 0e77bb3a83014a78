"""The staged family: depthwise dW of small 2-D filters on CUDA cores, input rows staged in
shared memory by asynchronous copies (Gluon).

Registration layer; the kernel is in :mod:`.kernels`, the gate, work units, grids and split policy
in :mod:`.launcher`. Built for the 3x3-9x9 depthwise layers of MobileNet/EfficientNet/ConvNeXt in
channels_last, where cuDNN runs 6-12x above the floor. Opt-in (``selectors.routing.OPT_IN_FAMILIES``):
its kernel was measured faster than cuDNN on two layers only (H200, session 7, as
tools/proto_staged.py: ConvNeXt 56x56 C96 7x7 N=64 1.21x, MobileNetV2 56x56 C144 3x3 N=32 1.77x in
kernel time), not yet inside models, so the router gives it nothing; pin it with
``plan(problem, family="wgrad_staged")``. Its copies are NVIDIA's cp.async (sm_80+) or CDNA4's
global -> LDS loads (gfx950: compiled on the CPU with Triton 3.9, never run on hardware); it refuses
other targets and the interpreter (Gluon has none) with that reason.
"""

from __future__ import annotations

from convwgrad.provider.blocks.checks import tiled_kernel_reasons
from convwgrad.provider.blocks.launch import MAX_SPLIT_K, needs_wide_index, workspace_nbytes
from convwgrad.provider.family import FamilyPlugin
from convwgrad.provider.hookspecs import hookimpl
from convwgrad.provider.spec import KernelSpec, Tile

from . import launcher

FAMILY = "wgrad_staged"
#: Below the direct family (5); opt-in besides.
PRIORITY = 4
#: The default tile, as measured best on the H200 (session 7, tools/proto_staged.py, two layers):
#: one warp (32 channels), 8 output columns a thread, 16-row work units (14 measured; tiles are
#: powers of two), copies one step ahead for filters of 5 rows or more (7x7: 9 KB of rings, every
#: program resident) and two steps ahead for 3x3 (23.9 against 25.6 us on MobileNetV2's layer).
DEFAULT_WARPS = 1
DEFAULT_COLUMNS = 8
DEFAULT_ROWS = 16
DEEP_COPIES_BELOW_ROWS = 5


def tile_for(problem, target) -> Tile:
    """One warp of one channel a thread (64 channels on gfx950's wave64: not measured there)."""
    stages = 3 if problem.filter_size[0] < DEEP_COPIES_BELOW_ROWS else 2
    return Tile(block_m=target.warp_size * DEFAULT_WARPS, block_n=DEFAULT_COLUMNS, block_k=DEFAULT_ROWS,
                num_warps=DEFAULT_WARPS, num_stages=stages)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype, tile=tile_for(problem, target), group_merge=group_merge or 1,
                       wide_index=needs_wide_index(problem))]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.staged_available(problem, spec, target)
    if reasons:  # the grids and units of a spec the gate refuses mean nothing
        return reasons
    return tiled_kernel_reasons(problem, spec, target, launcher.grids, launcher.MAX_BLOCKS,
                                launcher.reduction_steps, min_block=1)


class StagedFamilyPlugin(FamilyPlugin):
    """FamilyPlugin plus the family's own split policy (launcher.choose_split_k) for its specs."""

    @hookimpl
    def convwgrad_choose_split_k(self, problem, spec, target, base_programs, max_split_k):
        if self._mine(spec) and spec.tile is not None:
            return launcher.choose_split_k(problem, spec, target, base_programs, max_split_k)
        return None


plugin = StagedFamilyPlugin(
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
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
