#!/usr/bin/env bash
# One device call of the kernel issues (10, 11) and the integration issue (9): the backward host
# diagnosis, both new families' variants against cuDNN, the UniRepLKNet step under the current
# routing, and the new families' GPU tests. Each part has its own time limit; logs under $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CONVWGRAD_GENERATED_DIR=$OUT/generated
timeout 40 python3 tools/backward_host.py 2>&1 | grep -v Warn | tee "$OUT/backward_host.txt"
timeout 170 python3 tools/family_bench.py --variants tools/variants_direct.py:variants --layouts channels_last \
  --budget-s 140 --json "$OUT/direct.json" \
  --shape N=64,C=96,H=56,W=56,k=7,g=96 --shape N=32,C=144,H=56,W=56,k=3,g=144 \
  --shape N=64,C=768,H=7,W=7,k=7,g=768 --shape N=32,C=672,H=14,W=14,k=5,g=672 \
  --shape N=64,C=384,H=14,W=14,k=7,g=384 --shape N=64,C=96,H=56,W=56,k=7,g=96,layout=contiguous \
  --shape N=32,C=512,L=1024,k=4,g=512 2>&1 | grep -v Warn | tee "$OUT/direct.txt"
timeout 170 python3 tools/family_bench.py --variants tools/variants_shifted.py:variants --layouts channels_last \
  --budget-s 140 --json "$OUT/shifted.json" \
  --shape N=16,C=128,H=56,W=56,k=31,g=128 --shape N=16,C=128,H=56,W=56,k=31,g=128,layout=contiguous \
  --shape N=16,C=1024,H=7,W=7,k=13,g=1024 --shape N=32,C=160,H=28,W=28,k=7,d=2,g=160 \
  --shape N=16,C=512,H=14,W=14,k=27,g=512 --shape N=32,C=512,L=2048,k=31,g=512 2>&1 | grep -v Warn | tee "$OUT/shifted.txt"
timeout 80 python3 tools/step_bench.py --models unireplknet_t:32 --layouts channels_last --rounds 3 \
  --json "$OUT/steps.json" 2>&1 | grep -v Warn | tee "$OUT/steps.txt"
OMP_NUM_THREADS=4 timeout 100 python3 -m pytest tests/plugins/wgrad_direct tests/plugins/wgrad_shifted tests/provider/test_warm_path_gpu.py \
  -m gpu -q -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_gpu_new.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -30
