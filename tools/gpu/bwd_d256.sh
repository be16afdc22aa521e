#!/usr/bin/env bash
# The Hopper attention backward at head dim 256 (flash_bwd_sm90_d256.cuh, worklog v16) on the GPU machine (an H200):
# build the library and the CUDA tests (registers/spills of the new kernel from ptxas), the CUDA grid's head-dim
# 256 cases (and those padded to it) on the default path (the new kernel) and on the sm80 path, compute-sanitizer
# memcheck and racecheck on three small cases, then the backward's speed against the sm_80 kernel, SDPA flash and
# cuDNN (bench/cuda/bench_bwd_d256.py: seqlen 1k/4k/16k, 32k tokens, 16 heads, causal or not).
#   tools/gpu/bwd_d256.sh [STAGES...]    default: build test sanitize bench   (about 4-5 minutes from a cold machine)
# Results under $OUT: bwd-d256.log (every step), bwd-d256.txt (the summary printed at the end), bwd-d256.json (the
# benchmark rows), failed.txt. The tokenizer's PCRE2/ICU come from .fkdeps (carry=[".fkdeps.tar.xz"],
# see tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/bwd-d256.log"
SUM="$OUT/bwd-d256.txt"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
status=0
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit.so
: > "$SUM"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
A="$BUILD/tests/attention/flashkit_cuda_tests"
# Head dims padded to 256 in the CUDA grid (D256, D200, D136): the Grid suite (default path = the new kernel) and the
# Paths suite's sm80 path (the portable kernel); test names are SUITE/CLASS.MatchesReference/[PATH_]CASE.
F256="Grid/*_D256_*:Grid/*_D200_*:Grid/*_D136_*:Paths/*/sm80_*_D256_*:Paths/*/sm80_*_D200_*:Paths/*/sm80_*_D136_*"
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests || exit 1
      # Registers and spills of the new kernel (its two instantiations per dtype), compiled again with ptxas -v.
      for dt in bf16 f16; do
        obj=$BUILD/src/CMakeFiles/flashkit_core.dir/kernels/cuda/flash_bwd_sm90_${dt}_d256.cu.o
        cmd=$(cd "$BUILD" && ninja -t commands "${obj#$BUILD/}" 2>/dev/null | tail -1 | sed "s# -o [^ ]*# -o /tmp/ptxas_d256_$dt.o#")
        [ -n "$cmd" ] && (cd "$BUILD" && eval "$cmd -Xptxas -v") 2>&1 |
          grep -A2 "flash_bwd_sm90_d256_kernel" | grep -E "registers|spill" | sed "s/^/ptxas $dt: /" | tee -a "$SUM"
      done ;;
    test)
      run grid_d256 timeout 240 "$A" --gtest_filter="$F256" --gtest_brief=1
      grep -E "^\[  FAILED  \] [A-Z]" "$LOG" | sed 's/ ([0-9]* ms)$//' | sort -u | tail -40 > "$OUT/failed.txt"
      {
        echo "tests: $(grep -E '^\[  PASSED  \]' "$LOG" | tail -1) failed: $(wc -l < "$OUT/failed.txt")"
        cat "$OUT/failed.txt"
        # Which backward each case ran: the default path must show sm90wgmma.*.d256 only, the sm80 path sm80mma only.
        echo "bwd paths (Grid + Paths/sm80): $(grep -E '^bwd path:' "$LOG" | awk '{print $NF}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
      } | tee -a "$SUM" ;;
    sanitize)
      C='Grid/*Sq100_Sk333_H6x2_D256_causal_bf16:Grid/*Sq190_Sk65_H2x1_D256_causal_bf16:Grid/*H4x2_D136_cap_f16_varlen'
      run memcheck_d256 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$C" --gtest_brief=1
      echo "memcheck: rc=$(grep -oE 'memcheck_d256: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'ERROR SUMMARY' "$LOG" | tail -1)" | tee -a "$SUM"
      run racecheck_d256 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" \
        --gtest_filter='Grid/*Sq100_Sk333_H6x2_D256_causal_bf16' --gtest_brief=1
      echo "racecheck: rc=$(grep -oE 'racecheck_d256: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG" | tail -1)" | tee -a "$SUM" ;;
    bench)
      FLASHKIT_SM90=0 run bench_sm80 timeout 150 python3 bench/cuda/bench_bwd_d256.py --methods flashkit --json "$OUT/.sm80.json"
      run bench timeout 200 python3 bench/cuda/bench_bwd_d256.py --sm80 "$OUT/.sm80.json" --json "$OUT/bwd-d256.json"
      rm -f "$OUT/.sm80.json"
      grep -E "^bwd d256|^causal=" "$LOG" | tail -7 | tee -a "$SUM" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
echo "== summary ($SUM)"; cat "$SUM"
exit $status
