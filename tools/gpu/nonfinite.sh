#!/usr/bin/env bash
# The CUDA forward's answer for non-finite input as branch wip/nonfinite implements it (docs/worklog/attention-cuda.md v13, retired)
# on the device machine, in one call of at most 5 minutes:
#   build     this tree (the library and the CUDA tests), and the ab-before/ tree (the library only, in the
#             background while the tests run) when there is one
#   test      the whole CUDA attention test binary (the NonFinite tests included; all of it must pass)
#   sanitize  compute-sanitizer memcheck on the non-finite tests' fix-up subset
#   ab        forward speed, before/after interleaved, 2 rounds (tools/gpu/nonfinite_ab.py): prefill d64/d128 at
#             512/2k/16k tokens causal and not, decode batch 1/16 at 1k/32k keys; the bar: prefill +-2 %, decode
#             +-0.2 us
#   tools/gpu/nonfinite.sh [STAGES...]    default: build test sanitize ab
# The before tree (never committed), made before the run from the merge-base with main:
#   rm -rf ab-before && git archive "$(git merge-base HEAD main)" --prefix=ab-before/ | tar x
# Results: $OUT/nonfinite.log (every step, the test output), $OUT/ab-nonfinite.txt (the A/B table and verdict),
# $OUT/nonfinite-logs.tar.gz (the A/B JSON files, the before build's log, the sanitizer log). Exit status non-zero
# if a stage failed (an A/B beyond the bar does not fail the script: the lead judges the numbers).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps   # PCRE2/ICU for the tokenizer (run with carry=[".fkdeps"])
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT/ab-nonfinite"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/nonfinite.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize ab)
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
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests || exit 1
      if [ -d "$BEFORE" ]; then  # the before library builds while the tests run (they are not timed)
        ( cmake -S "$BEFORE" -B "$BEFORE/build-ab" "${CMAKE_ARGS[@]}" && cmake --build "$BEFORE/build-ab" -j8 --target flashkit ) \
          > "$OUT/ab-nonfinite/build-before.log" 2>&1 &
        before_pid=$!
      else
        log "no ab-before/ tree: the ab stage will be skipped (see the header)"
      fi ;;
    test)
      run cuda_tests timeout 240 "$TESTS" --gtest_brief=1
      grep -E "^\[  (PASSED|FAILED)  \]" "$LOG" | tail -20 ;;
    sanitize)
      run memcheck_nonfinite timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --log-file "$OUT/ab-nonfinite/memcheck.log" \
        "$TESTS" --gtest_filter='CudaAttention.NonFiniteFixupsUnderSanitizer' --gtest_brief=1 ;;
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
