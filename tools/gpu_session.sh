#!/usr/bin/env bash
# One device call of issues 9-11, by parts (each with its own time limit; logs under $OUT):
#   tests    the whole GPU suite (pytest -m gpu, 4 workers)
#   host     where a patched step's extra host time goes (tools/step_host.py)
#   shifted  the shifted family's variants (outer-product pins included) against cuDNN and merged
#   layers   per-layer dW inside RepLKNet-31B and UniRepLKNet-T (channels_last), with the profile
#   ncu      Nsight Compute of the shifted kernels on RepLKNet's 31x31 layer, both layouts
#   backward wall and thread CPU time of a dW call inside autograd's backward (tools/backward_host.py)
#   splits   the shifted kernel's planned tile over a sweep of split degrees (partial-wave tails)
#   bigbatch UniRepLKNet-T at batch 128 (both layouts), RepLKNet-31B at 32 (channels_last)
#   frameworks  the GPU framework tests
#   hostpath host cost per call over aten (tools/host_overhead.py) and the warm-path and shifted GPU tests
#   layerhost  a depthwise layer's forward/backward host time, stock vs patched, and the patched backward's profile
#   gluon    the Gluon probe's variants launched and checked against a float64 reference (tools/gluon_probe.py --run)
#   allaten  the all-cuDNN timm models with an A/A arm in the same rotation
#   layertrace  a patched layer's host time by piece, a candidate structure, and the op-by-op timeline (tools/layer_trace.py)
#   sameaten the all-cuDNN timm models and UniRepLKNet-T, one model for all arms (--same-model) plus an A/A arm
#   modulehost  each grouped layer's forward host time inside UniRepLKNet-T b32 and the patched backward's profile there
#   ddp2     (nvidia-h200-x2) the NCCL DDP test on two GPUs and `convwgrad sweep` under torchrun against one GPU
#   cudagraphs  UniRepLKNet-T b32 channels_last compiled with mode="reduce-overhead", stock vs patched (alone: compiling takes minutes)
#   occupancy  the direct family's planned tile beside low-register tiles (variants_direct.py:occupancy_variants)
#   dilated  UniRepLKNet-T's dilated branches: the shifted family beside merged and cuDNN (b32, b128), then the
#            model with tools/route_experiments.py:dilated_to_shifted routing them to shifted, against the built-in router, b32 and b128
#   relayout the aten channels_last family (NCHW operands copied for cuDNN's channels_last dW) beside torch's
#            NCHW path on ConvNeXt-T / MobileNetV2 / EfficientNet-B0 layers, its GPU tests, and the three models
#            in NCHW with tools/route_experiments.py:nchw_to_channels_last routing their depthwise layers to it
#   dilated3 UniRepLKNet-T b32/b128 CL with tools/route_experiments.py:small_dilated_to_merged (3x3 dilated branches of
#            >= 5e7 multiply-adds to merged) on top of the built-in router
#   rolling  the rolling-window direct kernel prototype (tools/proto_rolling.py) beside cuDNN on 8 small-filter layers
#   rules6   session 6's two routing rules in the models they were measured for: EfficientNet-B0 NCHW
#            (5x5 layers copied to channels_last) and UniRepLKNet-T N=128 CL (3x3 dilated branches to merged),
#            and the aten channels_last family's GPU tests (its error against stock torch's)
#   nchwlayers  EfficientNet-B0 NCHW b128 per-layer dW inside the model (the NCHW rule's layers), and ncu of the
#            rolling prototype's best 7x7 config on ConvNeXt 56x56 C96
#   nchwprofile  EfficientNet-B0 NCHW b128 steps with torch.profiler (kernel time by name, stock vs patched, and
#            the caching allocator's cudaMalloc/cudaFree a step): where the routed layers' 3.5 ms went (session 6)
#   nchwsteps  EfficientNet-B0 NCHW b128 same-model steps with an A/A arm, four rounds (the NCHW rule's
#            saving is ~5% of kernel time, the spread between runs ~2%)
#   unirepaten  UniRepLKNet-T b32 CL, the built-in router and then every depthwise layer to cuDNN
#            (tools/route_experiments.py:depthwise_to_aten), each against stock with an A/A arm
#   staged   the shared-memory staged prototype (tools/proto_staged.py): float64 check, then beside cuDNN
#   stagedfamily  the staged family's GPU tests (and the prototype's float64 checks)
#   reduce   the shared stage 2 (tiled) beside session 7's sequential one and torch.sum (tools/reduce_bench.py), then
#            ConvNeXt-T 64 / MobileNetV2 128 CL with small_depthwise_to_staged: per-layer dW in the model and the profile
#   stagedhost  host time of a staged dW call (main thread and inside autograd's backward, with cProfile) beside
#            the cuDNN-planned call, on MobileNetV2 layers (tools/backward_host.py)
#   familytests  the GPU tests of every family (the shared stage 2 changed in session 8)
#   stagedrule  ConvNeXt-T 64 / MobileNetV2 128 CL with only the large layers routed to staged
#            (tools/route_experiments.py:large_depthwise_to_staged), same-model, A/A arm
#   stagedgraphs  MobileNetV2 128 CL compiled with mode="reduce-overhead", stock vs small_depthwise_to_staged
#   stagedsweep  the staged prototype's SWEEPS[$STAGED_SWEEP] configs (grid, fewer) on ConvNeXt-T's 28x28 / 14x14 / 7x7 7x7 layers beside cuDNN
#   stagedconvnext  session 8's wide-strip tiles: ConvNeXt-T 64 CL per-layer dW in the model with
#            small_depthwise_to_staged, then compiled with mode="reduce-overhead", stock vs that route
#   graphtests9  session 9's graph route: the CUDA-graph framework tests, the staged family's GPU tests, the
#            simulated-capture dispatch tests
#   graphsteps  the built-in router with graph launches: timm models (GRAPH_MODELS, default MobileNetV2 128 and
#            EfficientNet-B0 128) channels_last compiled with mode="reduce-overhead", stock vs patched
#   verify10  the whole GPU suite, then the simulated-capture dispatch tests on the GPU (session 9's review
#            fixes never ran there)
#   hostparts  host us of each part of a staged dW call (allocations, three ways to launch, the prepared call,
#            the op's path, aten's dW/dX/both), main thread and engine thread (tools/host_parts.py)
#   shiftedmma  the shifted-MMA family's GPU tests, layer bench and RepLKNet-31B NCHW same-model steps
#   mmacl    the shifted-MMA family in channels_last (read in place): GPU tests, layer bench in both layouts
#            (in place beside a copy to NCHW), RepLKNet-31B CL same-model steps with its large layers routed to it
#   mmatests  the shifted-MMA family's GPU tests alone
#   smallmma  issue 10: the shifted-MMA family on small filters (rows >= 14) beside torch's NCHW path and cuDNN CL
#   heldout  the 50 never-swept random shapes swept and scored against the oracle (HELDOUT_S seconds)
#   seq1d    issues 10/11's 1-D filters: the shifted-MMA family's sequence kernels (GPU tests), then beside cuDNN,
#            merged and the Triton shifted family on Conformer, Mamba and long-filter layers, both layouts
#   short1d  issue 10's Mamba row: the short-1-D family (1-D depthwise, 2-9 taps, CUDA cores): its GPU tests, then
#            tools/seq_bench.py beside cuDNN, merged, direct and the shifted-MMA family on Mamba/TCN layers
#   table9   issue 9's step table with the native warm path: the all-cuDNN timm models and UniRepLKNet-T, both
#            layouts, same model, A/A arm, TABLE_ROUNDS rounds (default 8), then UniRepLKNet-T b32's per-layer dW in the model
#   native   the native warm path built and loaded (run it before the parts that time or test it)
#   hostpaired  issue 9's host overhead by the paired method (tools/host_overhead.py --paired): thread CPU a call
#   regnethost  RegNetY-016 b128 channels_last: step_host.py's host-time differences and torch.profiler's, stock vs patched
#   unirep3  UniRepLKNet-T b32 CL eager steps: built-in router, all depthwise to cuDNN, 13x13 to the shifted-MMA family
#   regnetnchw  RegNetY-016 128 NCHW eager steps, 5 rounds, A/A arm (session 12 read 0.985x)
#   oldnew   the shifted-MMA any-strides kernel of git c52017f beside this one (tools/mma_old_vs_new.py), ncu of both
#   hostoverhead  host us a call over aten.convolution_backward (tools/host_overhead.py) alone
#   coopcl   the shifted-MMA family's cooperative channels_last kernels (session 13 ran 4 and 8 channels a vector
#            load): GPU tests, the layer bench (any-strides kernel beside cl4, both layouts), ncu of each CL kernel
#            on the 31x31 56x56 layer, RepLKNet-31B CL same-model steps with the built-in router
#   coopsteps  the shifted-MMA GPU tests, then RepLKNet-31B CL and NCHW same-model steps (step lines only)
#   compiledsteps  timm models (COMPILED_MODELS) channels_last under torch.compile's default mode, stock vs patched
#   hostparts2  hostparts for this checkout and for session 9's library (build/old: `git archive c5efda5
#            convwgrad | tar -x -C build/old`, carried)
#   hosttests  the provider and framework GPU tests (the warm path, kept workspaces, the patched backward)
#   pathology  EfficientNet-B0 128 CL eager, same model, A/A arm, with only its 5x5 stride-2 layers of >= 640
#            channels given to the staged family (cuDNN 778 us, staged 36 us on the 14x14 C672 one)
#   stagedsteps  ConvNeXt-T 64 and MobileNetV2 128 channels_last with their small depthwise layers routed to
#            the staged family (tools/route_experiments.py:small_depthwise_to_staged), same-model, A/A arm
#   rolling56  the rolling prototype's configs on ConvNeXt's 56x56 and 28x28 layers only, and ncu stall
#            reasons of the 14-row-chunk config
#   unirepprofile  UniRepLKNet-T b32 CL steps under torch.profiler: kernel time by name stock vs patched
#            (does the shifted family's 13x13 saving reach the GPU timeline; where the host time goes)
#   protogpu the rolling prototype's float64 tests on the GPU
#   graphtests  the CUDA-graph framework tests and the shifted family's dilated layers (a short verification)
#   unirep   UniRepLKNet-T b32 and b128 channels_last, one model for all arms, with the built-in router
#   steps    training steps of the large-kernel networks and two all-cuDNN models, both layouts
# Usage (GPU machine, repo root): bash tools/gpu_session.sh sameaten modulehost tests ...
# (session 16: `native hostpaired tests` first if session 15's run did not happen (the native warm path's GPU
#  evidence), then session 15's list below; session 15: `mmatests` on the mma-1d branch merged, `oldnew` with its ncu arms (the 27x27 regression), `heldout`, `smallmma`; `unirep3`
#  once the patched layer's host cost moves; session 11: `tests`, then `compiledsteps`, then `graphsteps` (reduce-overhead still gains?); session 10: `verify10 hostparts`; then `ddp2` if nvidia-h200-x2 is lent. Older: `stagedfamily staged` first (the staged family's GPU tests; the prototype's checks incl. stride 2 /
#  fp16 / fp32 and nine layers beside cuDNN), then `stagedsteps`, ncu of its best config; on nvidia-h200-x2: `ddp2`)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CONVWGRAD_GENERATED_DIR=${TMPDIR:-/tmp}/convwgrad_generated  # not under $OUT: one file a kernel
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
# the shifted-MMA family's GPU tests, limited to $1 seconds (several parts run them first)
mma_tests() {
  OMP_NUM_THREADS=4 timeout "$1" python3 -m pytest tests/plugins/wgrad_shifted_mma -m gpu -q -p no:cacheprovider \
    -n 4 2>&1 | tee "$OUT/pytest_shifted_mma.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20
}
for part in "$@"; do
  start=$SECONDS
  case $part in
    tests)
      OMP_NUM_THREADS=2 timeout ${TESTS_LIMIT_S:-330} python3 -m pytest tests -m gpu -q -p no:cacheprovider -n ${TEST_WORKERS:-4} --durations=5 2>&1 \
        | tee "$OUT/pytest_gpu.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -40 ;;
    host)
      timeout 90 python3 tools/step_host.py --models efficientnet_b0:8,convnext_tiny:8 2>&1 | grep -v Warn | tee "$OUT/step_host.txt" ;;
    shifted)
      timeout 150 python3 tools/family_bench.py --variants tools/variants_shifted.py:variants --layouts channels_last \
        --budget-s 125 --json "$OUT/shifted.json" \
        --shape N=16,C=128,H=56,W=56,k=31,g=128 --shape N=16,C=128,H=56,W=56,k=31,g=128,layout=contiguous \
        --shape N=16,C=512,H=14,W=14,k=27,g=512 --shape N=16,C=1024,H=7,W=7,k=13,g=1024 \
        --shape N=32,C=160,H=28,W=28,k=7,d=2,g=160 --shape N=32,C=512,L=2048,k=31,g=512 2>&1 | grep -v Warn | tee "$OUT/shifted.txt" ;;
    layers)
      timeout 150 python3 tools/step_bench.py --models replknet31b:16,unireplknet_t:32 --layouts channels_last \
        --rounds 1 --layers --profile --json "$OUT/layers.json" 2>&1 | grep -v Warn | tee "$OUT/layers.txt" ;;
    ncu)
      timeout 45 bash tools/ncu_config.sh --shape N=16,C=128,H=56,W=56,k=31,g=128 --family wgrad_shifted \
        --tile m32n32k16w4s1 --group-merge 8 --split-k 32 > "$OUT/ncu_shifted_cl.txt" 2>&1
      timeout 45 bash tools/ncu_config.sh --shape N=16,C=128,H=56,W=56,k=31,g=128 --layout contiguous \
        --family wgrad_shifted --tile m32n32k64w4s3 --split-k 32 > "$OUT/ncu_shifted_nchw.txt" 2>&1
      tail -5 "$OUT/ncu_shifted_cl.txt" ;;
    backward)
      timeout 60 python3 tools/backward_host.py 2>&1 | grep -v Warn | tee "$OUT/backward_host.txt" ;;
    splits)
      timeout 120 python3 tools/family_bench.py --variants tools/variants_shifted.py:split_variants --layouts channels_last \
        --budget-s 100 --json "$OUT/splits.json" \
        --shape N=16,C=128,H=56,W=56,k=31,g=128 --shape N=16,C=128,H=56,W=56,k=31,g=128,layout=contiguous \
        --shape N=32,C=128,H=56,W=56,k=31,g=128 --shape N=16,C=256,H=28,W=28,k=29,g=256 \
        --shape N=16,C=512,H=14,W=14,k=27,g=512 --shape N=32,C=320,H=14,W=14,k=13,g=320 2>&1 | grep -v Warn | tee "$OUT/splits.txt" ;;
    bigbatch)
      timeout 150 python3 tools/step_bench.py --models unireplknet_t:128 --rounds 2 --json "$OUT/steps_unirep128.json" 2>&1 \
        | grep -v Warn | tee "$OUT/steps_bigbatch.txt"
      timeout 80 python3 tools/step_bench.py --models replknet31b:32 --layouts channels_last --rounds 2 \
        --json "$OUT/steps_replk32.json" 2>&1 | grep -v Warn | tee -a "$OUT/steps_bigbatch.txt" ;;
    frameworks)
      OMP_NUM_THREADS=4 timeout 200 python3 -m pytest tests/frameworks -m gpu -q -p no:cacheprovider -n 4 2>&1 \
        | tee "$OUT/pytest_frameworks.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20 ;;
    hostpath)
      timeout 120 python3 tools/host_overhead.py --calls 100 --json "$OUT/host_overhead.json" 2>&1 | grep -v Warn | tee "$OUT/host_overhead.txt"
      OMP_NUM_THREADS=4 timeout 120 python3 -m pytest tests/provider/test_warm_path_gpu.py tests/plugins/wgrad_shifted -m gpu -q \
        -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_warm_shifted.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20 ;;
    layerhost)
      timeout 100 python3 tools/layer_host.py --calls 150 2>&1 | grep -v Warn | tee "$OUT/layer_host.txt" ;;
    gluon)
      timeout 120 python3 tools/gluon_probe.py --run 2>&1 | tee "$OUT/gluon_run.txt" | tail -20 ;;
    allaten)
      timeout 150 python3 tools/step_bench.py --with-control --rounds 3 \
        --models convnext_tiny:64,mobilenetv2_100:128,efficientnet_b0:128,regnety_016:128 \
        --json "$OUT/steps_allaten.json" 2>&1 | grep -v Warn | tee "$OUT/steps_allaten.txt" ;;
    layertrace)
      timeout 150 python3 tools/layer_trace.py --layers replk-7-c1024-k13,unirep-14-c320-k13,unirep-14-c320-k7-d2 \
        --calls 150 --timeline 2>&1 | grep -v Warn | tee "$OUT/layer_trace.txt" ;;
    sameaten)
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 3 \
        --models convnext_tiny:64,mobilenetv2_100:128,efficientnet_b0:128,regnety_016:128,unireplknet_t:32 \
        --json "$OUT/steps_same_model.json" 2>&1 | grep -v Warn | tee "$OUT/steps_same_model.txt" ;;
    modulehost)
      timeout 150 python3 tools/module_host.py --model unireplknet_t:32 --layout channels_last 2>&1 | grep -v Warn \
        | tee "$OUT/module_host.txt" ;;
    ddp2)
      OMP_NUM_THREADS=4 timeout 560 python3 -m pytest tests/frameworks/test_ddp_nccl_gpu.py -m gpu -q -s -p no:cacheprovider \
        2>&1 | tee "$OUT/pytest_ddp_nccl.txt" | grep -E "DDP x|FAILED|ERROR|passed|failed|skipped" | tail -10
      head -9 shapes/depthwise_corpus.csv > "$OUT/ddp_shapes.csv"
      timeout 200 python3 -m convwgrad sweep "$OUT/ddp_shapes.csv" -o "$OUT/sweep_single.csv" --first-tile-only --splits 1,4 \
        --no-progress > "$OUT/sweep_single.txt" 2>&1
      timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node 2 -m convwgrad sweep "$OUT/ddp_shapes.csv" \
        -o "$OUT/sweep_torchrun.csv" --first-tile-only --splits 1,4 --no-progress > "$OUT/sweep_torchrun.txt" 2>&1
      python3 - "$OUT/sweep_single.csv" "$OUT/sweep_torchrun.csv" <<'PY' | tee "$OUT/sweep_compare.txt"
import csv, sys
rows = [[(r["shape"], r["kernel_name"], r["passed"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:]]
print(f"sweep rows: one GPU {len(rows[0])}, torchrun x2 {len(rows[1])}, same shapes/configs/verdicts in order: {rows[0] == rows[1]}")
PY
      ;;
    cudagraphs)
      timeout ${CUDAGRAPHS_LIMIT_S:-560} python3 tools/step_bench.py --models unireplknet_t:32 --layouts channels_last --compile reduce-overhead \
        --rounds 2 --steps 6 --json "$OUT/steps_cudagraphs.json" 2>&1 | grep -v Warn | tee "$OUT/steps_cudagraphs.txt" ;;
    occupancy)
      timeout 150 python3 tools/family_bench.py --variants tools/variants_direct.py:occupancy_variants --layouts channels_last \
        --budget-s 125 --json "$OUT/direct_occupancy.json" \
        --shape N=64,C=96,H=56,W=56,k=7,g=96 --shape N=32,C=144,H=56,W=56,k=3,g=144 --shape N=64,C=768,H=7,W=7,k=7,g=768 \
        2>&1 | grep -v Warn | tee "$OUT/direct_occupancy.txt" ;;
    dilated)
      timeout 150 python3 tools/family_bench.py --variants tools/variants_shifted.py:variants --layouts channels_last \
        --budget-s 125 --json "$OUT/dilated.json" \
        --shape N=32,C=160,H=28,W=28,k=7,d=2,g=160 --shape N=32,C=160,H=28,W=28,k=3,d=3,g=160 \
        --shape N=32,C=320,H=14,W=14,k=7,d=2,g=320 --shape N=32,C=320,H=14,W=14,k=3,d=5,g=320 \
        --shape N=128,C=160,H=28,W=28,k=7,d=2,g=160 --shape N=128,C=320,H=14,W=14,k=3,d=4,g=320 \
        2>&1 | grep -v Warn | tee "$OUT/dilated.txt"
      for plugin in "" "--plugin tools/route_experiments.py:dilated_to_shifted"; do
        timeout 200 python3 tools/step_bench.py --same-model --with-control --rounds 2 $plugin \
          --models unireplknet_t:32,unireplknet_t:128 --layouts channels_last 2>&1 | grep -v Warn | tee -a "$OUT/dilated_steps.txt"
      done ;;
    relayout)
      timeout 200 python3 tools/family_bench.py --variants tools/variants_relayout.py:variants --layouts contiguous \
        --budget-s 170 --json "$OUT/relayout.json" \
        --shape N=64,C=96,H=56,W=56,k=7,g=96 --shape N=64,C=192,H=28,W=28,k=7,g=192 \
        --shape N=64,C=384,H=14,W=14,k=7,g=384 --shape N=64,C=768,H=7,W=7,k=7,g=768 \
        --shape N=128,C=144,H=56,W=56,k=3,g=144 --shape N=128,C=96,H=112,W=112,k=3,s=2,g=96 \
        --shape N=128,C=240,H=28,W=28,k=5,g=240 --shape N=128,C=672,H=14,W=14,k=5,g=672 \
        --shape N=32,C=256,L=512,k=31,g=256 --shape N=16,C=1024,L=2048,k=4,g=1024 \
        2>&1 | grep -v Warn | tee "$OUT/relayout.txt"
      OMP_NUM_THREADS=4 timeout 120 python3 -m pytest tests/plugins/aten_channels_last -m gpu -q -p no:cacheprovider \
        -n 4 2>&1 | tee "$OUT/pytest_relayout.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -10
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts contiguous \
        --plugin tools/route_experiments.py:nchw_to_channels_last --models convnext_tiny:64,mobilenetv2_100:128,efficientnet_b0:128 \
        --json "$OUT/steps_relayout.json" 2>&1 | grep -v Warn | tee "$OUT/steps_relayout.txt" ;;
    dilated3)
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts channels_last \
        --plugin tools/route_experiments.py:small_dilated_to_merged --models unireplknet_t:32,unireplknet_t:128 \
        --json "$OUT/steps_dilated3.json" 2>&1 | grep -v Warn | tee "$OUT/steps_dilated3.txt" ;;
    rolling)
      timeout 360 python3 tools/proto_rolling.py --bench --json "$OUT/rolling.json" 2>&1 | grep -v Warn | tee "$OUT/rolling.txt"
      timeout 90 ncu --kernel-name regex:rolling --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
        python3 tools/proto_rolling.py --one convnext-56-c96-k7:${ROLLING_NCU_INDEX:-0} > "$OUT/ncu_rolling.txt" 2>&1
      grep -E "Duration|Throughput|Occupancy|Registers|Issued|Eligible|Stall" "$OUT/ncu_rolling.txt" | head -24 ;;
    rules6)
      OMP_NUM_THREADS=4 timeout 120 python3 -m pytest tests/plugins/aten_channels_last -m gpu -q -p no:cacheprovider \
        -n 4 2>&1 | tee "$OUT/pytest_relayout.txt" | grep -E "FAILED|ERROR|passed|failed|relative error" | tail -12
      timeout 200 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts contiguous \
        --models efficientnet_b0:128 --json "$OUT/steps_rule_nchw.json" 2>&1 | grep -v Warn \
        | tee "$OUT/steps_rule_nchw.txt"
      timeout 150 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts channels_last \
        --models unireplknet_t:128 --json "$OUT/steps_rule_dilated3.json" 2>&1 | grep -v Warn \
        | tee "$OUT/steps_rule_dilated3.txt" ;;
    nchwlayers)
      timeout 150 python3 tools/step_bench.py --models efficientnet_b0:128 --layouts contiguous --rounds 1 --layers \
        --json "$OUT/layers_effb0_nchw.json" 2>&1 | grep -v Warn | tee "$OUT/layers_effb0_nchw.txt" | tail -40
      timeout 90 ncu --kernel-name regex:rolling --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section LaunchStats python3 tools/proto_rolling.py --one convnext-56-c96-k7:0 > "$OUT/ncu_rolling.txt" 2>&1
      grep -E "Duration|Throughput|Occupancy|Registers|Issued|Eligible|Hit Rate|Stall" "$OUT/ncu_rolling.txt" | head -30 ;;
    nchwprofile)
      timeout 150 python3 tools/step_bench.py --models efficientnet_b0:128 --layouts contiguous --rounds 2 --profile \
        --json "$OUT/profile_effb0_nchw.json" 2>&1 | grep -v Warn | tee "$OUT/profile_effb0_nchw.txt" | tail -30 ;;
    nchwsteps)
      timeout 220 python3 tools/step_bench.py --same-model --with-control --rounds 4 --layouts contiguous \
        --models efficientnet_b0:128 --json "$OUT/steps_nchw_effb0.json" 2>&1 | grep -v Warn \
        | tee "$OUT/steps_nchw_effb0.txt" ;;
    unirepaten)
      for plugin in "" "--plugin tools/route_experiments.py:depthwise_to_aten"; do
        timeout 150 python3 tools/step_bench.py --same-model --with-control --rounds ${UNIREP_ROUNDS:-3} $plugin \
          --models unireplknet_t:32 --layouts channels_last 2>&1 | grep -v Warn | tee -a "$OUT/steps_unirep_aten.txt"
      done ;;
    staged)
      timeout 240 python3 tools/proto_staged.py --check --bench --json "$OUT/staged.json" 2>&1 \
        | grep -v -i "warn\|leaked\|nanobind\|skipped rem" | tee "$OUT/staged.txt" | tail -40 ;;
    stagedfamily)
      OMP_NUM_THREADS=4 timeout 200 python3 -m pytest tests/plugins/wgrad_staged tests/plugins/wgrad_direct/test_staged_prototype.py \
        -m gpu -q -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_staged.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -30 ;;
    reduce)
      timeout 120 python3 tools/reduce_bench.py --json "$OUT/reduce.json" 2>&1 | grep -v Warn | tee "$OUT/reduce.txt"
      timeout 240 python3 tools/step_bench.py --models convnext_tiny:64,mobilenetv2_100:128 --layouts channels_last \
        --rounds 1 --profile --layers --plugin tools/route_experiments.py:small_depthwise_to_staged \
        --json "$OUT/layers_staged.json" 2>&1 | grep -v -i "warn" | tee "$OUT/layers_staged.txt" | tail -60 ;;
    hostparts)
      timeout 200 python3 tools/host_parts.py --plugin tools/route_experiments.py:small_depthwise_to_staged 2>&1 \
        | grep -v Warn | tee "$OUT/host_parts.txt" ;;
    shiftedmma)
      # issue 11's shifted-MMA family (CUDA C++ by NVRTC): its GPU tests, the layer bench beside cuDNN and the
      # Triton shifted family, and RepLKNet-31B NCHW steps with the router's choice (its large layers go to it)
      mma_tests 150
      timeout 120 python3 tools/proto_shifted_mma.py --json "$OUT/shifted_mma.json" 2>&1 | grep -v -i warn \
        | tee "$OUT/shifted_mma.txt"
      timeout ${MMASTEPS_LIMIT_S:-200} python3 tools/step_bench.py --models ${MMA_MODELS:-replknet31b:16} --layouts contiguous \
        --same-model --with-control --rounds 3 --json "$OUT/steps_mma.json" 2>&1 | grep -v -i warn \
        | tee "$OUT/steps_mma.txt" | tail -8 ;;
    mmacl)
      # session 12: the shifted-MMA kernel reading channels_last operands in place: its GPU tests (both layouts),
      # the layer bench (in place beside copying to NCHW first, cuDNN, the Triton shifted family), and
      # RepLKNet-31B channels_last steps with its large layers given to the family (route experiment)
      mma_tests 120
      timeout 130 python3 tools/proto_shifted_mma.py --layouts channels_last contiguous --json "$OUT/shifted_mma_cl.json" \
        2>&1 | grep -v -i warn | tee "$OUT/shifted_mma_cl.txt"
      timeout ${MMASTEPS_LIMIT_S:-180} python3 tools/step_bench.py --models ${MMA_MODELS:-replknet31b:16} \
        --layouts channels_last --same-model --with-control --rounds 3 \
        --plugin tools/route_experiments.py:large_channels_last_to_shifted_mma --json "$OUT/steps_mma_cl.json" 2>&1 \
        | grep -v -i warn | tee "$OUT/steps_mma_cl.txt" | tail -8 ;;
    coopcl)
      mma_tests 150
      timeout 150 python3 tools/proto_shifted_mma.py --layouts channels_last contiguous --json "$OUT/shifted_mma_coop.json" \
        2>&1 | grep -v -i warn | tee "$OUT/shifted_mma_coop.txt"
      for kernel in wgrad_shifted_mma_kernel wgrad_shifted_mma_cl4_kernel; do
        timeout 60 ncu --kernel-name $kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
          python3 tools/proto_shifted_mma.py --layouts channels_last --only replk31b-56-c128-k31 \
          > "$OUT/ncu_${kernel}_cl.txt" 2>&1
        grep -E "Duration|Throughput|Registers|Issued|Eligible|Hit Rate|Stall|Achieved Occ" "$OUT/ncu_${kernel}_cl.txt" | head -16
      done
      timeout ${MMASTEPS_LIMIT_S:-180} python3 tools/step_bench.py --models ${MMA_MODELS:-replknet31b:16} \
        --layouts channels_last --same-model --with-control --rounds 3 --layers --json "$OUT/steps_mma_coop.json" 2>&1 \
        | grep -v -i warn | tee "$OUT/steps_mma_coop.txt" | tail -30 ;;
    mmatests)
      mma_tests ${MMATESTS_LIMIT_S:-150} ;;
    coopsteps)
      mma_tests 150
      timeout ${MMASTEPS_LIMIT_S:-300} python3 tools/step_bench.py --models ${MMA_MODELS:-replknet31b:16} \
        --layouts ${MMA_LAYOUTS:-channels_last,contiguous} --same-model --with-control --rounds 3 2>&1 \
        | grep -v -i warn | tee "$OUT/steps_mma_coop.txt" | grep -E "^replknet|^model|host ms" ;;
    heldout)
      # issues 10 and 11's "done when": the 50 random shapes never swept (rows rand-050..rand-099), every family
      # verified and timed, then `convwgrad score` of the router against the oracle (tools/gpu_sweep.sh)
      mkdir -p build && head -1 shapes/depthwise_random.csv > build/heldout.csv \
        && tail -n 50 shapes/depthwise_random.csv >> build/heldout.csv
      bash tools/gpu_sweep.sh ${HELDOUT_S:-480} build/heldout.csv=heldout_${HELDOUT_TAG:-gpu}.csv 2>&1 | tail -40 ;;
    smallmma)
      # issue 10: the shifted-MMA family's 16 x 16 tile on small filters (rows >= 14) beside torch's NCHW path,
      # cuDNN channels_last and the router's choice (tools/proto_shifted_mma.py SMALL_FILTER_LAYERS)
      timeout ${SMALLMMA_LIMIT_S:-150} python3 tools/proto_shifted_mma.py --layouts contiguous channels_last \
        $(python3 -c "import sys; sys.path.insert(0, 'tools'); import proto_shifted_mma as p; print(' '.join('--only ' + l[0] for l in p.SMALL_FILTER_LAYERS))") \
        --json "$OUT/proto_small.json" 2>&1 | grep -v -i warn | tee "$OUT/proto_small.txt" ;;
    seq1d)
      OMP_NUM_THREADS=4 timeout ${SEQ_TESTS_LIMIT_S:-150} python3 -m pytest tests/plugins/wgrad_shifted_mma -m gpu -q \
        -p no:cacheprovider -n 4 -k "sequence or nvrtc" 2>&1 | tee "$OUT/pytest_seq.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20
      timeout ${SEQ_BENCH_LIMIT_S:-240} python3 tools/seq_bench.py --layers ${SEQ_LAYERS:-conformer,long-k31,mamba,conformer-k15,hyena-k128} \
        --json "$OUT/seq1d.json" 2>&1 | grep -v -i warn | tee "$OUT/seq1d.txt" ;;
    short1d)
      # issue 10's Mamba row: the short-1-D family's GPU tests, then tools/seq_bench.py on the k <= 9 layers
      OMP_NUM_THREADS=4 timeout ${SHORT1D_TESTS_LIMIT_S:-150} python3 -m pytest tests/plugins/wgrad_short1d -m gpu -q \
        -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_short1d.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20
      timeout ${SHORT1D_BENCH_LIMIT_S:-240} python3 tools/seq_bench.py \
        --layers ${SHORT1D_LAYERS:-mamba,mamba-causal,mamba-b8-d2560,mamba-b4-d5120,tcn-k3} \
        --json "$OUT/short1d.json" 2>&1 | grep -v -i warn | tee "$OUT/short1d.txt" ;;
    native)
      # issue 9: the native warm path built (and timed) before the parts that load it
      timeout 150 python3 -c "import time; from convwgrad.provider import native; t = time.time(); native.load(); print(native.status(), f'({time.time() - t:.1f} s)')" 2>&1 | tee "$OUT/native_build.txt" ;;
    hostpaired)
      # issue 9's host target by the paired method: ways interleaved in rounds, thread CPU time a call
      timeout ${HOSTPAIRED_LIMIT_S:-150} python3 tools/host_overhead.py --paired --rounds ${HOSTPAIRED_ROUNDS:-60} \
        --block 20 --json "$OUT/host_paired.json" 2>&1 | grep -v Warn | tee "$OUT/host_paired.txt" ;;
    table9)
      timeout ${TABLE_LIMIT_S:-330} python3 tools/step_bench.py --same-model --with-control --rounds ${TABLE_ROUNDS:-8} \
        --models ${TABLE_MODELS:-convnext_tiny:64,mobilenetv2_100:128,efficientnet_b0:128,regnety_016:128,unireplknet_t:32} \
        --json "$OUT/steps_table9.json" 2>&1 | grep -v -i warn | tee "$OUT/steps_table9.txt" | grep -E "^[a-z]|fastest quarter"
      timeout ${TABLE_LAYERS_LIMIT_S:-120} python3 tools/step_bench.py --models unireplknet_t:32 --layouts channels_last,contiguous \
        --rounds 1 --layers --json "$OUT/layers_unirep.json" 2>&1 | grep -v -i warn > "$OUT/layers_unirep.txt"
      grep -E "^[a-z]|all [0-9]+ grouped" "$OUT/layers_unirep.txt" ;;
    unirephost)
      # issue 9's UniRepLKNet-T b32 NCHW row: main-thread host time and cProfile differences (both layouts), then
      # torch.profiler's host-op and kernel differences of a patched step in NCHW (the backward's thread included)
      for layout in contiguous channels_last; do
        timeout ${UNIREPHOST_LIMIT_S:-100} python3 tools/step_host.py --models unireplknet_t:32 --layout $layout \
          --steps 20 --top 30 2>&1 | grep -v -i warn | tee "$OUT/step_host_unirep_$layout.txt" | grep -E "host ms|profiled"
      done
      timeout ${UNIREPPROF_LIMIT_S:-120} python3 tools/step_bench.py --models unireplknet_t:32 --layouts contiguous \
        --same-model --rounds 2 --profile --json "$OUT/profile_unirep_nchw.json" 2>&1 | grep -v -i warn \
        | tee "$OUT/profile_unirep_nchw.txt" | grep -E "^unirep|profile per step" ;;
    regnethost)
      # issue 9's last open row: RegNetY-016 b128 channels_last, all 27 layers planned for cuDNN, reads 0.98-0.99x;
      # main-thread host time and cProfile differences, then torch.profiler's kernel and host-op differences
      timeout ${REGNETHOST_LIMIT_S:-100} python3 tools/step_host.py --models regnety_016:128 --layout channels_last \
        --steps 20 --top 30 2>&1 | grep -v -i warn | tee "$OUT/step_host_regnet_cl.txt" | grep -E "host ms|profiled"
      timeout ${REGNETPROF_LIMIT_S:-120} python3 tools/step_bench.py --models regnety_016:128 --layouts channels_last \
        --same-model --rounds 2 --profile --json "$OUT/profile_regnet_cl.json" 2>&1 | grep -v -i warn \
        | tee "$OUT/profile_regnet_cl.txt" | grep -E "^regnet|profile per step" ;;
    unirep3)
      # UniRepLKNet-T channels_last eager, same model, A/A arm: the built-in router, every depthwise layer to cuDNN,
      # and its 13x13 layers (rows >= 14) to the shifted-MMA family
      for plugin in "" "--plugin tools/route_experiments.py:depthwise_to_aten" \
          "--plugin tools/route_experiments.py:large_channels_last_to_shifted_mma"; do
        timeout ${UNIREP3_LIMIT_S:-150} python3 tools/step_bench.py --same-model --with-control \
          --rounds ${UNIREP_ROUNDS:-3} $plugin --models ${UNIREP_MODELS:-unireplknet_t:32} --layouts channels_last 2>&1 \
          | grep -v -i warn | tee -a "$OUT/steps_unirep3.txt" | grep -E "^unirep|plugin|host ms"
      done ;;
    regnetnchw)
      timeout ${REGNET_LIMIT_S:-150} python3 tools/step_bench.py --same-model --with-control --rounds ${REGNET_ROUNDS:-5} \
        --models regnety_016:128 --layouts contiguous 2>&1 | grep -v -i warn | tee "$OUT/steps_regnet_nchw.txt" \
        | grep -E "^regnet|host ms" ;;
    oldnew)
      # the any-strides kernel of git c52017f beside this checkout's, one process, and ncu of each on the 27x27 layer
      mkdir -p build  # build/kernels_old.cu is carried where the copy has no .git
      git show c52017f:convwgrad/plugins/wgrad_shifted_mma/kernels.cu > build/kernels_git.cu 2>/dev/null \
        && mv build/kernels_git.cu build/kernels_old.cu
      timeout ${OLDNEW_LIMIT_S:-120} python3 tools/mma_old_vs_new.py --old build/kernels_old.cu --only replk31b-14-c512-k27 \
        --only replk31b-28-c256-k29 --only replk31b-56-c128-k31 --only unirep-14-c320-k13 --only replk31b-7-c1024-k13 \
        2>&1 | grep -v -i warn | tee "$OUT/mma_old_vs_new.txt"
      for arm in ${OLDNEW_NCU_ARMS-old new}; do
        timeout 60 ncu --kernel-name wgrad_shifted_mma_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
          python3 tools/mma_old_vs_new.py --old build/kernels_old.cu --only replk31b-14-c512-k27 --arms $arm \
          > "$OUT/ncu_mma_${arm}_k27.txt" 2>&1
        grep -E "Duration|Throughput|Registers|Issued|Eligible|Hit Rate|Stall|Achieved Occ|Block Limit" \
          "$OUT/ncu_mma_${arm}_k27.txt" | head -20
      done ;;
    hostoverhead)
      timeout 120 python3 tools/host_overhead.py --calls 100 --json "$OUT/host_overhead.json" 2>&1 | grep -v Warn \
        | tee "$OUT/host_overhead.txt" ;;
    compiledsteps)
      # torch.compile's default mode (no CUDA graphs), stock vs patched, every layer planned for torch in eager:
      # session 10 measured 0.88-0.95x before the stock backward and the forward lowering landed
      for model in ${COMPILED_MODELS:-convnext_tiny:64 efficientnet_b0:128 mobilenetv2_100:128}; do
        timeout ${COMPILEDSTEPS_LIMIT_S:-190} python3 tools/step_bench.py --models $model --layouts channels_last \
          --compile --rounds 3 --steps 8 --json "$OUT/steps_compiled_${model%%:*}.json" 2>&1 | grep -v -i warn \
          | tee "$OUT/steps_compiled_${model%%:*}.txt" | tail -3
      done ;;
    hostparts2)
      # this checkout, then session 9's library (build/old, carried) the same way: the host path before and after
      timeout 150 python3 tools/host_parts.py --plugin tools/route_experiments.py:small_depthwise_to_staged 2>&1 \
        | grep -v Warn | tee "$OUT/host_parts_new.txt"
      PYTHONPATH=$PWD/build/old timeout 150 python3 tools/host_parts.py \
        --plugin tools/route_experiments.py:small_depthwise_to_staged 2>&1 | grep -v Warn | tee "$OUT/host_parts_old.txt" ;;
    hosttests)
      OMP_NUM_THREADS=4 timeout 200 python3 -m pytest tests/provider tests/frameworks -m gpu -q -p no:cacheprovider -n 4 \
        2>&1 | tee "$OUT/pytest_host.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -30 ;;
    stagedhost)
      timeout 120 python3 tools/backward_host.py mbv2-14-c384-k3 mbv2-7-c960-k3 2>&1 | grep -v Warn | tee "$OUT/host_aten.txt"
      timeout 120 python3 tools/backward_host.py --plugin tools/route_experiments.py:small_depthwise_to_staged \
        mbv2-14-c384-k3 mbv2-7-c960-k3 2>&1 | grep -v Warn | tee "$OUT/host_staged.txt" ;;
    familytests)
      OMP_NUM_THREADS=4 timeout 280 python3 -m pytest tests/plugins tests/provider -m gpu -q -p no:cacheprovider -n 4 2>&1 \
        | tee "$OUT/pytest_families.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -30 ;;
    stagedrule)
      timeout 200 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts channels_last \
        --plugin tools/route_experiments.py:large_depthwise_to_staged --models mobilenetv2_100:128,convnext_tiny:64 \
        --json "$OUT/steps_stagedrule.json" 2>&1 | grep -v Warn | tee "$OUT/steps_stagedrule.txt" ;;
    stagedgraphs)
      timeout ${CUDAGRAPHS_LIMIT_S:-500} python3 tools/step_bench.py --models mobilenetv2_100:128 --layouts channels_last \
        --compile reduce-overhead --rounds 2 --steps 6 --plugin tools/route_experiments.py:small_depthwise_to_staged \
        --json "$OUT/steps_stagedgraphs.json" 2>&1 | grep -v Warn | tee "$OUT/steps_stagedgraphs.txt" ;;
    stagedsweep)
      timeout 240 python3 tools/proto_staged.py --bench --sweep ${STAGED_SWEEP:-grid} --layers convnext-28-c192-k7,convnext-14-c384-k7,convnext-7-c768-k7 \
        --json "$OUT/staged_sweep.json" 2>&1 | grep -v -i "warn\|leaked\|nanobind\|skipped rem" | tee "$OUT/staged_sweep.txt" ;;
    stagedconvnext)
      timeout 100 python3 tools/step_bench.py --models convnext_tiny:64,efficientnet_b0:128 --layouts channels_last \
        --rounds 1 --layers --plugin tools/route_experiments.py:small_depthwise_to_staged \
        --json "$OUT/layers_convnext_staged.json" 2>&1 | grep -v -i "warn" | tee "$OUT/layers_convnext_staged.txt" | tail -45
      timeout ${CUDAGRAPHS_LIMIT_S:-240} python3 tools/step_bench.py --models convnext_tiny:64 --layouts channels_last \
        --compile reduce-overhead --rounds 2 --steps 6 --plugin tools/route_experiments.py:small_depthwise_to_staged \
        --json "$OUT/steps_convnext_graphs.json" 2>&1 | grep -v Warn | tee "$OUT/steps_convnext_graphs.txt" ;;
    graphtests9)
      OMP_NUM_THREADS=4 timeout ${GRAPHTESTS_LIMIT_S:-240} python3 -m pytest tests/frameworks/test_cuda_graphs_gpu.py \
        tests/plugins/wgrad_staged/test_staged_gpu.py tests/provider/test_graph_route.py -q -p no:cacheprovider -n 4 \
        --durations=8 2>&1 | tee "$OUT/pytest_graphroute.txt" | grep -E "FAILED|ERROR|Error|passed|failed|s call" | tail -40 ;;
    graphsteps)
      for model in ${GRAPH_MODELS:-mobilenetv2_100:128 efficientnet_b0:128}; do
        timeout ${GRAPHSTEPS_LIMIT_S:-280} python3 tools/step_bench.py --models $model --layouts channels_last \
          --compile reduce-overhead --rounds 3 --steps 6 --json "$OUT/steps_graphroute_${model%%:*}.json" 2>&1 \
          | grep -v Warn | tee "$OUT/steps_graphroute_${model%%:*}.txt" | tail -8
      done ;;
    verify10)
      OMP_NUM_THREADS=4 timeout 360 python3 -m pytest tests -m gpu -q -p no:cacheprovider -n 4 --durations=5 2>&1 \
        | tee "$OUT/pytest_gpu.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -30
      timeout 120 python3 -m pytest tests/provider/test_graph_route.py -q -p no:cacheprovider 2>&1 | tail -3 ;;
    pathology)
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 4 --layouts channels_last \
        --plugin tools/route_experiments.py:cudnn_5x5_s2_to_staged --models efficientnet_b0:128 \
        --json "$OUT/steps_pathology.json" 2>&1 | grep -v Warn | tee "$OUT/steps_pathology.txt" ;;
    stagedsteps)
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 3 --layouts channels_last \
        --plugin tools/route_experiments.py:small_depthwise_to_staged --models convnext_tiny:64,mobilenetv2_100:128 \
        --json "$OUT/steps_staged.json" 2>&1 | grep -v Warn | tee "$OUT/steps_staged.txt" ;;
    rolling56)
      timeout 200 python3 tools/proto_rolling.py --bench --layers convnext-56-c96-k7,convnext-28-c192-k7 \
        --json "$OUT/rolling56.json" 2>&1 | grep -v Warn | tee "$OUT/rolling56.txt"
      timeout 120 ncu --kernel-name regex:rolling --launch-skip 2 --launch-count 1 --section WarpStateStats \
        --section SchedulerStats --section Occupancy --print-details all \
        python3 tools/proto_rolling.py --one convnext-56-c96-k7:5 > "$OUT/ncu_rolling56.txt" 2>&1
      grep -iE "stall|Issued|Eligible|Active Warps|Achieved" "$OUT/ncu_rolling56.txt" | head -40 ;;
    unirepprofile)
      timeout 150 python3 tools/step_bench.py --models unireplknet_t:32 --layouts channels_last --rounds 2 --profile \
        --json "$OUT/profile_unirep32.json" 2>&1 | grep -v Warn | tee "$OUT/profile_unirep32.txt" | tail -30 ;;
    protogpu)
      OMP_NUM_THREADS=4 timeout 120 python3 -m pytest tests/plugins/wgrad_direct/test_rolling_prototype.py -q \
        -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_proto.txt" | tail -3 ;;
    graphtests)
      OMP_NUM_THREADS=4 timeout 150 python3 -m pytest tests/frameworks/test_cuda_graphs_gpu.py \
        "tests/plugins/wgrad_shifted/test_shifted_gpu.py::test_shifted_bf16_vs_reference" -k "graph or captured or k7-d2" \
        -m gpu -q -p no:cacheprovider -n 4 2>&1 | tee "$OUT/pytest_graphs.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -20 ;;
    unirep)
      timeout 240 python3 tools/step_bench.py --same-model --with-control --rounds 3 \
        --models unireplknet_t:32,unireplknet_t:128 --layouts channels_last --json "$OUT/steps_unirep.json" 2>&1 \
        | grep -v Warn | tee "$OUT/steps_unirep.txt" ;;
    steps)
      timeout 200 python3 tools/step_bench.py --models replknet31b:16,unireplknet_t:32,convnext_tiny:64,efficientnet_b0:128 \
        --rounds 2 --json "$OUT/steps.json" 2>&1 | grep -v Warn | tee "$OUT/steps.txt" ;;
  esac
  echo "[$part: $((SECONDS - start)) s]" | tee -a "$OUT/parts.txt"
done
