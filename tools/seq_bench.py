"""1-D layers: the shifted-MMA family's sequence kernels beside cuDNN, merged and the Triton shifted family, side
by side in one process (GPU machine).

Per layer and layout: cuDNN (``aten.convolution_backward`` as autograd calls it), the planned config and the
merged and Triton shifted families (through ``dispatch_conv_grouped``), then the sequence kernels by their bound
launch: each step length of ``launcher.SEQUENCE_STEPS``, the kernel for any strides and (channels_last) the
cooperative one, at the family's split degree and at half and twice it. Every config is first checked against
the float64 reference on fresh random inputs into a NaN-poisoned dW and workspace (every element written), then
timed by CUDA-graph replay (kernel time) and as an eager loop. The floor: bytes (input + grad_output + dW once)
over 4.25 TB/s (H200; an H100's 3.35 makes it 1.27x longer).

Usage (GPU machine, repo root): python tools/seq_bench.py [--layers conformer,mamba] [--layouts contiguous,channels_last]
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

import convwgrad  # noqa: E402
from convwgrad.bench import make_inputs, tolerance  # noqa: E402
from convwgrad.plugins.wgrad_shifted_mma import launcher  # noqa: E402
from convwgrad.provider import ConvProblem  # noqa: E402
from convwgrad.provider.reference import reference_weight_grad, relative_error  # noqa: E402
from family_bench import cudnn_call, floor_us  # noqa: E402
from step_bench import _eager_time_us, _graph_time_us  # noqa: E402

FAMILY = "wgrad_shifted_mma"
LAYERS = {  # bf16; (batch, channels, length, filter, padding: both sides, or ((left, right),))
    "conformer": (32, 256, 512, 31, 15),
    "conformer-k15": (32, 512, 256, 15, 7),
    "long-k31": (32, 512, 2048, 31, 15),
    # Mamba's nn.Conv1d pads 3 each side and cuts the output to L: grad_output rows are L + 3 long
    "mamba": (16, 1024, 2048, 4, 3),
    "mamba-b8-d2560": (8, 2560, 1024, 4, 3),
    "mamba-b4-d5120": (4, 5120, 2048, 4, 3),
    # the same filter padded causally only (rows of L both): what a fused causal conv1d sees
    "mamba-causal": (16, 1024, 2048, 4, ((3, 0),)),
    "tcn-k3": (32, 512, 1024, 3, 1),
    "hyena-k128": (8, 768, 1024, 128, 64),
}
#: The short-1-D family's filters (issue 10's Mamba row): its split sweep runs on these; the shifted-MMA
#: family's sequence-kernel sweep on the others (its planned config runs on every layer).
SHORT_FAMILY = "wgrad_short1d"
SHORT_MAX_TAPS = 9


def _check_and_time(run, problem, x, dy, reference, nbytes, spec):
    out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device="cuda")
    workspace = torch.empty(max(nbytes, 4), dtype=torch.uint8, device="cuda")
    workspace.view(torch.float32).fill_(float("nan"))
    kernel = run(x, dy, out, workspace)
    torch.cuda.synchronize()
    err = relative_error(out, reference)
    row = {"error": err, "kernel": kernel}
    if torch.isnan(out).any() or not err <= tolerance(spec):
        row["failed"] = True
        return row
    row["graph_us"] = _graph_time_us(lambda: run(x, dy, out, workspace))
    row["eager_us"] = _eager_time_us(lambda: run(x, dy, out, workspace))
    return row


def measure(name, layout):
    batch, channels, length, k, padding = LAYERS[name]
    p = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(length,), filter_size=k,
                          padding=padding, dtype="bf16", layout=layout)
    x, dy = make_inputs(p, "cuda")
    reference = reference_weight_grad(p, x, dy, device="cuda")
    rows = []
    cudnn = cudnn_call(p, x, dy)
    rows.append({"config": "cudnn", "error": relative_error(cudnn(), reference), "graph_us": _graph_time_us(cudnn),
                 "eager_us": _eager_time_us(cudnn)})
    pinned = (("planned", {}), ("merged", {"family": "wgrad_merged"}), ("shifted", {"family": "wgrad_shifted"}),
              ("direct", {"family": "wgrad_direct"}), ("shifted-mma", {"family": FAMILY}),
              ("short1d", {"family": SHORT_FAMILY}))
    for label, pins in pinned:
        try:
            chosen = convwgrad.plan(p, **pins)
        except ValueError as exc:
            rows.append({"config": label, "refused": str(exc).splitlines()[0][:120]})
            continue

        def run(x, dy, out, workspace, chosen=chosen):
            convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen, out=out)
            return chosen.kernel_name

        row = {"config": f"{label} ({chosen.family} spk{chosen.split_k})",
               **_check_and_time(run, p, x, dy, reference, 0, chosen.spec)}
        with convwgrad.record_launches() as log:   # the stage-1 kernel that ran (the short-1-D family's loads)
            convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen)
        row["kernel"] = log[0].kernels[0] if log and log[0].kernels else row.get("kernel")
        rows.append(row)
    if k <= SHORT_MAX_TAPS:
        planned = convwgrad.plan(p, family=SHORT_FAMILY).split_k
        for split_k in sorted({max(2, planned // 2), min(1024, 2 * planned), min(1024, 3 * planned)} - {planned}):
            chosen = convwgrad.plan(p, family=SHORT_FAMILY, split_k=split_k)

            def run(x, dy, out, workspace, chosen=chosen):
                convwgrad.dispatch_conv_grouped(p, x, dy, plan=chosen, out=out, workspace=workspace)
                return chosen.kernel_name

            rows.append({"config": f"short1d spk{split_k}",
                         **_check_and_time(run, p, x, dy, reference, chosen.workspace_nbytes, chosen.spec)})
        return {"layer": name, "layout": layout, "problem": p.describe(), "floor_us": floor_us(p), "rows": rows}
    planned = convwgrad.plan(p, family=FAMILY).split_k
    for split_k in sorted({planned, max(2, planned // 2), min(1024, 2 * planned)}):
        chosen = convwgrad.plan(p, family=FAMILY, split_k=split_k)
        for step in launcher.SEQUENCE_STEPS:
            for channels in ((0, 4) if layout == "channels_last" else (0,)):
                bound = launcher.prepare(p, chosen.spec, chosen.target, x, dy, None, cooperative_channels=channels,
                                         sequence_step=step)

                def run(x, dy, out, workspace, bound=bound):
                    bound.run(x, dy, out, workspace)
                    return bound.kernels[0]

                rows.append({"config": f"seq s{step} {'cl4' if channels else 'any'} spk{split_k}",
                             **_check_and_time(run, p, x, dy, reference, chosen.workspace_nbytes, chosen.spec)})
    return {"layer": name, "layout": layout, "problem": p.describe(), "floor_us": floor_us(p), "rows": rows}


def show(result):
    base = result["rows"][0]["graph_us"]
    print(f"\n{result['layer']} [{result['layout']}] {result['problem']}  floor {result['floor_us']:.1f} us", flush=True)
    for r in result["rows"]:
        if "refused" in r:
            print(f"  {r['config']:<34} refused: {r['refused']}")
        elif r.get("failed"):
            print(f"  {r['config']:<34} FAILED error={r['error']:.2e} {r.get('kernel')}")
        else:
            print(f"  {r['config']:<34} graph {r['graph_us']:8.1f} us {base / r['graph_us']:7.2f}x cuDNN  "
                  f"eager {r['eager_us']:8.1f} us  {r['graph_us'] / result['floor_us']:6.1f}x floor  "
                  f"err {r['error']:.1e}  {r.get('kernel', '')}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--layouts", default="contiguous,channels_last")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    results = []
    for name in args.layers.split(","):
        for layout in args.layouts.split(","):
            try:
                results.append(measure(name, layout))
            except Exception as exc:  # one layer's failure must not cost the others' numbers
                print(f"\n{name} [{layout}] FAILED: {type(exc).__name__}: {exc}"[:400], flush=True)
                continue
            show(results[-1])
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
