#!/usr/bin/env bash
# Score a revised policy by measurement: re-time, on the GPU machine, the current plan of every
# shape whose plan changed since an earlier sweep, side by side with that sweep's oracle, best
# Gm = 1 and torch configs for the shape (`sweep --confirm-from --changed-only`).
#
# Usage (repo root, GPU machine): bash tools/gpu_confirm.sh SECONDS SHAPES.csv=RESULTS.csv [...]
#   RESULTS.csv: an earlier sweep's results (e.g. notes/sweep/corpus_h200.csv), or that sweep and its confirm
#   files, comma-separated (a shape in a later file replaces it: only plans changed since them are re-timed). Writes
#   $OUT/confirm_<RESULTS>.csv and $OUT/score_<RESULTS>.txt (the sweep with the re-timed shapes
#   replaced). WARM_PROCS (default 14) processes compile the kernels first, in parallel;
#   PYTEST_ARGS, if set, runs `pytest $PYTEST_ARGS` alongside that warm phase; AFTER_WARM, if
#   set, is a command run after both, before the timed pass (the GPU is otherwise idle then).
#   LAUNCH=graph confirms the plan for kernels launched from CUDA graphs (`sweep --launch graph`);
#   its files are named confirm_graph_<RESULTS>.csv and score_graph_<RESULTS>.txt.
set -uo pipefail
seconds=$1; shift
deadline=$(( $(date +%s) + seconds ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
procs=${WARM_PROCS:-14}
launch=${LAUNCH:-eager}; tag=; [[ $launch == eager ]] || tag=${launch}_
common=(--first-tile-only --reference-on-device --no-progress --warmup-ms 5 --rep-ms 20 --changed-only --launch "$launch")

tests_pid=
if [[ -n ${PYTEST_ARGS:-} ]]; then
  timeout ${WARM_SECONDS:-$(( seconds / 2 ))} python3 -m pytest $PYTEST_ARGS -q -p no:cacheprovider >"$OUT/pytest_gpu.txt" 2>&1 &
  tests_pid=$!
fi
start=$(date +%s)
for pair in "$@"; do
  shapes=${pair%%=*}; IFS=, read -ra results <<< "${pair#*=}"
  from=(); for f in "${results[@]}"; do from+=(--confirm-from "$f"); done
  for ((i = 0; i < procs; i++)); do
    timeout ${WARM_SECONDS:-$(( seconds / 3 ))} python3 -m convwgrad.cli sweep "$shapes" -o "/tmp/warm_$i.csv" --shard "$i/$procs" \
      "${from[@]}" --verify-only "${common[@]}" >/dev/null 2>&1 &
  done
  wait $(jobs -p | grep -v "^${tests_pid:-x}$")
done
echo "warm phase: $(( $(date +%s) - start )) s"
[[ -n $tests_pid ]] && { wait "$tests_pid"; tail -3 "$OUT/pytest_gpu.txt"; }
[[ -n ${AFTER_WARM:-} ]] && bash -c "$AFTER_WARM"

for pair in "$@"; do
  shapes=${pair%%=*}; IFS=, read -ra results <<< "${pair#*=}"; name=$tag$(basename "${results[0]}" .csv)
  from=(); for f in "${results[@]}"; do from+=(--confirm-from "$f"); done
  left=$(( deadline - $(date +%s) ))
  (( left > 10 )) || break
  timeout "$left" python3 -m convwgrad.cli sweep "$shapes" -o "$OUT/confirm_$name.csv" "${from[@]}" \
    "${common[@]}" 2>&1 | tail -2
  files=("${results[@]}"); [[ -e $OUT/confirm_$name.csv ]] && files+=("$OUT/confirm_$name.csv")
  python3 -m convwgrad.cli score "${files[@]}" | tee "$OUT/score_$name.txt"
done
