#!/usr/bin/env bash
# Contract B for non-finite input (include/flashkit/attention.hpp; docs/worklog/attention-cuda.md v15) on the device
# machine, in one call of about 5 minutes with a cold build:
#   build     this tree: the library, the CUDA attention tests and the engine tests (for the paged decode kernel)
#   test      the whole CUDA attention test binary (grid, decode family, paths, NonFiniteForward and
#             NonFiniteScoresOverflow: every forward path row by row against the rule; all must pass) and the paged
#             decode kernel's tests (CudaPaged*, with AMinusInfScoreWeighsZero)
#   sanitize  compute-sanitizer memcheck on NonFiniteUnderSanitizer (6 cases on every forward path) and the paged -inf test
#   ab        not in the default: v15 changes no flash or decode kernel of the library (the paged kernel's change is
#             an initial value, ptxas-identical; the cuBLAS path's softmax is the baseline). Kept for a later change:
#             forward speed, before/after interleaved, 2 rounds (tools/gpu/nonfinite_ab.py) against an ab-before/ tree
#             (rm -rf ab-before && git archive "$(git merge-base HEAD main)" --prefix=ab-before/ | tar x)
#   tools/gpu/nonfinite.sh [STAGES...]    default: build test sanitize
# Results: $OUT/nonfinite.log (every step, the test output), $OUT/nonfinite-logs.tar.gz (the sanitizer logs; the A/B
# files when ab ran). Exit status non-zero if a stage failed.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps   # PCRE2/ICU for the tokenizer (run with carry=[".fkdeps"])
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT/ab-nonfinite"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/nonfinite.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize)
status=0
export PYTHONUNBUFFERED=1
BEFORE=$PWD/ab-before
CMAKE_ARGS=(-G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS"
            -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
TESTS="$BUILD/tests/attention/flashkit_cuda_tests"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
before_pid=
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" "${CMAKE_ARGS[@]}" || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_engine_tests || exit 1
      if [ -d "$BEFORE" ] && printf '%s\n' "${STAGES[@]}" | grep -qx ab; then  # the before library builds while the tests run
        ( cmake -S "$BEFORE" -B "$BEFORE/build-ab" "${CMAKE_ARGS[@]}" && cmake --build "$BEFORE/build-ab" -j8 --target flashkit ) \
          > "$OUT/ab-nonfinite/build-before.log" 2>&1 &
        before_pid=$!
      fi ;;
    test)
      run cuda_tests timeout 240 "$TESTS" --gtest_brief=1
      run paged_tests timeout 90 "$BUILD/tests/engine/flashkit_engine_tests" --gtest_filter='CudaPaged*' --gtest_brief=1
      grep -E "^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] .*NonFinite|AMinusInf" "$LOG" | tail -20 ;;
    sanitize)
      run memcheck_nonfinite timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --log-file "$OUT/ab-nonfinite/memcheck.log" \
        "$TESTS" --gtest_filter='CudaAttention.NonFiniteUnderSanitizer' --gtest_brief=1
      run memcheck_paged timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --log-file "$OUT/ab-nonfinite/memcheck-paged.log" \
        "$BUILD/tests/engine/flashkit_engine_tests" --gtest_filter='CudaPagedKernel.AMinusInfScoreWeighsZero' --gtest_brief=1 ;;
    ab)
      [ -d "$BEFORE" ] || { log "ab: skipped, no ab-before/ tree"; continue; }
      if [ -n "$before_pid" ]; then wait "$before_pid" || { log "ab: the before build failed (ab-nonfinite/build-before.log)"; status=1; continue; }
      elif [ ! -f "$BEFORE/build-ab/lib/libflashkit.so" ]; then  # ab without build in this call
        run configure_before cmake -S "$BEFORE" -B "$BEFORE/build-ab" "${CMAKE_ARGS[@]}" || { status=1; continue; }
        run build_before cmake --build "$BEFORE/build-ab" -j"$(nproc)" --target flashkit || { status=1; continue; }
      fi
      before_pid=
      for i in 1 2; do for side in before after; do
        t=$PWD; lib="$PWD/$BUILD/lib/libflashkit.so"
        [ $side = before ] && t=$BEFORE && lib="$BEFORE/build-ab/lib/libflashkit.so"
        PYTHONPATH="$t/python" FLASHKIT_LIBRARY="$lib" \
          run "ab_${side}_$i" timeout 100 python3 tools/gpu/nonfinite_ab.py --out "$OUT/ab-nonfinite/$side-$i.json"
      done; done
      python3 tools/gpu/nonfinite_ab.py --compare "$OUT/ab-nonfinite" | tee "$OUT/ab-nonfinite.txt" | tee -a "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
[ -n "$before_pid" ] && wait "$before_pid" 2>/dev/null
tar -czf "$OUT/nonfinite-logs.tar.gz" -C "$OUT" ab-nonfinite && rm -rf "$OUT/ab-nonfinite"
log "nonfinite.sh: status $status"
exit $status
