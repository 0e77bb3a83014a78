"""One rank of test_ddp.py's DistributedDataParallel runs on the CPU (gloo), and the nets and data
both sides share.

    python ddp_worker.py RANK WORLD_SIZE STORE_PORT OUT_DIR

The parent starts each rank with TRITON_INTERPRET=1 in its environment (so convwgrad's kernels run
in the Triton interpreter on CPU tensors) and hosts the rendezvous store on 127.0.0.1:STORE_PORT.
The rank writes its gradients and launch log to OUT_DIR/rank{RANK}.pt; an exception exits
non-zero with its traceback on stderr, which the parent reports.
"""

import copy
import sys
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

#: samples of one step, over all ranks; each rank takes an equal contiguous shard
GLOBAL_BATCH = 4
CHANNELS, SIZE, CLASSES = 16, 7, 5
#: a collective waiting longer than this (a rank died) fails instead of hanging
TIMEOUT = timedelta(seconds=60)


class Net(nn.Module):
    """Depthwise 3x3 (C = 16: the merged family on the interpreter), optional BatchNorm, ReLU, a
    grouped 3x3 with bias (cpg = 2: the split-K family), pointwise 1x1, a pooled head."""

    def __init__(self, batchnorm: bool):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, groups=CHANNELS, bias=False),
            nn.BatchNorm2d(CHANNELS) if batchnorm else nn.Identity(),
            nn.ReLU(),
            nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, groups=CHANNELS // 2),
            nn.ReLU(),
            nn.Conv2d(CHANNELS, 8, 1),
        )
        self.head = nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


#: the families patched nets run in backward (last layer first)
EXPECTED_FAMILIES = ["wgrad_splitk", "wgrad_merged"]


def make_net(batchnorm: bool) -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in the parent
    return Net(batchnorm)


def global_batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(GLOBAL_BATCH, CHANNELS, SIZE, SIZE, generator=g), torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=g)


def shard(tensor, rank: int, world: int):
    per_rank = GLOBAL_BATCH // world
    return tensor[rank * per_rank:(rank + 1) * per_rank]


def grads(model) -> dict:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def run(rank: int, world: int, port: int, out_dir: Path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import convwgrad
    from convwgrad.provider.target import current_target

    assert current_target(torch.device("cpu")).backend == "interpreter", "TRITON_INTERPRET=1 was not set"
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    result = {}
    try:
        def step(model, x, target, scale=1.0):
            (F.cross_entropy(model(x), target) * scale).backward()

        # 1. with BatchNorm: patched DDP against unpatched DDP, same weights and shard
        x, target = (shard(t, rank, world) for t in global_batch(1))
        stock = make_net(batchnorm=True)
        patched = convwgrad.patch(copy.deepcopy(stock))
        step(DDP(stock), x, target)
        with convwgrad.record_launches() as log:
            step(DDP(patched), x, target)
        result["bn"] = dict(stock=grads(stock), patched=grads(patched), families=[r.family for r in log])

        # 2. without BatchNorm: one patched DDP step (the parent compares it with one process on the global batch)
        x, target = (shard(t, rank, world) for t in global_batch(2))
        model = convwgrad.patch(make_net(batchnorm=False))
        with convwgrad.record_launches() as log:
            step(DDP(model), x, target)
        result["step"] = dict(patched=grads(model), families=[r.family for r in log])

        # 3. the same step as two micro-batches, the first under no_sync(), each loss halved
        model = convwgrad.patch(make_net(batchnorm=False))
        ddp = DDP(model)
        micro = [(x[i:i + 1], target[i:i + 1]) for i in range(len(x))]
        assert len(micro) == 2
        with convwgrad.record_launches() as log:
            with ddp.no_sync():
                step(ddp, *micro[0], scale=0.5)
            first = grads(model)  # local: no all-reduce yet
            step(ddp, *micro[1], scale=0.5)
        result["no_sync"] = dict(first=first, patched=grads(model), families=[r.family for r in log])

        # 4. the same step with a channels_last net and batch: every gradient's strides, and DDP's
        # warnings (its reducer checks each gradient against its bucket view's strides)
        model = convwgrad.patch(make_net(batchnorm=False)).to(memory_format=torch.channels_last)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with convwgrad.record_launches() as log:
                step(DDP(model), x.contiguous(memory_format=torch.channels_last), target)
        result["channels_last"] = dict(
            patched=grads(model), families=[r.family for r in log], warnings=[str(w.message) for w in caught],
            strides={name: (p.stride(), p.grad.stride()) for name, p in model.named_parameters()})

        # 5. FSDP2: each convolution and the root fully_shard()ed after patching, the same step
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        model = convwgrad.patch(make_net(batchnorm=False))
        for module in model.features:
            if isinstance(module, nn.Conv2d):
                fully_shard(module)
        fully_shard(model)
        sharded = all(isinstance(p, DTensor) and p.to_local().shape[0] < p.shape[0] for p in model.parameters())
        with convwgrad.record_launches() as log:
            step(model, x, target)
        result["fsdp"] = dict(patched={name: p.grad.full_tensor() for name, p in model.named_parameters()},
                              families=[r.family for r in log], sharded=sharded)
        # patching after fully_shard(): the convolutions it wrapped are now FSDP subclasses
        # (FSDPConv2d), which patch() leaves alone
        late = make_net(batchnorm=False)
        for module in late.features:
            if isinstance(module, nn.Conv2d):
                fully_shard(module)
        fully_shard(late)
        result["fsdp"]["patched_late"] = convwgrad.patched_modules(convwgrad.patch(late))
        result["fsdp"]["late_classes"] = sorted({type(m).__name__ for m in late.features if isinstance(m, nn.Conv2d)})
    finally:
        dist.destroy_process_group()
    torch.save(result, out_dir / f"rank{rank}.pt")


if __name__ == "__main__":
    rank, world, port, out = sys.argv[1:]
    run(int(rank), int(world), int(port), Path(out))
