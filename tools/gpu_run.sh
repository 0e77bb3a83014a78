#!/usr/bin/env bash
# One device call: environment, the GPU test suite, and the bench tables. Writes logs under $OUT.
# Usage (on the GPU machine, repo root): bash tools/gpu_run.sh [tests|bench|all] [extra bench args]
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
what=${1:-all}; shift || true
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
} 2>&1 | tee "$OUT/env.txt"
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest tests -q -p no:cacheprovider -x --durations=15 2>&1 | tee "$OUT/pytest.txt" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m convwgrad.cli bench --no-progress "$@" 2>&1 | tee "$OUT/bench.txt"
fi
