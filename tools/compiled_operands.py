"""What the convwgrad::conv_weight op receives inside a compiled model: per call, the input's and
grad_output's shapes, strides and layouts, and the family planned eagerly and for graph launches.

    python tools/compiled_operands.py --models convnext_tiny:64,efficientnet_b0:128 [--mode reduce-overhead]

Under torch.compile inductor chooses the strides of the gradient it hands the op; the op copies a
grad_output that is not in the input's layout (match_layouts) before its kernels run, a copy the
eager per-layer timings (tools/step_bench.py --layers) do not see. This tool shows whether it happens.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convwgrad  # noqa: E402
from convwgrad.frameworks import torch_ops  # noqa: E402
from convwgrad.provider.layout import layout_of  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import make_model  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="convnext_tiny:64")
    parser.add_argument("--mode", default=None, help="a torch.compile mode (default: inductor's default)")
    args = parser.parse_args()
    seen = []
    inner = torch_ops._dispatch_conv_weight

    def recording(input, weight_size, grad_output, *rest, **kwargs):
        seen.append((tuple(input.shape), input.stride(), layout_of(input), grad_output.stride(), layout_of(grad_output)))
        return inner(input, weight_size, grad_output, *rest, **kwargs)

    torch_ops._dispatch_conv_weight = recording
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        model, shape, classes = make_model(name)
        model = convwgrad.patch(model.cuda().to(memory_format=torch.channels_last))
        x = torch.randn(int(batch), *shape, device="cuda").contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, classes, (int(batch),), device="cuda")
        compiled = torch.compile(model, mode=args.mode)
        seen.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(x), target)
        loss.backward()
        torch.cuda.synchronize()
        print(f"{name} {batch}: {len(seen)} op calls; grad_output in another layout than the input: "
              f"{sum(1 for s in seen if s[2] != s[4])}")
        for shape_, xs, xl, dys, dyl in seen:
            print(f"  x {shape_} {xl:<14} dy strides {dys} {dyl}")


if __name__ == "__main__":
    main()
