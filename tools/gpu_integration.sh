#!/usr/bin/env bash
# One device call for the integration issue: host cost (this version and, if .old_src holds an
# earlier checkout's convwgrad/, that one), training steps of real models with the per-layer
# breakdown and profile, and/or the GPU test suite. Writes logs under $OUT.
# Usage (GPU machine, repo root): bash tools/gpu_integration.sh [host] [steps|layers MODELS TAG] [tests] [compiled MODELS]
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$OUT/env.txt" 2>&1
while (($#)); do
  case $1 in
    host)
      python3 tools/host_overhead.py --profile conformer-1d-c256-k31 --json "$OUT/host_new.json" 2>&1 | tee "$OUT/host_new.txt"
      if [[ -d .old_src/convwgrad ]]; then
        PYTHONPATH=$PWD/.old_src python3 tools/host_overhead.py --json "$OUT/host_old.json" 2>&1 | tee "$OUT/host_old.txt"
      fi
      shift ;;
    steps)  # steps MODELS TAG: step times only
      python3 tools/step_bench.py --models "$2" --json "$OUT/steps_eager_$3.json" 2>&1 | tee "$OUT/steps_eager_$3.txt"
      shift 3 ;;
    layers)  # layers MODELS TAG: step times, per-layer breakdown and profile
      python3 tools/step_bench.py --models "$2" --layers --profile --json "$OUT/steps_eager_$3.json" 2>&1 | tee "$OUT/steps_eager_$3.txt"
      shift 3 ;;
    control)  # control MODELS TAG: an A/A run (two stock copies) with the profile, then patched with it
      python3 tools/step_bench.py --control --profile --models "$2" --json "$OUT/steps_control_$3.json" 2>&1 | tee "$OUT/steps_control_$3.txt"
      python3 tools/step_bench.py --profile --models "$2" --json "$OUT/steps_profiled_$3.json" 2>&1 | tee "$OUT/steps_profiled_$3.txt"
      shift 3 ;;
    compiled)
      python3 tools/step_bench.py --compile --models "$2" --rounds 2 --json "$OUT/steps_compiled.json" 2>&1 | tee "$OUT/steps_compiled.txt"
      shift 2 ;;
    tests)
      # 4 workers of 4 threads: 12 workers with torch's default 16 intra-op threads each (the float64
      # CPU references) ran 19 tests in 290 s on the 16-core machine; one process ran 154 in 433 s
      OMP_NUM_THREADS=4 python3 -m pytest tests -v -m gpu -p no:cacheprovider -p no:benchmark -n 4 --durations=10 2>&1 \
        | tee "$OUT/pytest_gpu.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -40
      shift ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
done
