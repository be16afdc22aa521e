#!/usr/bin/env bash
# Passive vs spinning OpenMP waits on the device machine's host CPU (16 cores, quiet): does the new default
# (FLASHKIT_CPU_WAIT=passive, bench/results/cpu-contention.md) cost decode speed on an idle many-core machine, and what
# do 16 busy processes do to each policy? A CPU-only build of the CLI, then tools/cpu_contention.sh (3 runs per case, 2 with 16 busy,
# interleaved) on models/target. About 2-3 minutes.
#   tools/gpu/cpu_wait.sh        (carry=[".fkdeps.tar.xz"]: the tokenizer's PCRE2/ICU, tools/gpu/carried_deps.sh)
# Results: $OUT/cpu-wait.log (build and runs) and $OUT/cpu-wait.json (tokens/s per case). Exit status non-zero when a
# step failed.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-cpuwait}
LOG="$OUT/cpu-wait.log"
status=0
{ nproc; grep -m1 "model name" /proc/cpuinfo; uptime; } >> "$LOG" 2>&1
run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=OFF -DFLASHKIT_BUILD_TESTS=OFF || exit 1
run build cmake --build "$BUILD" --target flashkit_cli -j"$(nproc)" || exit 1
run info env -u OMP_WAIT_POLICY "$BUILD/bin/flashkit" info
for busy in 1 16; do
  reps=3; [ "$busy" = 16 ] && reps=2  # 16 busy processes with spinning waits is slow: keep the run inside 5 minutes
  log "contention, $busy busy process(es)"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT FLASHKIT_BIN="$BUILD/bin/flashkit" PYTHON=python3 \
    timeout 150 bash tools/cpu_contention.sh "$reps" "$busy" > "$OUT/cpu-wait-busy$busy.txt" 2>> "$LOG" || status=1
  sed "s/^/busy$busy | /" "$OUT/cpu-wait-busy$busy.txt" | tee -a "$LOG"
done
python3 - "$OUT" <<'PY' | tee -a "$LOG"
import json, statistics, sys
out = sys.argv[1]
res = {}
for busy in (1, 16):
    for line in open(f"{out}/cpu-wait-busy{busy}.txt"):
        label, vals = line.split(":")
        res.setdefault(f"busy_processes_{busy}", {}).setdefault(label.strip(), []).extend(float(v) for v in vals.split())
json.dump(res, open(f"{out}/cpu-wait.json", "w"), indent=1)
for k, cases in res.items():
    print(k, " | ".join(f"{c}: median {statistics.median(v):.1f} tok/s" for c, v in cases.items()))
PY
exit $status
