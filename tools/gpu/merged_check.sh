#!/usr/bin/env bash
# The merged tree of a session's work on the device machine (an H200), in ONE call that fits a short device budget
# (~5 minutes with the build), steps in order of what matters most if the call is cut short (each step's result is
# in the log as soon as it ends). Session 15's tree: the warp-specialized d256 backward (attention-cuda.md v24), the
# persistent ws forward's epilogue under the next tile with O by TMA stores (v23, v23b), the v24b/v25/v26 reverts.
#   tools/gpu/merged_check.sh          results in $OUT/merged_check.log (+ failed.txt, ws-short.txt);
#                                      carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh)
# Each step has its own timeout so a hang costs minutes, not the call.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
LOG="$OUT/merged_check.log"
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python" PYTHONPATH="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests \
  flashkit_fp8_cuda_tests flashkit_ssm_cuda_tests -- -k 0 || exit 1
A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests); F8=$(bin flashkit_fp8_cuda_tests); S=$(bin flashkit_ssm_cuda_tests)
failed() { grep -E "^\[  FAILED  \] [A-Z]" "$LOG" | sed 's/ ([0-9]* ms)$//' | sort -u | tail -60 > "$OUT/failed.txt"; }
# -- tests: the kernel choice, the whole default grid (v22 at d128, v24 at d256, the one-tile ws forward at every
#    head dim), v22 forced at d64 and v6 forced, the one-tile ws paths and the persistent ones (v19, v23, v23b), fp8,
#    SSM
run test_choice timeout 60 "$T" --gtest_filter='CudaChoice.*:Errors.Sm90WsBnFromEnv' --gtest_brief=1
run test_grid timeout 240 "$A" --gtest_filter='Grid/*' --gtest_brief=1
run test_bwd_paths timeout 150 "$A" --gtest_brief=1 --gtest_filter='Paths/*sm90bwd_ws_*:Paths/*sm90bwd_v6_*_D128_*'
run test_nonfinite timeout 60 "$A" --gtest_filter='*NonFinite*:*Deterministic*' --gtest_brief=1
run test_fp8 timeout 120 "$F8" --gtest_brief=1
failed
run test_ws_paths timeout 200 "$A" --gtest_brief=1 \
  --gtest_filter='Paths/*sm90cfg3*:Paths/*sm90ws_persist*-*_D200_*:*_D136_*'
run test_ssm timeout 120 "$S" --gtest_brief=1
failed
# -- sanitizers on v22 (d128 causal, d128 non-causal f16, d128 varlen, d64 forced), v24 (d256 GQA causal), the
#    one-tile ws forward and the persistent one with O by TMA stores (v23b)
R='Grid/*Sq70_Sk190_H8x1_D128_causal_bf16:Grid/*Sq131_Sk67_H6x3_D128_f16:Grid/*H6x2_D128_causal_bf16_varlen'
R="$R:Paths/*/sm90bwd_ws_*Sq197_Sk199_H8x2_D64_f16:Grid/*Sq100_Sk333_H6x2_D256_causal_bf16"
run racecheck_bwd timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$R" --gtest_brief=1
run memcheck_bwd timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$R" --gtest_brief=1
run racecheck_ws timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_brief=1 \
  --gtest_filter='Paths/*sm90cfg3_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90ws_persist3_tma_flash_B1_Sq256_Sk300_H4x4_D128_causal_win64*'
# -- bench: the persistent grid's epilogue orders (v19, v23, v23b) side by side with SDPA flash and cuDNN
run bench_short timeout 150 python3 bench/cuda/bench_ws_short.py --out "$OUT"
grep -E "^short: d" "$LOG" | tee "$OUT/ws-short.txt"
failed
grep -E "^== .*rc=" "$LOG"
log "merged_check: status=$status"
exit $status
