#!/usr/bin/env bash
# The CUDA training kernels (src/train/cuda) on the GPU machine (an H200): build, tests, sanitizers, benchmark.
#   tools/gpu/train_cuda.sh [STAGES...]     default: build test sanitize bench
# stages:
#   build     cmake + ninja (sm_90a by default: ARCHS=...), only the kernel tests and the benchmark (they link the
#             kernels as their own small library, not libflashkit: a minute, not the attention build)
#   test      flashkit_train_cuda_tests (every kernel against its f64 reference; bitwise determinism)
#   sanitize  compute-sanitizer memcheck, racecheck (shared-memory partials of embedding_bwd and rmsnorm_bwd) and
#             initcheck on the same tests
#   bench     bench/train/bench_train_kernels.cu at the GPT-2-small shape -> train-cuda-bench.{txt,jsonl}
# Results in $OUT (or ./build-gpu-out): train-cuda.log and the benchmark files. Exit status: non-zero if any stage
# failed. The configure step needs the tokenizer's PCRE2/ICU files like the other GPU scripts: run
#   tools/gpu/engine.sh pack-deps   (here, once) and pass carry=[".fkdeps"] to the device run.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/train-cuda.log"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
status=0
T=$BUILD/tests/train/cuda/flashkit_train_cuda_tests
B=$BUILD/bench/train/flashkit_train_cuda_bench
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  nvcc --version | tail -1; git rev-parse --short HEAD 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || break
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_train_cuda_tests flashkit_train_cuda_bench || break
      ;;
    test) run train_cuda_tests "$T" --gtest_brief=1 ;;
    sanitize)
      # racecheck: the shared-memory partials and merges; initcheck: no kernel reads memory nothing wrote (cuBLAS
      # is left out: its workspace is its own business).
      run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_brief=1
      run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$T" \
        --gtest_filter='Embedding.*:RmsNorm.*:CrossEntropy.*:Reduce.*' --gtest_brief=1
      run initcheck compute-sanitizer --tool initcheck --error-exitcode 9 "$T" \
        --gtest_filter='Embedding.*:RmsNorm.*:CrossEntropy.*:GatedAct.*:Rope.*' --gtest_brief=1
      ;;
    bench)
      run bench "$B" "$OUT/train-cuda-bench.jsonl"
      sed -n '/^NVIDIA\|^[a-z_].* us /p' "$LOG" | tail -40 > "$OUT/train-cuda-bench.txt"
      cat "$OUT/train-cuda-bench.txt"
      ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
