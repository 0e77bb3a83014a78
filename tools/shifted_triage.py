"""Which 1-D NCHW shapes fault in the shifted family (GPU machine): each case in its own process,
since a CUDA fault poisons the process. Prints ok / the error per (filter, padding, layout)."""

import subprocess
import sys

CASE = """
import torch, convwgrad
from convwgrad.provider.problem import ConvProblem
from convwgrad.bench import make_inputs
from convwgrad.provider.reference import reference_weight_grad, relative_error
p = ConvProblem.build(batch=4, groups=512, in_channels=512, input_size=(2048,), filter_size={k}, padding={pad},
                      dtype="bf16", layout="{layout}")
x, dy = make_inputs(p, "cuda")
chosen = convwgrad.plan(p, family="wgrad_shifted", split_k={split})
dw = convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen)
torch.cuda.synchronize()
print(chosen.kernel_name, "err %.1e" % relative_error(dw, reference_weight_grad(p, x, dy, device="cuda")))
"""

for k, pad, layout, split in [(65, 32, "contiguous", 1), (65, 31, "contiguous", 1), (65, ((32, 31),), "contiguous", 1),
                              (33, 16, "contiguous", 1), (31, 15, "contiguous", 1), (65, 32, "channels_last", 1),
                              (65, 32, "contiguous", 8)]:
    run = subprocess.run([sys.executable, "-c", CASE.format(k=k, pad=pad, layout=layout, split=split)],
                         capture_output=True, text=True, env={"CUDA_LAUNCH_BLOCKING": "1", **__import__("os").environ})
    tail = (run.stdout.strip() or run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "?")[:160]
    print(f"k={k} pad={pad} {layout} split={split}: {'ok' if run.returncode == 0 else 'FAIL'} {tail}", flush=True)
