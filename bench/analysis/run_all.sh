#!/usr/bin/env bash
# Regenerates bench/results/roofline-* and bench/results/cost-* (tables, JSON, plots) for issue 3.
# Usage: bench/analysis/run_all.sh [path/to/flashkit]   (default: build/bin/flashkit)
# The GEMM sweep (N up to 8192) takes about a minute on 2 cores; the rest a few seconds. Run on an idle
# machine for clean CPU numbers: on a shared machine the measured ceilings and times are noisy.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FK="$(realpath "${1:-$ROOT/build/bin/flashkit}")"
OUT="$ROOT/bench/results"
CFG="$ROOT/models/configs"
mkdir -p "$OUT"
"$FK" roofline --measure --seconds 2 --json "$OUT/roofline-devices.json" --md "$OUT/roofline-devices.md" | tee "$OUT/roofline-devices.txt"
# Pin the CPU roof to this measurement for everything after it, so every floor uses the same ceiling (a fresh
# 0.4 s measurement per command would catch other jobs on a shared machine). Set them yourself to override.
if [[ -z "${FLASHKIT_CPU_PEAK_GFLOPS:-}" || -z "${FLASHKIT_CPU_BW_GBS:-}" ]]; then
  export FLASHKIT_CPU_PEAK_GFLOPS=$(/usr/bin/python3 -c "import json;print(json.load(open('$OUT/roofline-devices.json'))['cpu']['fma_peak_gflops'])")
  export FLASHKIT_CPU_BW_GBS=$(/usr/bin/python3 -c "import json;print(json.load(open('$OUT/roofline-devices.json'))['cpu']['triad_gbs'])")
fi
echo "CPU roof pinned: $FLASHKIT_CPU_PEAK_GFLOPS GFLOP/s, $FLASHKIT_CPU_BW_GBS GB/s"
[[ "${SKIP_GEMM_SWEEP:-0}" == 1 ]] || "$FK" roofline gemm --sweep --seconds 1 --json "$OUT/roofline-gemm-cpu.json" --csv "$OUT/roofline-gemm-cpu.csv" \
  --md "$OUT/roofline-gemm-cpu.md" | tee "$OUT/roofline-gemm-cpu.txt"
for dev in h200 t4; do
  for sw in decode prefill; do
    "$FK" cost -m "$CFG/gemma-3-270m.json" --device $dev --sweep $sw --out "$OUT/cost-gemma-3-270m-$sw-$dev.json" \
      | tee "$OUT/cost-gemma-3-270m-$sw-$dev.txt"
  done
done
"$FK" cost -m "$CFG/gemma-3-270m.json" --device h200 --prefill 512 --out "$OUT/cost-gemma-3-270m-prefill512-h200.json" \
  | tee "$OUT/cost-gemma-3-270m-prefill512-h200.txt"
"$FK" cost -m "$CFG/gemma-3-270m.json" --device h200 --decode-batch 1 --context 1024 \
  --out "$OUT/cost-gemma-3-270m-decode1-h200.json" | tee "$OUT/cost-gemma-3-270m-decode1-h200.txt"
"$FK" cost -m "$CFG/llama-3.2-1b.json" --device h200 --decode-batch 16 --context 4096 \
  --out "$OUT/cost-llama-3.2-1b-decode16-h200.json" | tee "$OUT/cost-llama-3.2-1b-decode16-h200.txt"
"$FK" cost attention -N 4096 -d 64 --dtype bf16 --out "$OUT/cost-attention-io-N4096-d64-bf16.json" \
  | tee "$OUT/cost-attention-io-N4096-d64-bf16.txt"
"$FK" cost attention -N 1024 -d 64 --check --out "$OUT/cost-attention-io-N1024-d64-f32.json" \
  | tee "$OUT/cost-attention-io-N1024-d64-f32.txt"
# Validation on this CPU: predicted floor vs measured (attention and one decoder layer).
(cd "$OUT" && "$FK" profile attention -N 2048 --heads 4 -d 64 --causal --backward --reps 5 --trace roofline-profile-attention-trace.json \
  --json roofline-profile-attention.json | tee roofline-profile-attention.txt)
(cd "$OUT" && "$FK" profile gelu --trace roofline-profile-gelu-trace.json --json roofline-profile-gelu.json \
  | tee roofline-profile-gelu.txt)
for args in "--prefill 512" "--decode-batch 1 --context 1024"; do
  tag=$(echo "$args" | tr -d ' -' )
  (cd "$OUT" && "$FK" profile layer -m "$CFG/gemma-3-270m.json" $args --reps 5 --trace "roofline-profile-layer-$tag-trace.json" \
    --json "roofline-profile-layer-$tag.json" | tee "roofline-profile-layer-$tag.txt")
done
/usr/bin/python3 "$ROOT/bench/analysis/plot.py" "$OUT"
