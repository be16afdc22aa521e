#!/usr/bin/env bash
# Before/after in one run on the GPU machine: the sources in ab-before/ (an earlier commit, unpacked here with
#   rm -rf ab-before && git archive REV --prefix=ab-before/ | tar x      -- never committed)
# against the current tree. Builds both (sm_90a), then runs each benchmark before, after, before, after, so drift
# between the two shows up as a before/before or after/after difference:
#   decode  bench/cuda/bench_attention.py --decode-only  (library decode, batch 1/16/64, 1k-128k keys, vs SDPA)
#   engine  the engine's decode/prefill benchmark, random weights (gemma-3-270m, Llama-3.2-1B), graphs on/off
#   grid    bench/cuda/bench_attention.py --quick        (prefill forward/backward, a few points)
#   tools/gpu/ab.sh [STAGES...]   default: build decode engine
# Results in $OUT/ab/{before,after}-{decode,engine,grid}-{1,2}/ and $OUT/ab.log.
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
tree() { [ "$1" = before ] && echo "$PWD/ab-before" || echo "$PWD"; }
# The after tree builds into $BUILD (default build-gpu, shared with check.sh/engine.sh: a warm build is reused).
bdir() { [ "$1" = before ] && echo "$PWD/ab-before/build-ab" || echo "$PWD/${BUILD:-build-gpu}"; }
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
[ -d ab-before ] || { log "no ab-before/ tree (see the header)"; exit 2; }
for st in "${STAGES[@]}"; do
  case $st in
    build)
      for side in before after; do
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
      for i in 1 2; do for side in before after; do
        t=$(tree $side); d="$OUT/ab/$side-$st-$i"; mkdir -p "$d"
        PYTHONPATH="$t/python" FLASHKIT_LIBRARY="$(bdir $side)/lib/libflashkit.so" \
          run "${st}_${side}_$i" python3 "$t/bench/cuda/bench_attention.py" --out "$d" "${args[@]}"
      done; done
      ;;
    engine)
      for i in 1 2; do for side in before after; do
        t=$(tree $side); d="$OUT/ab/$side-engine-$i"; mkdir -p "$d"
        run "engine_${side}_$i" engine_bench "$(bdir $side)" "$d/engine.json"
      done; done ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
