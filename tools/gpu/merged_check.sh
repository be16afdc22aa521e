#!/usr/bin/env bash
# The merged tree of a session's work on the device machine (an H200), in two calls of under 10 minutes each that
# share one build folder (a warm machine keeps it), steps in order of what matters most if a call is cut short.
# Session 16's tree: the persistent ws forward's DENSE variant (attention-cuda.md v27), the fp8 forward's rescale
# variants (attention-fp8-cuda.md v4), the decode kernel's 32-bit row math.
#   tools/gpu/merged_check.sh decode    the decode paths and grid cases, batch-1 decode per call (16 .. 32k keys)
#   tools/gpu/merged_check.sh ab        the two A/B stages (attn_frontier.sh dense, fp8.sh rescale)
#   tools/gpu/merged_check.sh regress   the kernel choice, the default CUDA grid, backward and ws paths, non-finite,
#                                       fp8, SSM, sanitizers; batch-1 decode per call (16 .. 32k keys) and the
#                                       ncu stall view of the 16-key call
# Results in $OUT (merged_check.log, failed.txt, the stages' own logs); carry=[".fkdeps.tar.xz"].
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"; export OUT
BUILD=${BUILD:-build-gpu}; export BUILD
LOG="$OUT/merged_check.log"
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python" PYTHONPATH="$PWD/python"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
failed() { grep -hE "^\[  FAILED  \] [A-Z]" "$LOG" "$OUT"/*.log 2>/dev/null | sed 's/ ([0-9]* ms)$//' | sort -u | tail -60 > "$OUT/failed.txt"; }
run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_core flashkit_cuda_tests flashkit_tests \
  flashkit_fp8_cuda_tests flashkit_ssm_cuda_tests -- -k 0 || exit 1
A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests); F8=$(bin flashkit_fp8_cuda_tests); S=$(bin flashkit_ssm_cuda_tests)
for part in "$@"; do
  case $part in
    decode)
      run test_decode timeout 120 "$A" --gtest_brief=1 --gtest_filter='Paths/*decode*:Grid/*Sq1_*:Grid/*Sq3_*'
      run decode_fixed python3 bench/cuda/decode_fixed_cost.py default --out "$OUT/decode-fixed.jsonl"
      grep -E "^decode_fixed" "$LOG" | tail -10
      failed ;;
    ab)
      run dense bash tools/gpu/attn_frontier.sh dense
      grep -E "^dense: d|rc=[1-9]" "$OUT/attn_frontier.log" | tail -24
      run fp8_rescale bash tools/gpu/fp8.sh rescale
      grep -E "^fp8 d|ptxas fp8|rc=[1-9]" "$OUT/fp8.log" | tail -16
      failed ;;
    regress)
      run test_choice timeout 60 "$T" --gtest_filter='CudaChoice.*:Errors.Sm90WsBnFromEnv' --gtest_brief=1
      run test_grid timeout 240 "$A" --gtest_filter='Grid/*' --gtest_brief=1
      run test_bwd_paths timeout 150 "$A" --gtest_brief=1 --gtest_filter='Paths/*sm90bwd_ws_*:Paths/*decode*'
      run test_nonfinite timeout 60 "$A" --gtest_filter='*NonFinite*:*Deterministic*' --gtest_brief=1
      run test_ws_paths timeout 200 "$A" --gtest_brief=1 \
        --gtest_filter='Paths/*sm90cfg3*:Paths/*sm90ws_persist*-*_D200_*:*_D136_*'
      run test_ssm timeout 120 "$S" --gtest_brief=1
      failed
      R='Grid/*Sq70_Sk190_H8x1_D128_causal_bf16:Grid/*H6x2_D128_causal_bf16_varlen:Grid/*Sq100_Sk333_H6x2_D256_causal_bf16'
      run memcheck_grid timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$R" --gtest_brief=1
      run decode_fixed python3 bench/cuda/decode_fixed_cost.py default --out "$OUT/decode-fixed.jsonl"
      grep -E "^decode_fixed" "$LOG" | tail -10
      run decode16_ncu timeout 200 ncu --clock-control none -k 'regex:decode|combine' -c 8 --import-source yes \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
        --section LaunchStats -f -o "$BUILD/decode16" python3 tools/gpu/decode_ncu.py 16
      ncu -i "$BUILD/decode16.ncu-rep" --print-details all > "$OUT/decode16-ncu.txt" 2>&1
      ncu -i "$BUILD/decode16.ncu-rep" --page source --csv --print-source sass 2> /dev/null | xz -6 > "$OUT/decode16-sass.csv.xz"
      failed ;;
    *) log "unknown part $part"; status=1 ;;
  esac
done
grep -E "^== .*rc=" "$LOG"
log "merged_check: status=$status"
exit $status
