#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer run of the C++ and C tests (CPU only), in ./build-asan:
#   bash tools/sanitize.sh            configure, build the test binaries, run them (ctest -L, the C++/C labels)
#   FLASHKIT_SANITIZE_LABELS='cpp|capi' bash tools/sanitize.sh     another label subset
# Called by tools/test.sh when FLASHKIT_SANITIZE=1 (.ci/run sets it), before the normal build and tests, so the
# last line of a CI run stays tools/test.sh's ctest summary.
#
# What runs, and why this subset: CI has 2 cores and 90 minutes; the normal run takes ~5 min. The sanitizer build
# (-O1-ish RelWithDebInfo, instrumented) of the library and the gtest/C binaries is the bulk of the cost, so it
# builds only those targets (not the CLI or the analysis tool) and runs the labels whose code is ours end to end:
#   cpp (tests/attention: grid, errors, gradcheck, dtypes, non-finite rules, also the scalar/avx2 ISA entries;
#   tests/common: the environment reader; tests/ssm: the CPU scan and conv1d at every ISA build),
#   capi (the C API, attention and engine), engine (engine core, sampler, stop, fidelity, threads), model (readers,
#   bad files, fuzz corpus), tokenizer (unit tests).
# Python and CLI tests are not run: they would need the sanitizer runtime preloaded into python3.
# Measured on the 2-core development machine, shared by five builds (load ~14): from scratch, 43 min wall for the
# build but only ~13 min of CPU time for build and tests together, then 111-173 s for the 331 tests; so on CI's two
# dedicated cores about 8-10 min of build and 2-3 min of tests, next to the normal run's ~5 min. The whole label set
# fits the 90-minute budget, so no subset is needed; FLASHKIT_SANITIZE_LABELS narrows it. The script prints its own
# timing at the end.
#
# Leak checking is on; third-party one-time allocations (OpenMP/OpenBLAS thread pools, ICU's data cache) are
# suppressed in tools/sanitize.supp. UBSan stops at the first report (-fno-sanitize-recover=undefined).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FLASHKIT_SANITIZE_BUILD_DIR:-build-asan}
LABELS=${FLASHKIT_SANITIZE_LABELS:-cpp|capi|engine|model|tokenizer}
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
start=$(date +%s)
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
targets=(flashkit_tests flashkit_common_tests flashkit_capi_test flashkit_capi_engine_test flashkit_capi_spec_test
         flashkit_engine_tests flashkit_ssm_tests
         flashkit_model_tests flashkit_tokenizer_tests)
cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
built=$(date +%s)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/sanitize.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
(cd "$BUILD" && ctest --output-on-failure -j "$(nproc)" -L "$LABELS") || status=$?
end=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((end - built)) s (labels $LABELS), exit status $status"
exit "$status"
