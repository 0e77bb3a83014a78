"""One rank of a patched model under DistributedDataParallel, launched by torchrun (issue 12):
a timm model (or a block stack of torch_models.py, or UniRepLKNet/RepLKNet), bf16 autocast,
channels_last, against the same model unpatched under DDP, on the same data.

    torchrun --standalone --nproc_per_node 2 tests/frameworks/ddp_nccl_worker.py OUT_DIR \
        [--model convnext_tiny] [--batch 16] [--size 224] [--steps 3] [--timed-steps 10]

On GPUs (NCCL; NCCL's own environment, such as NVLink multicast being off, is left as it is):
each rank takes LOCAL_RANK's GPU. Without one (a CPU smoke run) it takes gloo and the CPU; set
TRITON_INTERPRET=1 for convwgrad's kernels there. Rank 0 writes OUT_DIR/ddp_result.json:
  steps       per step, the largest relative Frobenius error of a patched gradient against the
              unpatched one, and which parameter (both models start every step from the same
              weights, the unpatched model's after its SGD step, on the same shards)
  no_sync     two half-batches, the first under no_sync(), each loss halved, against one step on
              the whole batch (patched), largest relative error (BatchNorm in eval mode there)
  same_on_ranks  whether every rank held bitwise the same patched gradients after every step's all-reduce
  families    the dW families convwgrad launched in the last patched step
  step_ms     median step time (CUDA events, or wall time on the CPU), patched and unpatched, steps
              alternated
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))

TIMEOUT = timedelta(seconds=300)


def build_model(name: str):
    """(model, classes): a timm model by name, else a stack or network of torch_models.py."""
    from torch_models import NETWORKS, STACKS, build

    if name in STACKS:
        return build(name)[0], 10
    if name in NETWORKS:
        torch.manual_seed(0)
        return NETWORKS[name](), 1000
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False), 1000


def in_channels(model) -> int:
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    return first.in_channels


def relative_errors(got: dict, want: dict) -> tuple[float, str]:
    """The largest relative Frobenius error over the parameters (inf for a non-finite one), and where."""
    from convwgrad.provider.reference import relative_error

    errors = {name: relative_error(got[name], ref) for name, ref in want.items()}
    where = max(errors, key=errors.get)
    return errors[where], where


def grads(model) -> dict:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--model", default="convnext_tiny")
    parser.add_argument("--batch", type=int, default=16, help="samples a rank takes a step")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timed-steps", type=int, default=10)
    args = parser.parse_args()

    import convwgrad

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if on_gpu else "gloo", timeout=TIMEOUT)
    try:
        stock, classes = build_model(args.model)
        stock = stock.to(device).to(memory_format=torch.channels_last)
        patched = convwgrad.patch(copy.deepcopy(stock))
        channels = in_channels(stock)
        g = torch.Generator().manual_seed(1234)  # the same global data on every rank; each takes its shard
        data = [(torch.randn(world * args.batch, channels, args.size, args.size, generator=g),
                 torch.randint(0, classes, (world * args.batch,), generator=g)) for _ in range(args.steps)]

        def shard(x, t):
            lo = rank * args.batch
            x = x[lo:lo + args.batch].to(device).contiguous(memory_format=torch.channels_last)
            return x, t[lo:lo + args.batch].to(device)

        def loss_of(model, x, t, scale=1.0):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return F.cross_entropy(model(x), t) * scale

        ddp_stock, ddp_patched = DDP(stock), DDP(patched)
        opt_stock = torch.optim.SGD(stock.parameters(), lr=1e-3)
        opt_patched = torch.optim.SGD(patched.parameters(), lr=1e-3)
        result = {"model": args.model, "world": world, "device": torch.cuda.get_device_name() if on_gpu else "cpu",
                  "backend": dist.get_backend(), "steps": []}
        for x, t in data:
            x, t = shard(x, t)
            loss_of(ddp_stock, x, t).backward()
            with convwgrad.record_launches() as log:
                loss_of(ddp_patched, x, t).backward()
            worst, where = relative_errors(grads(patched), grads(stock))
            result["steps"].append({"max_rel_err": worst, "param": where})
            result["families"] = sorted({r.family for r in log})
            mine = grads(patched)
            gathered = [None] * world
            dist.all_gather_object(gathered, {k: v.cpu() for k, v in mine.items()})
            same = all(torch.equal(gathered[0][k], other[k]) for other in gathered[1:] for k in mine)
            result["same_on_ranks"] = result.get("same_on_ranks", True) and same  # every step's
            opt_stock.step()
            opt_patched.step()
            opt_stock.zero_grad(set_to_none=True)
            opt_patched.zero_grad(set_to_none=True)
            # the next step from the same weights again: each step's comparison is then of convwgrad's
            # dW alone (steps apart, a gradient that nearly cancels, such as a BatchNorm weight's
            # on small maps, amplifies the drift: 1.19 at the second step of a 8x8 CPU smoke run)
            with torch.no_grad():
                patched.load_state_dict(stock.state_dict())

        # no_sync() accumulation of two half batches against one step on the whole batch (patched);
        # BatchNorm in eval mode there: in training mode two half-batch statistics are not the
        # whole batch's, so the two would differ without convwgrad (0.38 on the replknet stack)
        has_batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in patched.modules())
        if has_batchnorm:
            patched.eval()
        result["no_sync_batchnorm_eval"] = has_batchnorm
        x, t = shard(*data[0])
        half = args.batch // 2
        loss_of(ddp_patched, x, t).backward()
        whole = grads(patched)
        patched.zero_grad(set_to_none=True)
        with ddp_patched.no_sync():
            loss_of(ddp_patched, x[:half], t[:half], 0.5).backward()
        loss_of(ddp_patched, x[half:], t[half:], 0.5).backward()
        worst, where = relative_errors(grads(patched), whole)
        result["no_sync"] = {"max_rel_err": worst, "param": where}
        patched.zero_grad(set_to_none=True)
        patched.train()

        # step time, patched and unpatched alternated
        times = {"stock": [], "patched": []}
        arms = {"stock": (ddp_stock, opt_stock), "patched": (ddp_patched, opt_patched)}
        for i in range(args.timed_steps + 2):
            for label, (model, opt) in arms.items():
                if on_gpu:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                loss_of(model, x, t).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if on_gpu:
                    torch.cuda.synchronize()
                if i >= 2:
                    times[label].append((time.perf_counter() - start) * 1e3)
        result["step_ms"] = {label: statistics.median(v) for label, v in times.items()}
        if rank == 0:
            Path(args.out_dir, "ddp_result.json").write_text(json.dumps(result, indent=1))
            print(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
