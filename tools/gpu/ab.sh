#!/usr/bin/env bash
# Before/after in one run on the GPU machine: the sources in ab-before/ (an earlier commit, unpacked here with
#   rm -rf ab-before && git archive REV --prefix=ab-before/ | tar x      -- never committed)
# against the current tree. Builds both (sm_90a), then runs each benchmark before, after, before, after, so drift
# between the two shows up as a before/before or after/after difference:
#   decode  bench/cuda/bench_attention.py --decode-only  (library decode, batch 1/16/64, 1k-128k keys, vs SDPA)
#   engine  the engine's decode/prefill benchmark, random weights (gemma-3-270m, Llama-3.2-1B), graphs on/off
#   grid    bench/cuda/bench_attention.py --quick        (prefill forward/backward, a few points)
#   ncu     Nsight Compute kernel durations of the batch-1 library decode (ab/ncu-SIDE.csv)
#   tools/gpu/ab.sh [STAGES...]   default: build decode engine
# AB_SIDES (default "before after") names the trees: "after" is this tree, any other name X the sources in ab-X/
# (e.g. AB_SIDES="before mid after" compares two earlier commits with this one); AB_ROUNDS (default 2) rounds.
# Results in $OUT/ab/{SIDE}-{decode,engine,grid}-{1,2,...}/ and $OUT/ab.log.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT/ab"
LOG="$OUT/ab.log"
ARCHS=${ARCHS:-90a-real}
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build decode engine)
status=0
export PYTHONUNBUFFERED=1
read -r -a SIDES <<< "${AB_SIDES:-before after}"
ROUNDS=${AB_ROUNDS:-2}
tree() { [ "$1" != after ] && echo "$PWD/ab-$1" || echo "$PWD"; }
# The after tree builds into $BUILD (default build-gpu, shared with check.sh/engine.sh: a warm build is reused).
bdir() { [ "$1" != after ] && echo "$PWD/ab-$1/build-ab" || echo "$PWD/${BUILD:-build-gpu}"; }
# BUILDDIR OUTJSON: the engine benchmark of that build: bench/engine/flashkit_engine_bench, or, for a tree from
# before the benchmarks became executables, the disabled gtest it used to be.
engine_bench() {
  local b="$1"
  local env=(FLASHKIT_BENCH_RANDOM=1 FLASHKIT_BENCH_REPS=3 FLASHKIT_BENCH_NEW=128 FLASHKIT_BENCH_PREFILL=512
             FLASHKIT_BENCH_MODELS=$PWD/models/configs/gemma-3-270m.json,$PWD/models/configs/llama-3.2-1b.json
             FLASHKIT_BENCH_OUT="$2")
  if [ -x "$b/bench/engine/flashkit_engine_bench" ]; then env "${env[@]}" "$b/bench/engine/flashkit_engine_bench"
  else env "${env[@]}" "$b/tests/engine/flashkit_engine_tests" --gtest_also_run_disabled_tests --gtest_filter='CudaEngineBench.*'; fi
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$LOG" 2>&1
for side in "${SIDES[@]}"; do [ -d "$(tree $side)" ] || { log "no ab-$side/ tree (see the header)"; exit 2; }; done
for st in "${STAGES[@]}"; do
  case $st in
    build)
      for side in "${SIDES[@]}"; do
        t=$(tree $side)
        b=$(bdir $side)
        run "configure_$side" cmake -S "$t" -B "$b" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
          -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
        tg=(flashkit flashkit_engine_bench)  # older trees: the benchmark lived in the engine tests
        grep -q flashkit_engine_bench "$t/bench/engine/CMakeLists.txt" 2>/dev/null || tg=(flashkit flashkit_engine_tests)
        run "build_$side" cmake --build "$b" -j"$(nproc)" --target "${tg[@]}" || exit 1
      done ;;
    decode|grid)
      args=(--decode-only); [ $st = grid ] && args=(--quick --reps 5 --no-decode)
      for i in $(seq "$ROUNDS"); do for side in "${SIDES[@]}"; do
        t=$(tree $side); d="$OUT/ab/$side-$st-$i"; mkdir -p "$d"
        PYTHONPATH="$t/python" FLASHKIT_LIBRARY="$(bdir $side)/lib/libflashkit.so" \
          run "${st}_${side}_$i" python3 "$t/bench/cuda/bench_attention.py" --out "$d" "${args[@]}"
      done; done
      ;;
    engine)
      for i in $(seq "$ROUNDS"); do for side in "${SIDES[@]}"; do
        t=$(tree $side); d="$OUT/ab/$side-engine-$i"; mkdir -p "$d"
        run "engine_${side}_$i" engine_bench "$(bdir $side)" "$d/engine.json"
      done; done ;;
    ncu)
      # Kernel by kernel (Nsight Compute, clocks as they are): the library's batch-1 decode (32/8 heads, d128, 1k and
      # 8k keys), 20 calls each; says whether a before/after difference is in the kernels or between them.
      for side in "${SIDES[@]}"; do
        t=$(tree $side)
        PYTHONPATH="$t/python" FLASHKIT_LIBRARY="$(bdir $side)/lib/libflashkit.so" \
          run "ncu_$side" ncu --clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size \
            --csv --log-file "$OUT/ab/ncu-$side.csv" python3 -c "
import torch, flashkit.torch as fkt
for n in (1024, 8192):
    q = torch.randn(1, 1, 32, 128, device='cuda', dtype=torch.bfloat16)
    k = torch.randn(1, n, 8, 128, device='cuda', dtype=torch.bfloat16); v = torch.randn_like(k)
    for _ in range(20): fkt.attention_forward(q, k, v)
torch.cuda.synchronize()"
      done ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
