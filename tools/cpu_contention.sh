#!/usr/bin/env bash
# Decode tokens/s of `flashkit generate -m models/target` with passive (the default) and active (spinning) OpenMP
# waits, on an idle machine and next to one busy process (`yes > /dev/null`), interleaved so that the load of the
# machine hits both policies alike. Prints one line per case: the tokens/s of every run. bench/results/cpu-contention.md
#   tools/cpu_contention.sh [REPS] [BUSY]   (default 4 runs per case, 1 busy process; FLASHKIT_BIN: the binary,
#                                            default build/bin/flashkit; PYTHON: default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-4}
nbusy=${2:-1}
bin=${FLASHKIT_BIN:-./build/bin/flashkit}
py=${PYTHON:-/usr/bin/python3}
busy_pids=()
stats=$(mktemp)
trap 'rm -f "$stats"; [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true' EXIT
trap 'exit 143' TERM INT  # a timeout still stops the busy processes (the EXIT trap)
run_case() {  # label FLASHKIT_CPU_WAIT
  local vals=()
  for _ in $(seq "$reps"); do
    FLASHKIT_CPU_WAIT=$2 "$bin" generate -m models/target -p "Once upon a time" -n 128 --ignore-eos \
      --temp 0 --stats-json "$stats" -o /dev/null -q
    vals+=("$("$py" -c "import json,sys; print(round(json.load(open(sys.argv[1]))['decode_tokens_per_s'], 1))" "$stats")")
  done
  echo "$1: ${vals[*]}"
}
for load in idle busy; do
  if [ "$load" = busy ]; then
    for _ in $(seq "$nbusy"); do yes > /dev/null & busy_pids+=($!); done
  fi
  for _ in 1 2; do
    run_case "$load passive" passive
    run_case "$load active" active
  done
done
