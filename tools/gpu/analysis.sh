#!/usr/bin/env bash
# Issue 3's H200 column: measured ceilings, cuBLAS GEMM/GEMV sweep on the roofline, attention profiled on the GPU
# (CUDA events) and the IO model checked against Nsight Compute's DRAM bytes. Run after `tools/gpu/check.sh build`.
#   tools/gpu/analysis.sh          -> $OUT/analysis.tgz (JSON, Markdown, text, traces) and $OUT/analysis.log
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/build-gpu-out}
FK=${FK:-$PWD/build-gpu/bin/flashkit}
D=$OUT/analysis; mkdir -p "$D"
log=$OUT/analysis.log
step() { echo "== $*" >> "$log"; "$@" >> "$log" 2>&1; echo "== rc=$?" >> "$log"; }
step "$FK" roofline --measure --seconds 2 --json "$D/roofline-devices-h200.json" --md "$D/roofline-devices-h200.md"
step "$FK" roofline gemm --sweep --gemv --impl blas --seconds 0.5 --gpu --json "$D/roofline-gemm-h200.json" \
  --csv "$D/roofline-gemm-h200.csv" --md "$D/roofline-gemm-h200.md"
for args in "-N 1024 --batch 64 --heads 16 -d 64 --causal --backward" "-N 4096 --batch 4 --heads 16 -d 128 --backward" \
            "-N 16384 --batch 1 --heads 16 -d 128 --causal --backward"; do
  tag=$(echo "$args" | tr -d ' -')
  (cd "$D" && step "$FK" profile attention --gpu $args --reps 10 --impl standard,flash --trace "profile-attention-$tag-trace.json" \
    --json "profile-attention-$tag.json")
done
# The IO model's prediction for the ncu shape (GPT-2 medium: b64 s1024 h16 d64, causal, bf16), next to ncu.
step "$FK" cost attention -N 1024 -d 64 --dtype bf16 --out "$D/cost-attention-io-gpt2m-h200.json"
OUT=$D bash tools/gpu/check.sh ncu >> "$log" 2>&1
cp "$D/check.log" "$D/ncu-check.log" 2>/dev/null
(cd "$OUT" && tar czf analysis.tgz analysis && rm -rf analysis)
grep -c "rc=0" "$log"; grep "rc=[1-9]" "$log" || true
