#!/usr/bin/env bash
# Issue 3's H200 column: measured ceilings, cuBLAS GEMM/GEMV sweep on the roofline, attention profiled on the GPU
# (CUDA events) and the IO model checked against Nsight Compute's DRAM bytes; the two GPU fusion demos (tanh-GELU
# 8 kernels vs 1, decode step eager vs CUDA graph). Run after `tools/gpu/check.sh build`.
#   tools/gpu/analysis.sh          -> $OUT/analysis.tgz (JSON, Markdown, text, traces) and $OUT/analysis.log
#   DEMOS_ONLY=1 tools/gpu/analysis.sh   -> the same with only the fusion demos (and their ncu/nsys checks)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/build-gpu-out}
FK=${FK:-$PWD/build-gpu/bin/flashkit}
D=$OUT/analysis; mkdir -p "$D"
log=$OUT/analysis.log
step() { echo "== $*" >> "$log"; "$@" >> "$log" 2>&1; echo "== rc=$?" >> "$log"; }
ROOT=$PWD
if [ "${DEMOS_ONLY:-0}" != 1 ]; then
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
fi
# GPU fusion demos. GELU: a large tensor (256M elements: bandwidth-bound) in bf16 and f32, and a small one (64k:
# launch-bound). Decode: gemma-3-270m batch 1 at context 1024 and 8192, eager vs CUDA graph.
for dt in bf16 f32; do
  (cd "$D" && step "$FK" profile gelu --gpu --dtype $dt --reps 20 --warmup 3 --trace "profile-gelu-gpu-$dt-trace.json" \
    --json "profile-gelu-gpu-$dt.json")
done
(cd "$D" && step "$FK" profile gelu --gpu --dtype bf16 --n 65536 --reps 200 --warmup 10 \
  --trace profile-gelu-gpu-bf16-n64k-trace.json --json profile-gelu-gpu-bf16-n64k.json)
for ctx in 1024 8192; do
  (cd "$D" && step "$FK" profile decode --gpu -m "$ROOT/models/configs/gemma-3-270m.json" --context $ctx --reps 100 \
    --warmup 10 --trace "profile-decode-gpu-ctx$ctx-trace.json" --json "profile-decode-gpu-ctx$ctx.json")
done
# DRAM bytes of the GELU kernels (the byte model: 36 B/element separate, 4 fused, bf16) and the NVTX ranges of
# the decode demo in Nsight Systems (kernel and API summaries). Optional: skipped when the tool is missing.
if command -v ncu > /dev/null; then
  step ncu --clock-control none -k regex:ew --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    --csv "$FK" profile gelu --gpu --n 67108864 --reps 1 --warmup 0 --trace /dev/null
  awk '/^== ncu --clock-control none -k regex:ew/,/rc=/' "$log" > "$D/ncu-gelu.csv"
  # GPU time and DRAM bytes of every kernel of one eager decode step (the graph step's time is their sum, less overlap)
  ncu --clock-control none --cache-control none --nvtx --nvtx-include "decode.eager/" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv "$FK" profile decode --gpu --reps 1 \
    --warmup 0 --trace /dev/null > "$D/ncu-decode.csv" 2>> "$log"; echo "== ncu decode rc=$?" >> "$log"
  python3 bench/analysis/ncu_summary.py "$D/ncu-decode.csv" > "$D/ncu-decode-summary.txt" 2>> "$log"
fi
if command -v nsys > /dev/null; then
  step nsys profile -t cuda,nvtx,cublas -o "$D/decode-nsys" --force-overwrite true "$FK" profile decode --gpu --reps 20 \
    --warmup 3 --trace /dev/null
  step nsys stats -r nvtx_sum,cuda_gpu_kern_sum,cuda_api_sum -f csv -o "$D/decode-nsys" "$D/decode-nsys.nsys-rep"
  rm -f "$D/decode-nsys.sqlite"
fi
(cd "$OUT" && tar czf analysis.tgz analysis && rm -rf analysis)
grep -c "rc=0" "$log"; grep "rc=[1-9]" "$log" || true
