"""The provider core: problem spec, hookspecs, plugin manager, planning, dispatch, reference, AOT.

Plugins and selectors depend on this package; it never imports theirs.
"""

from .aot import CompiledKernel, IsaSummary, summarize_isa
from .dispatch import (LaunchRecord, conv1d_weight, conv2d_weight, conv3d_weight, dispatch_conv_grouped,
                       record_launches, release_workspaces)
from .manager import build_plugin_manager, families, get_plugin_manager, use_plugin_manager
from .plan import Explanation, NoCandidateError, Plan, candidates, explain, plan
from .problem import ConvProblem
from .reference import reference_weight_grad, relative_error
from .spec import KernelSpec, Tile, Verdict
from .target import PROFILES, TargetInfo, current_target, hip_probe

__all__ = [
    "CompiledKernel", "ConvProblem", "Explanation", "IsaSummary", "KernelSpec", "LaunchRecord",
    "NoCandidateError", "PROFILES", "Plan", "TargetInfo", "Tile", "Verdict", "build_plugin_manager",
    "candidates", "conv1d_weight", "conv2d_weight", "conv3d_weight", "current_target",
    "dispatch_conv_grouped", "explain", "families", "get_plugin_manager", "hip_probe", "plan",
    "record_launches", "reference_weight_grad", "relative_error", "release_workspaces", "summarize_isa",
    "use_plugin_manager",
]
