#!/usr/bin/env bash
# Quick start, tests: install dependencies, build, run every test (C++, C API, Python, CLI, GPU tests that
# skip without a device) with ctest. The last line is the summary: "ctest: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# FLASHKIT_SANITIZE=1: first the ASan/UBSan build and run of the C++/C tests (tools/sanitize.sh, its own build dir);
# a failure there fails this script, but only after the normal tests, so the last line stays the summary below.
sanitize_status=0
if [ "${FLASHKIT_SANITIZE:-0}" = 1 ]; then
  bash tools/sanitize.sh || sanitize_status=$?
fi
bash tools/build.sh
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
[ "$status" != 0 ] || status=$sanitize_status
echo
echo "ctest: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit "$status"
