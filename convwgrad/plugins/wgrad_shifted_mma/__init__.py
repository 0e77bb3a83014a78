"""The shifted-MMA family: large-filter depthwise dW as a shifted GEMM on mma.sync, every tap
computed once, the operands read shifted from shared memory.

Registration layer; the kernel is CUDA C++ in ``kernels.cu`` (its header derives the GEMM and the
staging), the gate, split policy, run-time build and launches in :mod:`.launcher` (which says why
C++ and not Triton or Gluon).

Per channel, dW (KH x KW) is D[kx, ky] = sum over (n, input row, output column) of
A[kx, j] * B[j, ky], A the input row shifted by kx (Hankel), B the grad_output rows shifted by ky
(Toeplitz), both staged once a row in a warp's shared memory: one warp a channel, 8 mma.sync a row
and 16 columns. The Triton shifted family (``wgrad_shifted``) forms the same operands element by
element from global memory and is bound by that (session 3's ncu).

Admitted: 2-D depthwise, stride 1, filters up to 32 x 32, rows up to 64 wide, dilation where the
ring and the staged row hold the dilated filter (DH x (KH - 1) <= 31, OW rounded up to 16 +
DW x (KW - 1) <= 160); 1-D depthwise, stride 1, undilated, filters up to 128 taps (the sequence
kernels: the taps folded as kx + 16 ky into one m16 x n8 tile, the sequence staged in circular
buffers); bf16 and fp16, operands of any strides (NCHW, channels_last and views are read in place),
CUDA sm_80+ with cuda-bindings (NVRTC and the driver API). Everything else is refused with its
reason (stride and wider rows are not written yet).

Routing: opt-in (``selectors.routing.OPT_IN_FAMILIES``); the router gives it the class it was
measured faster on, per layout (``routing.SHIFTED_MMA_MEASURED``: NCHW from 13x13, channels_last from 27x27),
and the dilated layers the router takes from cuDNN by multiply-adds on rows of >= 14 columns
(``routing.SHIFTED_MMA_DILATED_MEASUREMENT``).
"""

from __future__ import annotations

from convwgrad.provider.blocks.launch import needs_wide_index
from convwgrad.provider.family import FamilyPlugin, split_policy_of_problem
from convwgrad.provider.spec import KernelSpec, Tile

from . import launcher

FAMILY = "wgrad_shifted_mma"
#: Above the Triton shifted family (15) and below merged (20); opt-in besides, so the priority only
#: orders it among the opt-in families the measured rules name: where this one's rule and the
#: shifted family's both fire, this one (measured faster on every layer of its class) comes first.
PRIORITY = 16
#: The kernel's fixed tile: 32 kx (two m16) x 32 ky (four n8) x 16 columns a step, 4 warps a CTA.
TILE = Tile(block_m=32, block_n=32, block_k=16, num_warps=launcher.WARPS, num_stages=1)


def candidate_specs(problem, target, group_merge=None) -> list[KernelSpec]:
    return [KernelSpec(family=FAMILY, dtype=problem.dtype, tile=TILE, group_merge=group_merge or 1,
                       wide_index=needs_wide_index(problem))]


def not_supported_reasons(problem, spec, target) -> list[str]:
    reasons = launcher.mma_available(problem, spec, target)
    if spec.group_merge != 1:
        reasons.append(f"group_merge={spec.group_merge}: one channel a warp (no channel blocks)")
    if spec.tile != TILE:
        reasons.append(f"tile={spec.tile}: the kernel's tile is fixed ({TILE})")
    return reasons


plugin = FamilyPlugin(
    name=FAMILY,
    priority=PRIORITY,
    description="depthwise 2-D dW of large filters (and 1-D, filters up to 128 taps) as a shifted GEMM on mma.sync "
                "(CUDA C++ by NVRTC): input rows and a ring of grad_output rows staged in shared memory, every tap "
                "once; deterministic split",
    splits_k=True,
    max_split_k=launcher.shared.MAX_SPLIT_K,
    candidate_specs=candidate_specs,
    not_supported_reasons=not_supported_reasons,
    workspace_nbytes=launcher.workspace_nbytes,
    grids=launcher.grids,
    launch=launcher.launch,
    choose_split_k=split_policy_of_problem(launcher.choose_split_k),
    prepare=launcher.prepare,
    compile=launcher.compile_kernels,
)
