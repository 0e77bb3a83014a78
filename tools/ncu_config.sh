#!/usr/bin/env bash
# Nsight Compute on one config of one layer (GPU machine): the stage-1 kernel's throughput,
# occupancy, cache hit rates and stall reasons, for the kernel issues' "profile before another
# design". Arguments are tools/run_config.py's; the report goes to $OUT/ncu_<kernel>.txt.
# Usage: bash tools/ncu_config.sh --shape N=64,C=96,H=56,W=56,k=7,g=96 --family wgrad_direct [...]
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
ncu --kernel-name regex:'_wgrad_(direct|shifted|merged|splitk)' --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section LaunchStats --section SchedulerStats \
    python3 tools/run_config.py "$@" 2>&1 | tee "$OUT/ncu_$(date +%H%M%S).txt" | grep -vE "^==PROF==" | tail -120
