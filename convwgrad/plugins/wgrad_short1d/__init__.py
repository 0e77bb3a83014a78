"""The short-1-D family: depthwise dW of short 1-D filters (2-9 taps: Mamba's causal k = 4, small
Conformer-style and TCN filters) on CUDA cores, at the memory's pace.

Registration layer; the kernel is CUDA C++ in ``kernels.cu`` (its header derives the index maps),
the gate, split policy, run-time build and launches in :mod:`.launcher` (which says why C++ and not
Triton).

Per channel, dW[k] = sum over (n, m) of X[n, m] * dY[n, m + pad - dil k]: one warp a channel, a lane
8 adjacent positions of both operands in 16-byte vectors, the shifted grad_output elements from its
neighbour lanes by shuffles, TAPS fp32 accumulators a lane; no shared memory. Splits are equal runs
of the (image, 256-position chunk) index, reduced by the shared ordered stage 2 (deterministic).

Admitted: 1-D depthwise, stride 1, up to 9 taps, left padding <= 8 and dil x (taps - 1) - left <= 8
(a lane's reach stays within its neighbours' vectors), bf16 and fp16, CUDA sm_70+ with cuda-bindings.
Operands of any strides run (in place); 16-byte loads need unit stride along the sequence and rows on
multiples of 8 elements (contiguous NCHW with L % 8 == 0), other strides take the element-wise kernel.

Routing: opt-in (``selectors.routing.OPT_IN_FAMILIES``); the router gives it the class it was measured
faster on (``routing.SHORT1D_MEASURED_TAPS``: bf16 NCHW, 3-4 taps, undilated; H100: Mamba k=4 2.07x merged,
3.15x cuDNN); elsewhere pin it with ``plan(problem, family="wgrad_short1d")``.
"""

from __future__ import annotations

from convwgrad.provider.blocks.launch import needs_wide_index
from convwgrad.provider.family import FamilyPlugin, split_policy_of_problem
from convwgrad.provider.spec import KernelSpec, Tile

from . import launcher

FAMILY = "wgrad_short1d"
#: Above the shifted-MMA family (16) and below merged (20); opt-in besides, so the priority only orders
#: it among the opt-in families whose measured rules fire on one problem (the shifted-MMA family's 1-D
#: class starts at 15 taps, this one ends at 9: none today).
PRIORITY = 17
#: The kernel's fixed tile: 4 channels (warps) a CTA, 256 positions a step.
TILE = Tile(block_m=launcher.WARPS, block_n=1, block_k=launcher.CHUNK, num_warps=launcher.WARPS, num_stages=1)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype, tile=TILE, group_merge=group_merge or 1,
                       wide_index=needs_wide_index(problem))]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.short1d_available(problem, spec, target)
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: one channel a warp (no channel blocks)")
    if spec.tile != TILE:
        reasons.append(f"tile={spec.tile}: the kernel's tile is fixed ({TILE})")
    return reasons


def layout_note(problem, spec, target) -> str:
    if problem.layout == "channels_last":
        return (" (channels_last input: admitted, but a lane's positions are a channel stride apart, so the "
                "element-wise kernel runs; NCHW with L % 8 == 0 takes 16-byte loads)")
    return ""


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise 1-D dW of short filters (2-9 taps) on CUDA cores (CUDA C++ by NVRTC): a warp a channel, "
                "16-byte vectors a lane, the taps' shifts by warp shuffles; deterministic split",
    splits_k=True,
    max_split_k=launcher.shared.MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    admission_note=layout_note,
    workspace_nbytes=launcher.workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    choose_split_k=split_policy_of_problem(launcher.choose_split_k),
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
