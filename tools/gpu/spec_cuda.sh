#!/usr/bin/env bash
# Speculative decoding on CUDA (issue 17: decode-exact verification steps inside CUDA graphs; docs/speculative.md,
# docs/worklog/spec-cuda.md), on the GPU machine (an H200), in one call that fits in ~5 minutes:
#   build     the library, the CLI, flashkit_spec_tests, flashkit_engine_tests and flashkit_serve_tests (sm_90a)
#   test      every spec test (SpecCuda.*: verification rows bitwise equal to decode steps, greedy speculative output
#             equal to plain greedy output, random step sizes / rollbacks with bf16 and f32 weights, fused and
#             unfused, graphs on and off, wrapped rings at the largest step, verification steps replayed as
#             graphs), the engine's CUDA tests (CudaExactRows.*: the GEMV's rows and the per-row decode attention
#             against one-row launches; CudaEngineOps.*, CudaEngineModel.*, DeviceGreedy.*, ...),
#             CudaServe.* (paged steps against sessions, serve greedy output against generate())
#   sanitize  compute-sanitizer memcheck on CudaExactRows.* and SpecCuda.VerifyRowsMatchDecodeSteps
#   bench     flashkit bench spec on models/target + models/draft: K 1..8 and auto, draft / ngram / tree, free and
#             grounded, greedy (each row checked against plain decoding: the "exact" column) -> spec-cuda.{json,txt},
#             and the target's CUDA graph counts (every verification step captured or replayed, none eager);
#   ab        the A/B rows (K 1, 4, 8): FLASHKIT_SPEC_EXACT=0 (multi-row kernels, eager), FLASHKIT_CUDA_GRAPHS=0
#             -> spec-cuda-ab.txt
#   tools/gpu/spec_cuda.sh [STAGES...]     default: build test bench ab sanitize (the numbers before the slow memcheck)
# Results: $OUT/spec_cuda.log (everything), $OUT/spec-cuda.json, $OUT/spec-cuda.txt, $OUT/spec-cuda-ab.txt,
# $OUT/failed.txt. Exit status non-zero if a stage failed. carry=[".fkdeps.tar.xz"]: the binaries link the
# tokenizer's PCRE2/ICU (carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/spec_cuda.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench ab sanitize)
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
S=$BUILD/tests/spec/flashkit_spec_tests
E=$BUILD/tests/engine/flashkit_engine_tests
FK=$BUILD/bin/flashkit
failed() { grep -hE "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"; }
# The last "bench spec" table of the log (from its title line to its last baseline line).
last_table() { awk '/^bench spec:/{t=""; on=1} on{t=t $0 "\n"} /^baseline grounded/{on=0; last=t} END{printf "%s", last}' "$LOG"; }
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cli flashkit_spec_tests \
        flashkit_engine_tests flashkit_serve_tests || exit 1 ;;
    test)
      run spec_tests timeout 240 "$S"   # not brief: the SKIPPED lines are checked
      grep -qE "SKIPPED.*SpecCuda" "$LOG" && { log "SpecCuda was skipped: no GPU visible?"; status=1; }
      run engine_cuda_tests timeout 240 "$E" --gtest_brief=1 --gtest_filter='*Cuda*:DeviceGreedy.*'
      # serving's paged steps share the decode kernel: its CUDA steps against sessions stay green
      run serve_cuda_tests timeout 120 "$BUILD/tests/serve/flashkit_serve_tests" --gtest_brief=1 --gtest_filter='CudaServe.*'
      failed ;;
    sanitize)
      run memcheck_exact_rows timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" --gtest_brief=1 \
        --gtest_filter='CudaExactRows.*'
      run memcheck_spec timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$S" --gtest_brief=1 \
        --gtest_filter='SpecCuda.VerifyRowsMatchDecodeSteps'
      failed ;;
    bench)
      [ -d models/target ] && [ -d models/draft ] || { log "bench: models/target or models/draft missing"; status=1; continue; }
      run spec_bench timeout 240 "$FK" bench spec -m models/target --draft models/draft --device cuda -n 128 \
        --repeats 3 --json "$OUT/spec-cuda.json"
      last_table > "$OUT/spec-cuda.txt"
      grep -qE " NO$" "$OUT/spec-cuda.txt" && { log "bench: a speculative run differs from plain decoding"; status=1; }
      graphs=$(grep -h "^target graph steps" "$LOG" | tail -1)
      echo "$graphs" >> "$OUT/spec-cuda.txt"
      echo "$graphs" | grep -qE " [1-9][0-9]* captured, [0-9]+ replayed, 0 eager$" ||
        { log "bench: target steps ran eagerly or no graph counts: '$graphs'"; status=1; }
      cat "$OUT/spec-cuda.txt" ;;
    ab)  # the non-exact verification and eager steps beside the default (K 1, 4, 8)
      : > "$OUT/spec-cuda-ab.txt"
      for ab in FLASHKIT_SPEC_EXACT=0 FLASHKIT_CUDA_GRAPHS=0; do
        log "A/B $ab" | tee -a "$OUT/spec-cuda-ab.txt" > /dev/null
        run "spec_bench_$ab" timeout 120 env "$ab" "$FK" bench spec -m models/target --draft models/draft --device cuda \
          -n 128 --repeats 3 --k 1,4,8 --no-auto
        last_table >> "$OUT/spec-cuda-ab.txt"
      done
      cat "$OUT/spec-cuda-ab.txt" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
