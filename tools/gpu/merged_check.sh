#!/usr/bin/env bash
# The merged tree of a session's Hopper attention and SSM work on the device machine (an H200), in ONE call on a cold
# machine (~5 minutes with the build): build; the default CUDA attention grid and the forced paths (the persistent
# ws grid, d64's wide tile), the decode cases and non-finite rules; the SSM and engine Mamba tests with the
# production scan; then the A/B benches behind the defaults; sanitizers last. (Run s13-6 also ran and benched the
# decode merge variants of attention-cuda.md v21; they lost and left the library with their script, decode_ab.sh.)
#   tools/gpu/merged_check.sh          results in $OUT/merged_check.log (+ failed.txt, persist.txt, bn192.txt);
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
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests \
  flashkit_ssm_cuda_tests flashkit_engine_tests -- -k 0 || exit 1
A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests); S=$(bin flashkit_ssm_cuda_tests); E=$(bin flashkit_engine_tests)
# -- tests: the default grid on every head dim, then the new forced paths
run test_choice timeout 60 "$T" --gtest_filter='CudaChoice.*:Errors.Sm90WsBnFromEnv' --gtest_brief=1
run test_grid timeout 240 "$A" --gtest_filter='Grid/*' --gtest_brief=1
run test_persist timeout 240 "$A" --gtest_filter='Paths/*sm90ws_persist*-*_D256_*:*_D200_*:*_D136_*' --gtest_brief=1
run test_bn192 timeout 120 "$A" --gtest_filter='Paths/*sm90cfg3_bn192*D64*' --gtest_brief=1
DEC='*_Sq1_*:*_Sq2_*:*_Sq3_*:*_Sq4_*:*_Sq5_*:*_Sq16_*:*varlen*'
run test_decode timeout 240 "$A" --gtest_brief=1 \
  --gtest_filter="$(echo "$DEC" | sed 's/\*_Sq/Paths\/*decode_*_Sq/g; s/\*varlen\*/Paths\/*decode_*varlen*/')"
run test_nonfinite timeout 240 "$A" --gtest_filter='*NonFinite*:*Deterministic*' --gtest_brief=1
run test_ssm timeout 120 "$S" --gtest_brief=1
run test_engine timeout 240 "$E" --gtest_brief=1 --gtest_filter='-Tp*'
grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -60 > "$OUT/failed.txt"
# -- benches: the persistent grid, d64's wide tile, batch-1 decode
run decode_bench timeout 150 python3 bench/cuda/bench_attention.py --out "$OUT" --decode-only --batch1
run persist_bench timeout 150 python3 bench/cuda/bench_ws_persist.py --out "$OUT" --dims 64,128 \
  --seqlens 512,1024,2048,4096,16384
grep -E "^persist d" "$LOG" | tee "$OUT/persist.txt"
for bn in 128 192; do
  FLASHKIT_SM90_CFG=3 FLASHKIT_SM90_WS_BN=$bn run "bench_d64_bn$bn" timeout 100 python3 bench/cuda/bench_attention.py \
    --only flashkit,sdpa_cudnn --dims 64 --fwd-only --timing graph --reps 10
done
grep -E "^== bench_d64_bn|^d64" "$LOG" | sed 's/^/bn192: /' | tee "$OUT/bn192.txt"
# -- sanitizers on small cases of the new paths
F='Paths/*sm90ws_persist3_*_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90ws_persist3_*_H4x2_D64_causal_bf16_varlen'
F="$F:Paths/*sm90ws_persist_*_B2_Sq129_Sk257_H4x2_D64_bf16:Paths/*sm90cfg3_bn192_flash_B2_Sq129_Sk257_H4x2_D64_causal_bf16"
run memcheck timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
run racecheck timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_brief=1 \
  --gtest_filter='Paths/*sm90ws_persist3_*_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90ws_persist_*_B2_Sq129_Sk257_H4x2_D64_bf16'
grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -60 > "$OUT/failed.txt"
grep -E "^== .*rc=" "$LOG"
log "merged_check: status=$status"
exit $status
