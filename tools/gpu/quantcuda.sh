#!/usr/bin/env bash
# GGUF block-quantized weights computed as they are on CUDA (issue 22 item 5; docs/worklog/gguf-quant-cuda.md), on
# the GPU machine (an H200), in one call that fits in ~5 minutes:
#   build     the library, the engine tests, flashkit_engine_bench and flashkit_quant_gguf_writer (sm_90a)
#   test      CudaGgufQuant.* (a random tiny Llama per quant type: CUDA vs CPU logits in prefill, 5-row and decode
#             steps, greedy tokens, the memory report), CudaGemvQuant.* (the kernels vs f64), CudaQuantBackend.*
#             (the fused norm prologue and residual epilogue vs f64), CudaQuantLanes.*, GgufKQuant.*,
#             FidelityGguf.*
#   sanitize  compute-sanitizer memcheck on CudaGgufQuant.* (q4_k, q5_k), CudaGemvQuant.*, CudaQuantBackend.*
#   bench     decode of a Llama-3.2-1B-shaped random-weights GGUF in bf16, Q8_0, Q4_K and Q4_0 (CUDA graphs on and
#             off, as flashkit_engine_bench runs them): tok/s, weight bytes per token, GB/s and % of the 4.24 TB/s
#             copy ceiling -> $OUT/quantcuda-bench.json
#   tools/gpu/quantcuda.sh [STAGES...]     default: build test bench sanitize (the numbers before the slow memcheck)
# Results: $OUT/quantcuda.log (everything), $OUT/quantcuda-bench.json, $OUT/failed.txt. Exit status non-zero if a
# stage failed. carry=[".fkdeps.tar.xz"]: the test binaries link the tokenizer's PCRE2/ICU (carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/quantcuda.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench sanitize)
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
E=$BUILD/tests/engine/flashkit_engine_tests
EB=$BUILD/bench/engine/flashkit_engine_bench
W=$BUILD/bench/engine/flashkit_quant_gguf_writer
TESTS='*/CudaGgufQuant.*:CudaGemvQuant.*:CudaQuantBackend.*:CudaQuantLanes.*:GgufKQuant.*:FidelityGguf.*'
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_engine_tests flashkit_engine_bench \
        flashkit_quant_gguf_writer || exit 1 ;;
    test)
      run quant_tests timeout 300 "$E" --gtest_filter="$TESTS"   # not brief: the SKIPPED lines are checked
      grep -qE "SKIPPED.*CudaGgufQuant" "$LOG" && { log "CudaGgufQuant was skipped: no GPU visible?"; status=1; }
      grep -E "^\[note\]" "$LOG" | tail -5 ;;
    sanitize)
      # q4_k: quantized embedding + separate Q6_K lm_head; q5_k: f32 embedding + Q8_0 lm_head (the kernels of
      # every type are memchecked by CudaGemvQuant.*, the GEMV's in tools/gpu/gguf.sh too).
      run memcheck_quant timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" --gtest_brief=1 \
        --gtest_filter='*/CudaGgufQuant.CudaFollowsCpu*/q4_k:*/CudaGgufQuant.CudaFollowsCpu*/q5_k:CudaGemvQuant.*:CudaQuantBackend.*' ;;
    bench)
      D=${MODELS_DIR:-/tmp/quantcuda-models}; mkdir -p "$D"
      models=""
      for t in bf16 q8_0 q4_k q4_0; do
        run "write_$t" "$W" "$t" "$D/llama-1b-$t.gguf" || continue
        models="${models:+$models,}$D/llama-1b-$t.gguf"
      done
      # 128 new tokens after a 128-token prompt, best of 3, graphs on and off; a 1024-token prefill (the dequantized
      # panels + cuBLAS path). dtype auto keeps the blocks (and bf16 as bf16).
      run quant_bench timeout 240 env FLASHKIT_BENCH_MODELS="$models" FLASHKIT_BENCH_DTYPE=auto \
        FLASHKIT_BENCH_NEW=${NEW:-128} FLASHKIT_BENCH_PREFILL=${PREFILL:-1024} FLASHKIT_BENCH_OUT="$OUT/quantcuda-bench.json" \
        "$EB"
      rm -f "$D"/llama-1b-*.gguf
      grep "^\[bench\]" "$LOG" | grep -E "graphs_on|prefill" | tail -16 ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
grep -E "^\[  FAILED  \]|rc=[1-9]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
log "done: status=$status (failures, if any: $OUT/failed.txt)"
exit $status
