#!/usr/bin/env bash
# Quick start, tests: install the build, run and test dependencies (tools/install-test-deps.sh), build, run every test (C++, C API, Python, CLI, GPU tests that
# skip without a device) with ctest. The last line is the summary: "ctest: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-test-deps.sh
# FLASHKIT_SANITIZE=1: first the ASan/UBSan build and run of the C++/C tests (tools/sanitize.sh, its own build dir);
# a failure there fails this script, but only after the normal tests, so the last line stays the summary below.
sanitize_status=0
if [ "${FLASHKIT_SANITIZE:-0}" = 1 ]; then
  bash tools/sanitize.sh || sanitize_status=$?
fi
# FLASHKIT_FUZZ_SECONDS=N (.ci/run sets 30): then every libFuzzer target (safetensors gguf tokenizer config
# chat_template) runs for N seconds (tests/fuzz/run.sh, its own build dir build-fuzz) when clang++ is present. A crash
# (or a fuzz build that fails) fails this script, again only after the normal tests. Cost, measured on the 2-core
# development machine shared by five builds (load ~4): 125 s to build the five targets from scratch (clang, -O1,
# ASan+UBSan+libFuzzer instrumentation), 1 s of seeds, then 158 s for 5 x 30 s of fuzzing with corpus loading: about
# 5 minutes next to the sanitizer (~13 min) and normal (~5 min) runs, well inside CI's 90 minutes.
fuzz_status=0
if [ -n "${FLASHKIT_FUZZ_SECONDS:-}" ]; then
  if ! [[ "$FLASHKIT_FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]]; then  # 0 would make libFuzzer run without end
    echo "fuzz: FLASHKIT_FUZZ_SECONDS must be a positive number of seconds, got '$FLASHKIT_FUZZ_SECONDS'"
    fuzz_status=2
  elif command -v clang++ >/dev/null 2>&1; then
    fuzz_start=$(date +%s)
    sh tests/fuzz/run.sh --seconds "$FLASHKIT_FUZZ_SECONDS" --seed 1 || fuzz_status=$?
    echo "fuzz: $(( $(date +%s) - fuzz_start )) s, exit status $fuzz_status (crash inputs: build-fuzz/crash-*)"
  else
    echo "fuzz: clang++ not found, fuzzing skipped (tools/install-test-deps.sh installs clang)"
  fi
fi
bash tools/build.sh -DFLASHKIT_BUILD_TESTS=ON
cd build
log=$(mktemp)
status=0
ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee "$log" || status=$?
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
skipped=$(grep -c '(Skipped)' "$log" || true)
rm -f "$log"
if [ -z "$total" ]; then
  echo "ctest: no summary (exit status $status)"
  exit 1
fi
[ "$sanitize_status" = 0 ] || echo "tools/sanitize.sh failed (exit status $sanitize_status): see its output above"
[ "$fuzz_status" = 0 ] || echo "the fuzz step failed (exit status $fuzz_status: a crash, a failed fuzz build or a bad FLASHKIT_FUZZ_SECONDS): see its output above"
[ "$status" != 0 ] || status=$sanitize_status
[ "$status" != 0 ] || status=$fuzz_status
echo
echo "ctest: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit "$status"
