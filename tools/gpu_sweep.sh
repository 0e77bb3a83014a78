#!/usr/bin/env bash
# Sweep shape corpora on the GPU machine within one device call, resumably.
#
# Usage (repo root, on the GPU machine):
#   bash tools/gpu_sweep.sh SECONDS SHAPES.csv=RESULTS.csv [SHAPES.csv=RESULTS.csv ...]
#
# 1. Warm: WARM_PROCS processes (default 8) verify every config of every shape not yet
#    timed, without timing, in parallel, so Triton's on-disk kernel cache is full before any
#    timing. Skipped when a previous call on this (still warm) machine did it; remove
#    $SWEEP_DIR/warmed to warm again (a new shapes file, or what a cut-off warm-up missed).
# 2. Time: one process sweeps the shapes not yet in each RESULTS.csv (--resume), until
#    SECONDS run out. Timings are never taken while another process uses the GPU.
# 3. Copy every RESULTS.csv to $OUT and score it there.
#
# RESULTS.csv lives in $SWEEP_DIR (default /root/convwgrad-sweep), which survives between
# calls while the machine stays warm; a RESULTS.csv carried in the repository (same name,
# under notes/sweep/) seeds it on a fresh machine. Extra sweep flags: $SWEEP_ARGS.
# Set GPU_TESTS=1 to run `pytest -m gpu` alongside the warm phase (log in $OUT; TEST_WORKERS=n: pytest-xdist).
set -uo pipefail
seconds=$1; shift
deadline=$(( $(date +%s) + seconds ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
state=${SWEEP_DIR:-/root/convwgrad-sweep}; mkdir -p "$state"
procs=${WARM_PROCS:-8}
common=(--first-tile-only --warmup-ms 5 --rep-ms 20 --reference-on-device --no-progress ${SWEEP_ARGS:-})

tests_pid=
if [[ ${GPU_TESTS:-0} == 1 ]]; then
  OMP_NUM_THREADS=2 python3 -m pytest tests -m gpu -q -p no:cacheprovider --durations=10 ${TEST_WORKERS:+-n $TEST_WORKERS} >"$OUT/pytest_gpu.txt" 2>&1 &
  tests_pid=$!
fi

for pair in "$@"; do  # a fresh machine resumes from the results carried in notes/sweep/
  results=$(basename "${pair#*=}")
  [[ ! -e $state/$results && -e notes/sweep/$results ]] && cp "notes/sweep/$results" "$state/$results"
done

if [[ ! -e $state/warmed ]]; then
  start=$(date +%s)
  for pair in "$@"; do
    shapes=$state/left_$(basename "${pair%%=*}")  # warm only the shapes not yet timed
    python3 tools/remaining_shapes.py "${pair%%=*}" "$state/$(basename "${pair#*=}")" "$shapes"
    for ((i = 0; i < procs; i++)); do
      timeout $(( seconds / 2 )) python3 -m convwgrad.cli sweep "$shapes" -o "$state/warm_$i.csv" --shard "$i/$procs" --verify-only \
        "${common[@]}" >"$state/warm_$i.log" 2>&1 &
    done
    wait $(jobs -p | grep -v "^${tests_pid:-x}$")
  done
  grep -h "failed verification" "$state"/warm_*.log | tee "$OUT/warm.txt"
  echo "warm phase: $(( $(date +%s) - start )) s" | tee -a "$OUT/warm.txt"
  touch "$state/warmed"
fi
[[ -n $tests_pid ]] && { wait "$tests_pid"; tail -3 "$OUT/pytest_gpu.txt"; }

for pair in "$@"; do
  shapes=${pair%%=*}; results=$(basename "${pair#*=}")
  left=$(( deadline - $(date +%s) ))
  (( left > 20 )) || break
  timeout "$left" python3 -m convwgrad.cli sweep "$shapes" -o "$state/$results" --resume "${common[@]}" 2>&1 | tail -3
done

for pair in "$@"; do
  results=$(basename "${pair#*=}")
  [[ -e $state/$results ]] || continue
  cp "$state/$results" "$OUT/"
  python3 -m convwgrad.cli score "$state/$results" | tee "$OUT/score_${results%.csv}.txt"
done
