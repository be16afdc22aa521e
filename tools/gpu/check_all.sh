#!/usr/bin/env bash
# The whole GPU test suite of a submission on the device machine (an H200), in one call: a full CUDA build, then
# every GPU test binary (attention on every kernel path, engine, speculative decoding, training kernels and backend,
# the CS149 ops, the SSM scan)
# and compute-sanitizer memcheck/racecheck on the decode family and the engine's fused kernels.
#   tools/gpu/check_all.sh [STAGES...]    default: build test sanitize
# Results in $OUT/check-all.log and $OUT/failed.txt. Exit status: non-zero if any stage failed.
# The tokenizer's PCRE2/ICU come from .fkdeps (tools/gpu/engine.sh pack-deps here once; carry=[".fkdeps"]).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/check-all.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize)
status=0
bin() { find "$BUILD/tests" -name "$1" -type f -perm -u+x | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" || exit 1 ;;
    test)
      for b in flashkit_cuda_tests flashkit_engine_tests flashkit_spec_tests flashkit_train_tests flashkit_train_cuda_tests \
               flashkit_tests flashkit_serve_tests flashkit_chat_tests flashkit_cs149_cuda_tests flashkit_cs149_tests \
               flashkit_ssm_cuda_tests flashkit_ssm_tests flashkit_dist_tests; do
        p=$(bin $b); [ -n "$p" ] || { log "$b: not built"; status=1; continue; }
        run "$b" timeout 1200 "$p" --gtest_brief=1
        grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      done ;;
    sanitize)
      A=$(bin flashkit_cuda_tests); E=$(bin flashkit_engine_tests)
      FD='*Sq1_Sk4000*:*Sq2_Sk5000*:*Sq3_Sk4096*:*Sq16_Sk1024*:*H16x4_D64_causal_bf16_varlen*'
      run memcheck_decode timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="Grid/$FD:Paths/*decode*Sq1_Sk4000*:Paths/*decode*Sq3_Sk4096*:Paths/*decode*Sq16_Sk1024*" --gtest_brief=1
      run racecheck_decode timeout 600 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="Paths/*decode_cluster*Sq1_Sk4000*:Paths/*decode_cluster*Sq3_Sk4096*" --gtest_brief=1
      run memcheck_engine timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" \
        --gtest_filter='CudaEngineOps.DecodeAttention*:CudaEngineOps.GraphReplayMatchesEagerAndCpu:CudaEngineOps.ResidualPingPong:DeviceGreedy.*Cuda*' --gtest_brief=1
      run racecheck_engine timeout 600 compute-sanitizer --tool racecheck --error-exitcode 9 "$E" \
        --gtest_filter='CudaEngineOps.DecodeAttention:CudaEngineOps.DecodeAttentionMerges' --gtest_brief=1 ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
