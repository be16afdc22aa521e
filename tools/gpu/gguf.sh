#!/usr/bin/env bash
# GGUF on the GPU machine: builds the library, the engine tests and the CLI with CUDA, runs the GGUF / quantized
# tests (the CUDA dequantize-in-kernel GEMV of every block type against f64, the CPU K-quant engine path), then
# tools/gpu/gguf_check.py: the tiny mixed-K-quant Qwen3 (tests/data/gguf/tiny-qwen3-kquant.gguf) CPU vs CUDA logits,
# and against transformers' GGUF loader when the `gguf` package is installed; finally `flashkit generate` on the
# lone .gguf (its embedded tokenizer) on CUDA.
#   tools/gpu/gguf.sh          (carry=[".fkdeps"] for PCRE2/ICU, as tools/gpu/engine.sh)
# Results: $OUT/gguf.log (everything), $OUT/gguf.json (the comparisons), $OUT/failed.txt. Fits in ~5 minutes.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/gguf.log"
status=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_engine_tests flashkit_cli || exit 1
E=$(find "$BUILD/tests" -name flashkit_engine_tests -type f -perm -u+x | head -1)
run engine_gguf_tests timeout 300 "$E" --gtest_brief=1 \
  --gtest_filter='CudaGemvQuant.*:GgufKQuant.*:EngineKernels.MatmulQuant*:FidelityGguf.*'
grep -qE "SKIPPED.*CudaGemvQuant" "$LOG" && { log "CudaGemvQuant was skipped: no GPU visible?"; status=1; }
run memcheck_gemv_quant timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" \
  --gtest_filter='CudaGemvQuant.*' --gtest_brief=1
export FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit.so
PYTHONPATH=$PWD/python run gguf_check timeout 300 python3 tools/gpu/gguf_check.py "$OUT/gguf.json"
if python3 -c "import gguf" >> "$LOG" 2>&1; then log "gguf package: present"
else log "gguf package: absent (transformers check skipped)"; fi
CLI=$(find "$BUILD" -name flashkit -type f -perm -u+x | head -1)
run generate_cuda timeout 120 "$CLI" generate -m tests/data/gguf/tiny-qwen3-kquant.gguf -p "the cat" -n 8 --device cuda
run generate_cpu timeout 120 "$CLI" generate -m tests/data/gguf/tiny-qwen3-kquant.gguf -p "the cat" -n 8
grep -E "^\[  FAILED  \]|rc=[1-9]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
grep -E "^== |OK|FAIL|rel err" "$LOG" | tail -30
exit $status
