"""DistributedDataParallel and FSDP2 over patched nets on the CPU: two ranks (ddp_worker.py, gloo,
kernels through the Triton interpreter) against unpatched DDP and against one process on the
global batch; no_sync() accumulation. The ranks run once for the module (about 15 s); their
results come back as files, and a rank that fails fails every test here with its traceback."""

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import convwgrad
from convwgrad.provider.reference import relative_error

from ddp_worker import EXPECTED_FAMILIES, GLOBAL_BATCH, global_batch, make_net

WORLD = 2
FP32_TOL = 1e-5
#: the whole two-rank run; a rank still running then is killed and the tests fail
RUN_TIMEOUT_S = 180


def start_ranks(out_dir: Path, port: int) -> list[subprocess.Popen]:
    worker = Path(__file__).with_name("ddp_worker.py")
    repo = Path(convwgrad.__file__).resolve().parents[1]  # the children import this convwgrad
    # TRITON_INTERPRET=1 before the rank imports triton: convwgrad's kernels on CPU tensors (also
    # on a machine with a GPU, where the suite itself leaves it unset)
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = []
    for rank in range(WORLD):
        log = open(out_dir / f"rank{rank}.log", "w")
        procs.append(subprocess.Popen([sys.executable, str(worker), str(rank), str(WORLD), str(port), str(out_dir)],
                                      env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def wait_for(procs, out_dir: Path) -> None:
    """Wait for every rank; on a failure or the timeout, kill the others and fail with each
    rank's exit status and output (the failing rank's traceback)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if all(p.returncode == 0 for p in procs):
        return
    report = [f"--- rank {rank}: exit status {p.returncode}\n{(out_dir / f'rank{rank}.log').read_text()[-6000:]}"
              for rank, p in enumerate(procs)]
    pytest.fail("DDP ranks failed (a killed rank was still running at the timeout or after another failed):\n"
                + "\n".join(report), pytrace=False)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each rank's results; the rendezvous store is hosted here, on a port the OS picks."""
    out_dir = tmp_path_factory.mktemp("ddp")
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, timeout=timedelta(seconds=60), wait_for_workers=False)
    procs = start_ranks(out_dir, store.port)
    wait_for(procs, out_dir)
    del store
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(WORLD)]


def single_process_grads(seed: int, samples=slice(None), scale=1.0) -> dict:
    """One stock step on ``samples`` of the global batch (all by default), the loss times
    ``scale``, in float64: what DDP's averaged (or a rank's local) gradients equal."""
    model = make_net(batchnorm=False).double()
    x, target = global_batch(seed)
    (F.cross_entropy(model(x[samples].double()), target[samples]) * scale).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def assert_close(got: dict, want: dict, what: str, tol=FP32_TOL):
    assert got.keys() == want.keys()
    errors = {name: relative_error(got[name], want[name].double()) for name in want}
    bad = {name: f"{err:.2e}" for name, err in errors.items() if not err <= tol}
    assert not bad, f"{what}: {bad}"


def assert_same_on_every_rank(results: list[dict], what: str):
    """The all-reduce left every rank the same average, bitwise, although the shards differ."""
    first = results[0]
    for rank, other in enumerate(results[1:], 1):
        differ = [name for name in first if not torch.equal(first[name], other[name])]
        assert not differ, f"{what}: rank {rank} differs from rank 0 on {differ}"


def test_patched_ddp_matches_unpatched_ddp_with_batchnorm(ranks):
    for rank, result in enumerate(ranks):
        assert result["bn"]["families"] == EXPECTED_FAMILIES, f"rank {rank}: {result['bn']['families']}"
        assert_close(result["bn"]["patched"], result["bn"]["stock"], f"rank {rank}: patched vs unpatched DDP")
    # convwgrad's dW reached DDP's all-reduce like any gradient: every rank holds the same average
    assert_same_on_every_rank([r["bn"]["patched"] for r in ranks], "patched")
    assert_same_on_every_rank([r["bn"]["stock"] for r in ranks], "unpatched")


def test_patched_ddp_step_equals_one_process_on_the_global_batch(ranks):
    want = single_process_grads(seed=2)
    for rank, result in enumerate(ranks):
        assert result["step"]["families"] == EXPECTED_FAMILIES, f"rank {rank}: {result['step']['families']}"
        assert_close(result["step"]["patched"], want, f"rank {rank}: DDP vs one process")
    assert_same_on_every_rank([r["step"]["patched"] for r in ranks], "DDP step")


def test_no_sync_accumulation_equals_one_step_on_the_concatenated_batch(ranks):
    want = single_process_grads(seed=2)
    for rank, result in enumerate(ranks):
        assert result["no_sync"]["families"] == EXPECTED_FAMILIES * 2, f"rank {rank}: {result['no_sync']['families']}"
        assert_close(result["no_sync"]["patched"], want, f"rank {rank}: no_sync accumulation vs one process")
        assert_close(result["no_sync"]["patched"], result["step"]["patched"], f"rank {rank}: accumulation vs DDP step")
    assert_same_on_every_rank([r["no_sync"]["patched"] for r in ranks], "after the synced micro-batch")
    # under no_sync() each rank's first micro-batch gradients stayed local (not averaged)
    for rank, result in enumerate(ranks):
        first_sample = rank * (GLOBAL_BATCH // WORLD)  # the rank's shard starts there
        local = single_process_grads(seed=2, samples=slice(first_sample, first_sample + 1), scale=0.5)
        assert_close(result["no_sync"]["first"], local, f"rank {rank}: first micro-batch under no_sync")


def test_fsdp2_patched_step_equals_one_process_on_the_global_batch(ranks):
    want = single_process_grads(seed=2)
    for rank, result in enumerate(ranks):
        fsdp = result["fsdp"]
        assert fsdp["sharded"], f"rank {rank}: parameters not sharded"
        assert fsdp["families"] == EXPECTED_FAMILIES, f"rank {rank}: {fsdp['families']}"
        assert_close(fsdp["patched"], want, f"rank {rank}: FSDP2 vs one process")
        # what the README's "patch first" rests on
        assert fsdp["patched_late"] == [], (
            f"rank {rank}: patch() after fully_shard() switched {fsdp['patched_late']} of {fsdp['late_classes']}")


def test_channels_last_ddp_step_equals_one_process_on_the_global_batch(ranks):
    want = single_process_grads(seed=2)
    for rank, result in enumerate(ranks):
        assert result["channels_last"]["families"] == EXPECTED_FAMILIES, f"rank {rank}"
        assert_close(result["channels_last"]["patched"], want, f"rank {rank}: channels_last DDP vs one process")


def test_channels_last_gradients_have_their_parameters_strides(ranks):
    """dW comes back in the weight's layout, as stock torch's: DDP's reducer flags a gradient whose
    strides differ from its bucket view ('Grad strides do not match bucket view strides')."""
    for rank, result in enumerate(ranks):
        mismatched = {name: strides for name, strides in result["channels_last"]["strides"].items()
                      if strides[0] != strides[1]}
        assert not mismatched, f"rank {rank}: (parameter, gradient) strides differ: {mismatched}"
        flagged = [w for w in result["channels_last"]["warnings"] if "strides" in w]
        assert not flagged, f"rank {rank}: {flagged}"
