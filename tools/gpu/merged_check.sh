#!/usr/bin/env bash
# The merged tree of a session's work on the device machine (an H200), in two calls of under 10 minutes each that
# share one build folder (a warm machine keeps it), steps in order of what matters most if a call is cut short.
# Session 17's tree: the decode kernel's narrow CTA (attention-cuda.md v28), and with the cluster merge (v29).
#   tools/gpu/merged_check.sh narrow    the decode choice tests, the decode paths (narrow included) and grid cases,
#                                       memcheck + racecheck on narrow decode cases; then batch-1 decode per call,
#                                       wide (FLASHKIT_DECODE_NARROW=0) and narrow (=1) alternated, 32/8 heads d128
#                                       and d64 (and 8/1 d256, which stays wide), token- and head-major K/V
#   tools/gpu/merged_check.sh cluster   v29: the narrow CTA with the cluster merge (FLASHKIT_DECODE_NARROW=1
#                                       FLASHKIT_DECODE_COMBINE=cluster): its path over the grid, memcheck + racecheck,
#                                       then batch-1 decode per call against the default (narrow + combine), alternated
#   tools/gpu/merged_check.sh auto      the automatic choice (narrow CTA; clusters up to 64 KiB of K/V a CTA): decode choice
#                                       tests, decode paths and grid cases, memcheck + racecheck on default decode
#                                       cases; batch-1 decode per call, default against FLASHKIT_DECODE_COMBINE=kernel
#                                       (the same narrow grids with the combine launch), alternated
#   tools/gpu/merged_check.sh prefetch  v30: the decode kernel's first K/V blocks asked into L2 before its PDL wait
#                                       (automatic without a combine launch): decode choice tests, decode paths and grid
#                                       cases, memcheck + racecheck; batch-1 decode per call, default against
#                                       FLASHKIT_DECODE_PREFETCH=0, alternated
#   tools/gpu/merged_check.sh last      v31: the counter merge (the last CTA of a tile merges: automatic for the wide CTA
#                                       at d64, batch 1; FLASHKIT_DECODE_COMBINE=last wherever the combine would run):
#                                       its paths over the grid, the graph and concurrent-stream tests, memcheck +
#                                       racecheck; batch-1 decode per call, the default against =kernel (the narrow
#                                       CTA and the combine launch at d128) and =last, alternated
#   tools/gpu/merged_check.sh widelast  v31: the wide CTA with the counter merge at d128 (4k-32k keys) and d256 (256-2k keys)
#                                       against the default and the wide CTA with the combine launch, alternated
#   tools/gpu/merged_check.sh regress   the kernel choice, the default CUDA grid, backward and ws paths, non-finite,
#                                       SSM, memcheck; batch-1 decode per call with the defaults
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
# The decode choice tests, the decode tests matching $2, memcheck and racecheck on those matching $3.
decode_checks() {
  run test_choice_decode timeout 60 "$T" --gtest_filter='CudaChoice.*Decode*' --gtest_brief=1
  run "test_decode_$1" timeout 200 "$A" --gtest_brief=1 --gtest_filter="$2"
  run "memcheck_$1" timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$3" --gtest_brief=1
  run "racecheck_$1" timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$3" --gtest_brief=1
  failed
}
# Batch-1 decode per call (bench/cuda/decode_fixed_cost.py, one process a setting), settings A and B alternated twice:
#   decode_ab OUTFILE SHAPES LABEL_A "ENV_A" LABEL_B "ENV_B"      (ENV: space-separated VAR=value, may be empty)
decode_ab() {
  local out=$1 shapes=$2 rep
  for rep in 1 2; do
    run "decode_$3_r$rep" env $4 timeout 120 python3 bench/cuda/decode_fixed_cost.py "$3" --shapes "$shapes" --out "$OUT/$out"
    run "decode_$5_r$rep" env $6 timeout 120 python3 bench/cuda/decode_fixed_cost.py "$5" --shapes "$shapes" --out "$OUT/$out"
  done
}
for part in "$@"; do
  case $part in
    narrow)
      decode_checks narrow 'Paths/*decode*:Grid/*Sq1_*:Grid/*Sq3_*:Grid/*Sq4_*:Grid/*Sq16_*:*Decode*' \
        'Paths/*decode_narrow*Sq1_Sk5000_H32x8_D128*:Paths/*decode_narrow*Sq16_Sk1024_H32x4_D64*'
      decode_ab decode-narrow.jsonl 32/8/128,32/8/64,8/1/256 narrow0 FLASHKIT_DECODE_NARROW=0 narrow1 FLASHKIT_DECODE_NARROW=1
      for nw in 0 1; do
        run "decode_narrow${nw}_bhsd" env FLASHKIT_DECODE_NARROW=$nw timeout 120 python3 bench/cuda/decode_fixed_cost.py \
          "narrow$nw" --layout bhsd --keys 4096,32768 --shapes 32/8/128,32/8/64 --out "$OUT/decode-narrow.jsonl"
      done
      grep -E "^decode_fixed" "$LOG" | tail -80 ;;
    cluster)
      decode_checks cluster 'Paths/*decode_narrow_cluster*:*Decode*' \
        'Paths/*decode_narrow_cluster*Sq1_Sk5000_H32x8_D128*:Paths/*decode_narrow_cluster*Sq16_Sk1024_H32x4_D64*'
      decode_ab decode-cluster.jsonl 32/8/128,32/8/64 default "" cluster \
        "FLASHKIT_DECODE_NARROW=1 FLASHKIT_DECODE_COMBINE=cluster"
      grep -E "^decode_fixed" "$LOG" | tail -40 ;;
    auto)
      decode_checks auto 'Paths/*decode*:Grid/*Sq1_*:Grid/*Sq3_*:Grid/*Sq4_*:Grid/*Sq16_*:*Decode*' \
        'Grid/*Sq1_Sk5000_H32x8_D128*:Grid/*Sq16_Sk1024_H32x4_D64*:Grid/*Sq4_Sk2000_H8x8_D64*:Grid/*Sq1_Sk1000_H8x1_D256*'
      decode_ab decode-auto.jsonl 32/8/128,32/8/64,8/1/256 auto "" kernelmerge FLASHKIT_DECODE_COMBINE=kernel
      grep -E "^decode_fixed" "$LOG" | tail -50 ;;
    prefetch)
      decode_checks prefetch 'Paths/*decode*:Grid/*Sq1_*:Grid/*Sq16_*:*Decode*' \
        'Grid/*Sq1_Sk5000_H32x8_D128*:Grid/*Sq16_Sk1024_H32x4_D64*:Grid/*Sq1_Sk1_*:Grid/*Sq1_Sk200_*:Grid/*Sq1_Sk777_*'
      decode_ab decode-prefetch.jsonl 32/8/128,32/8/64,8/1/256 default "" noprefetch FLASHKIT_DECODE_PREFETCH=0
      grep -E "^decode_fixed" "$LOG" | tail -50 ;;
    last)
      decode_checks last 'Paths/*decode*:Grid/*Sq1_*:Grid/*Sq16_*:*Decode*' \
        'Grid/*Sq1_Sk5000_H32x8_D128*:Paths/*decode_narrow_last*Sq1_Sk5000_H32x8_D128*:Paths/*decode_wide_last*Sq16_Sk1024_H32x4_D64*:*DecodeCounterMerge*'
      for rep in 1 2; do
        for setting in "default:" "kernelmerge:FLASHKIT_DECODE_COMBINE=kernel" "last:FLASHKIT_DECODE_COMBINE=last"; do
          run "decode_${setting%%:*}_r$rep" env ${setting#*:} timeout 120 python3 bench/cuda/decode_fixed_cost.py \
            "${setting%%:*}" --shapes 32/8/64,32/8/128 --keys 4096,8192,16384,32768 --out "$OUT/decode-last.jsonl"
        done
      done
      grep -E "^decode_fixed" "$LOG" | tail -60 ;;
    widelast)
      for rep in 1 2; do
        for setting in "default:" "widelast:FLASHKIT_DECODE_NARROW=0 FLASHKIT_DECODE_COMBINE=last" \
                       "widekernel:FLASHKIT_DECODE_NARROW=0 FLASHKIT_DECODE_COMBINE=kernel"; do
          run "decode_${setting%%:*}_d128_r$rep" env ${setting#*:} timeout 120 python3 bench/cuda/decode_fixed_cost.py \
            "${setting%%:*}" --shapes 32/8/128 --keys 4096,8192,32768 --out "$OUT/decode-wide-last.jsonl"
          run "decode_${setting%%:*}_d256_r$rep" env ${setting#*:} timeout 120 python3 bench/cuda/decode_fixed_cost.py \
            "${setting%%:*}" --shapes 8/1/256 --keys 256,1024,2048 --out "$OUT/decode-wide-last.jsonl"
        done
      done
      grep -E "^decode_fixed" "$LOG" | tail -40 ;;
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
      run decode_fixed python3 bench/cuda/decode_fixed_cost.py default --shapes 32/8/128,32/8/64,8/1/256 \
        --out "$OUT/decode-fixed.jsonl"
      grep -E "^decode_fixed" "$LOG" | tail -15
      failed ;;
    *) log "unknown part $part"; status=1 ;;
  esac
done
grep -E "^== .*rc=" "$LOG"
log "merged_check: status=$status"
exit $status
