"""Why a prepared call does or does not launch its Triton kernels directly (GPU machine).

Prints the Triton release, whether the direct launch is supported, the launch hooks set, and how
many of ten warm calls of a merged (two-stage) layer went through ``JITFunction.run``."""

import torch
import triton

import convwgrad
from convwgrad.plugins.wgrad_merged.kernels import _wgrad_merged_kernel
from convwgrad.provider.blocks import launch

print("triton", triton.__version__, "direct_launch_supported", launch.direct_launch_supported())
if launch._triton_knobs is not None:
    runtime = launch._triton_knobs.runtime
    print("launch_enter_hook", runtime.launch_enter_hook, "launch_exit_hook", runtime.launch_exit_hook)
runs = []
jit_run = _wgrad_merged_kernel.run
_wgrad_merged_kernel.run = lambda *a, **k: runs.append(1) or jit_run(*a, **k)
x = torch.randn(32, 256, 256, device="cuda", dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
dy = torch.randn_like(x)
for _ in range(10):
    convwgrad.conv1d_weight(x, (256, 1, 31), dy, 1, 15, 1, 256)
torch.cuda.synchronize()
print(f"JIT runs in 10 warm calls: {len(runs)}")
import gc  # noqa: E402

for item in gc.get_objects():
    if isinstance(item, launch.KernelLaunch):
        print(f"KernelLaunch {item.kernel.__name__}: device_index={item.device_index} "
              f"compiled={type(item.compiled).__name__} grid={item.grid}")
