"""A patched model under DistributedDataParallel with NCCL on two GPUs (issue 12): torchrun starts
ddp_nccl_worker.py on two ranks; patched DDP's gradients equal unpatched DDP's on the same data
for three bf16 channels_last steps, no_sync() accumulation equals one larger step, and every rank
holds the same all-reduced gradients. Skipped without two GPUs. The step times go to stdout
(pytest -s) and to the worker's JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import convwgrad

from torch_models import LARGE_FILTER_FAMILY

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (NCCL DDP across them)")]

#: relative Frobenius error of a bf16 autocast gradient, patched against unpatched (each rounds
#: dW to bf16 once; LayerNorm's parameters see the largest differences)
BF16_TOL = 3e-2
#: (model, samples a rank, image size, a family that must have run in the patched backward)
MODELS = {
    # timm, as issue 12 asks; on an H200 every grouped layer is planned for cuDNN, so this case
    # tests DDP around patched layers (route, hooks, gradient layout), not convwgrad's kernels
    "convnext_tiny": ("convnext_tiny", 16, 224, None),
    "replknet": ("replknet", 8, 56, LARGE_FILTER_FAMILY),  # 31x31 depthwise: convwgrad's kernels under NCCL
}


def run_ranks(tmp_path: Path, model: str, batch: int, size: int) -> dict:
    worker = Path(__file__).with_name("ddp_nccl_worker.py")
    repo = Path(convwgrad.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
               str(tmp_path), "--model", model, "--batch", str(batch), "--size", str(size)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return json.loads((tmp_path / "ddp_result.json").read_text())


@pytest.mark.parametrize("name", MODELS)
def test_patched_ddp_under_nccl_matches_unpatched_ddp(tmp_path, name):
    model, batch, size, family = MODELS[name]
    if model == "convnext_tiny":
        pytest.importorskip("timm")
    result = run_ranks(tmp_path, model, batch, size)
    print(f"\n{name}: DDP x{result['world']} {result['backend']} on {result['device']}: step ms "
          f"{result['step_ms']}, patched/unpatched gradient error by step {result['steps']}, "
          f"no_sync {result['no_sync']}, families {result['families']}")
    assert result["backend"] == "nccl" and result["world"] == 2
    for step, row in enumerate(result["steps"]):
        assert row["max_rel_err"] <= BF16_TOL, f"step {step}: {row}"
    assert result["no_sync"]["max_rel_err"] <= BF16_TOL, result["no_sync"]
    assert result["same_on_ranks"], "the ranks' all-reduced patched gradients differ"
    if family is not None:
        assert family in result["families"], f"{family} did not run: {result['families']}"
