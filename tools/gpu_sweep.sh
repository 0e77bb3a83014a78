#!/usr/bin/env bash
# Sweep the shape corpus on the GPU machine within one device call, resumably.
# Usage (repo root, on the GPU machine): bash tools/gpu_sweep.sh SHAPES.csv RESULTS.csv [SECONDS] [extra sweep args]
# Sweeps shapes not yet in RESULTS.csv until SECONDS (default 500) run out, then scores what
# it has. Carry RESULTS.csv back (it comes back under $OUT) and pass it in again next call.
set -uo pipefail
shapes=$1; results=$2; seconds=${3:-500}; shift 3 || shift $#
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout "$seconds" python3 -m convwgrad.cli sweep "$shapes" -o "$results" --resume --first-tile-only \
  --reference-on-device --no-progress "$@" 2>&1 | tail -5
cp "$results" "$OUT/" 2>/dev/null
python3 -m convwgrad.cli score "$results" --plot "$OUT/speedups.png" --tuning-cache "$OUT/tuned.json" \
  | tee "$OUT/score.txt"
