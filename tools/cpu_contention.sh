#!/usr/bin/env bash
# Decode tokens/s of `flashkit generate -m models/target` with passive (the default) and active (spinning) OpenMP
# waits, on an idle machine and next to one busy process (`yes > /dev/null`), interleaved so that the load of the
# machine hits both policies alike. Prints one line per case: the tokens/s of every run. bench/results/cpu-contention.md
#   tools/cpu_contention.sh [REPS]   (default 4; build/bin/flashkit must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-4}
stats=$(mktemp)
trap 'rm -f "$stats"; [ -z "${busy:-}" ] || kill "$busy" 2>/dev/null || true' EXIT
run_case() {  # label FLASHKIT_CPU_WAIT
  local vals=()
  for _ in $(seq "$reps"); do
    FLASHKIT_CPU_WAIT=$2 ./build/bin/flashkit generate -m models/target -p "Once upon a time" -n 128 --ignore-eos \
      --temp 0 --stats-json "$stats" -o /dev/null -q
    vals+=("$(/usr/bin/python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['decode_tokens_per_s'], 1))" "$stats")")
  done
  echo "$1: ${vals[*]}"
}
for load in idle busy; do
  [ "$load" = idle ] || { yes > /dev/null & busy=$!; }
  for _ in 1 2; do
    run_case "$load passive" passive
    run_case "$load active" active
  done
done
