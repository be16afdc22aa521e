#!/usr/bin/env bash
# Finds the test that crashes a gtest binary and prints its backtrace: runs BINARY with line-buffered output (a
# crash loses a block-buffered log), takes the last "[ RUN ]" line, then runs that test alone under gdb (or
# cuda-gdb) for a host backtrace.
#   tools/gpu/crash_locate.sh BINARY [GTEST_FILTER]      output: $OUT/crash-<binary>.log
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BIN=$1; FILTER=${2:-*}
LOG="$OUT/crash-$(basename "$BIN").log"
stdbuf -oL -eL timeout 1200 "$BIN" --gtest_filter="$FILTER" > "$LOG" 2>&1
rc=$?
echo "== $(basename "$BIN"): rc=$rc" | tee -a "$LOG"
grep -E "^\[  FAILED  \]" "$LOG" | sort -u
[ $rc -eq 0 ] && exit 0
last=$(grep -E "^\[ RUN      \]" "$LOG" | tail -1 | sed 's/^\[ RUN      \] //')
echo "== last test started: $last" | tee -a "$LOG"
tail -15 "$LOG"
DBG=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
if [ -n "$last" ] && [ -n "$DBG" ]; then
  echo "== backtrace ($DBG)" | tee -a "$LOG"
  timeout 300 "$DBG" -batch -ex run -ex bt -ex "thread apply all bt 8" --args "$BIN" --gtest_filter="$last" 2>&1 \
    | grep -vE "^\[New Thread|^\[Thread .* exited|^warning:" | tail -80 | tee -a "$LOG"
fi
exit $rc
