#!/usr/bin/env bash
# CPU benchmark of the model engine: prefill and decode tokens/s with the time split by op kind, for the tiny
# fixtures and for a gemma-3-270m-sized model with random weights (built in memory from
# models/configs/gemma-3-270m.json; nothing is written to disk), in f32 and bf16.
#
#   bench/engine/bench_cpu.sh [BUILD_DIR] [OUT_DIR]
#     env: THREADS (default: all cores), PROMPT (prompt tokens, default 128), GEN (decode steps, default 64),
#          REPEATS (timed runs per case, best kept; default 3)
# Writes OUT_DIR/<name>-<dtype>.json (the CLI's --stats-json) and prints a Markdown table. Runs with
# OpenMP's default wait policy: since prefill's GEMMs run on OpenMP's threads (not OpenBLAS's own), spinning
# workers are the faster choice (set OMP_WAIT_POLICY=passive to compare).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$REPO/build-engine}"
OUT="${2:-$(mktemp -d /tmp/flashkit-engine-bench.XXXXXX)}"
BIN="$BUILD/bin/flashkit"
THREADS="${THREADS:-$(nproc)}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-64}"
REPEATS="${REPEATS:-3}"
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "no flashkit binary at $BIN (build first)" >&2; exit 1; }

ids=$(/usr/bin/python3 -c "import random; r=random.Random(0); print(','.join(str(r.randrange(3, 500)) for _ in range($PROMPT)))")

run() {  # name model dtype extra...
  local name="$1" model="$2" dtype="$3"; shift 3
  local json="$OUT/$name-$dtype.json"
  "$BIN" generate -m "$model" --dtype "$dtype" --prompt-ids "$ids" -n "$GEN" --temp 0 --ignore-eos \
    --threads "$THREADS" --profile --stats-json "$json" -q "$@" > /dev/null
  # Runs without --profile (the per-op syncs and timers cost a little): tokens/s come from these, best of
  # REPEATS (on a shared machine the best run is the one least disturbed by other work).
  for r in $(seq 1 "$REPEATS"); do
    "$BIN" generate -m "$model" --dtype "$dtype" --prompt-ids "$ids" -n "$GEN" --temp 0 --ignore-eos \
      --threads "$THREADS" --stats-json "$json.plain.$r" -q "$@" > /dev/null
  done
}

run tiny-llama "$REPO/tests/data/models/tiny-llama" f32
run tiny-llama "$REPO/tests/data/models/tiny-llama-bf16" bf16
run tiny-gemma3 "$REPO/tests/data/models/tiny-gemma3" f32
run tiny-gemma3 "$REPO/tests/data/models/tiny-gemma3-bf16" bf16
run gemma-3-270m-random "$REPO/models/configs/gemma-3-270m.json" f32 --random-weights
run gemma-3-270m-random "$REPO/models/configs/gemma-3-270m.json" bf16 --random-weights

REPEATS="$REPEATS" /usr/bin/python3 - "$OUT" "$THREADS" "$PROMPT" "$GEN" <<'PY'
import glob, json, os, platform, subprocess, sys
out, threads, prompt, gen = sys.argv[1:5]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
load = open("/proc/loadavg").read().split()[:3]
print(f"# flashkit engine, CPU: {cpu}, {threads} threads, prompt {prompt} tokens, {gen} decode steps, best of "
      f"{os.environ.get('REPEATS', '3')} runs, load avg {' '.join(load)} (other jobs on the machine)\n")
print("| model | weights | backend | prefill tok/s | decode tok/s | TTFT ms | prefill split (% of op time) | decode split (% of op time) |")
print("|---|---|---|---:|---:|---:|---|---|")

def split(ops, n=5):
    tot = sum(v["seconds"] for v in ops.values()) or 1
    top = sorted(ops.items(), key=lambda kv: -kv[1]["seconds"])[:n]
    return ", ".join(f"{k} {100 * v['seconds'] / tot:.0f}%" for k, v in top)

for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    prof = json.load(open(f))
    runs = [json.load(open(p)) for p in sorted(glob.glob(f + ".plain.*"))]
    plain = dict(runs[0])
    plain["prefill_tokens_per_s"] = max(r["prefill_tokens_per_s"] for r in runs)
    plain["decode_tokens_per_s"] = max(r["decode_tokens_per_s"] for r in runs)
    plain["time_to_first_token_s"] = min(r["time_to_first_token_s"] for r in runs)
    name = os.path.basename(f).rsplit("-", 1)[0]
    print(f"| {name} | {plain['weight_dtype']} | {plain['backend']} | {plain['prefill_tokens_per_s']:.1f} | "
          f"{plain['decode_tokens_per_s']:.1f} | {1e3 * plain['time_to_first_token_s']:.1f} | "
          f"{split(prof['ops_prefill'], 3)} | {split(prof['ops_decode'])} |")
PY
echo "(JSON in $OUT)" >&2
