#!/usr/bin/env bash
# Issue 20 Required 5 (batch-1 decode bandwidth) on the device machine (an H200), one call: build, the decode tests
# on every merge path, memcheck/racecheck of the two-level cluster merge, then batch-1 decode bandwidth once per
# merge variant (attention-cuda.md v21). <= 4 minutes on a warm machine (the build is cached in $BUILD).
#   tools/gpu/decode_ab.sh [STAGES...]      default: build test sanitize bench
# Stages:
#   build     configure + build libflashkit, flashkit_cuda_tests and flashkit_tests (as attn_frontier.sh)
#   test      the decode grid and paths (seqlen_q <= 16, varlen) on every decode path incl. decode_two_level*, the
#             graph-replay test under each two-level setting, the non-finite rules, the planner's tests
#   sanitize  compute-sanitizer memcheck (and racecheck on one case) of the two-level merge on small decode cases
#   bench     bench/cuda/bench_attention.py --decode-only --batch1 once per variant (env knobs below); one line per
#             (variant, shape, kv length): "decode_ab: VARIANT b1 h32/8 d128 kv32768: 34.1 us 92.6% of 4.24 TB/s [kernel]"
#             and $OUT/decode-ab.txt with those lines; each variant's decode-cuda.json in $OUT/decode-ab.tar.gz
# Variants: base (the defaults: separate combine launch), cluster (FLASHKIT_DECODE_COMBINE=cluster: one level when
# the wave model allows), two_level (the planner's cluster size), two_level_c8 / _c4 (FLASHKIT_DECODE_CLUSTER),
# last, last_c8, last_c4 (FLASHKIT_DECODE_COMBINE=two_level_counter: the last cluster of a tile merges the <= 16
# cluster partials, no combine launch; more partials fall back to the combine), deep, deep_last
# (FLASHKIT_DECODE_D256_DEEP=1: d256 CTAs of 2 warps x 6 stages, alone and with the last-cluster merge; d128 rows
# are the base kernel again), base_again (the defaults once more: run-to-run drift).
# Results in $OUT/decode_ab.log (+ failed.txt). carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/decode_ab.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
status=0
bin() { find "$BUILD/tests" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1
  git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
# Decode cases of the grid (seqlen_q 1-5 and 16, varlen batches) under the default path and every decode_* path.
DEC='*_Sq1_*:*_Sq2_*:*_Sq3_*:*_Sq4_*:*_Sq5_*:*_Sq16_*:*varlen*'
DEC_GRID=$(echo "$DEC" | sed 's/\*_Sq/Grid\/*_Sq/g; s/\*varlen\*/Grid\/*varlen*/')
DEC_PATHS=$(echo "$DEC" | sed 's/\*_Sq/Paths\/*decode_*_Sq/g; s/\*varlen\*/Paths\/*decode_*varlen*/')
read -ra VARIANTS <<< "${DECODE_AB_VARIANTS:-base cluster two_level two_level_c8 two_level_c4 last last_c8 last_c4 deep deep_last base_again}"
venv() {  # the environment of a variant
  case $1 in
    base|base_again) echo "FLASHKIT_DECODE_COMBINE=auto" ;;
    cluster) echo "FLASHKIT_DECODE_COMBINE=cluster" ;;
    two_level) echo "FLASHKIT_DECODE_COMBINE=two_level" ;;
    two_level_c*) echo "FLASHKIT_DECODE_COMBINE=two_level FLASHKIT_DECODE_CLUSTER=${1#two_level_c}" ;;
    last) echo "FLASHKIT_DECODE_COMBINE=two_level_counter" ;;
    last_c*) echo "FLASHKIT_DECODE_COMBINE=two_level_counter FLASHKIT_DECODE_CLUSTER=${1#last_c}" ;;
    deep) echo "FLASHKIT_DECODE_D256_DEEP=1" ;;
    deep_last) echo "FLASHKIT_DECODE_D256_DEEP=1 FLASHKIT_DECODE_COMBINE=two_level_counter" ;;
  esac
}
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
        -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests || exit 1 ;;
    test)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run test_decode timeout 300 "$A" --gtest_filter="$DEC_GRID:$DEC_PATHS" --gtest_brief=1
      for v in two_level two_level_c4 two_level_c2 last last_c4; do
        run "test_graph_$v" timeout 120 env $(venv $v) "$A" --gtest_filter='*DecodeGraph*' --gtest_brief=1
        grep -E "decode path:" "$LOG" | tail -1 | sed "s/^/decode_ab: $v /"
      done
      run test_nonfinite timeout 300 "$A" --gtest_filter='*NonFinite*:*Deterministic*' --gtest_brief=1
      run test_choice timeout 120 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    sanitize)
      A=$(bin flashkit_cuda_tests)
      P='Paths/CudaAttentionPaths.MatchesReference/decode_two_level'
      F="${P}_c2_flash_B1_Sq1_Sk3001_H8x1_D256_causal_bf16:${P}_c4_nopdl_flash_B1_*H16x4_D64*varlen*"
      F="$F:${P}_c2_flash_B2_Sq3_Sk4096_H32x8_D128_causal_win3000__1_bf16"
      F="$F:Paths/CudaAttentionPaths.MatchesReference/decode_d256_deep_last_flash_B1_Sq1_Sk32749_H8x1_D256_causal_bf16"
      F="$F:${P}_last_flash_B1_Sq1_Sk32749_H8x1_D256_causal_bf16:${P}_last_c2_flash_B1_*H16x4_D64*varlen*"
      F="$F:${P}_last_c2_flash_B1_Sq2_Sk8192_H32x8_D128_causal_bf16"
      run memcheck_two_level timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run racecheck_two_level timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" \
        --gtest_filter="${P}_c2_flash_B1_Sq1_Sk3001_H8x1_D256_causal_bf16:${P}_last_c2_flash_B1_Sq2_Sk8192_H32x8_D128_causal_bf16" \
        --gtest_brief=1 ;;
    bench)
      : > "$OUT/decode-ab.txt"
      for v in "${VARIANTS[@]}"; do
        mkdir -p "$OUT/ab/$v"
        run "bench_$v" timeout 120 env $(venv $v) python3 bench/cuda/bench_attention.py --out "$OUT/ab/$v" --decode-only --batch1
        python3 - "$v" "$OUT/ab/$v/decode-cuda.json" <<'EOF' | tee -a "$OUT/decode-ab.txt" "$LOG"
import json, sys
v, path = sys.argv[1], sys.argv[2]
try:
    rows = json.load(open(path))["rows"]
except Exception as e:
    print("decode_ab: %s no result (%s)" % (v, e)); sys.exit(0)
for r in rows:
    print("decode_ab: %-13s b%d h%d/%d d%d kv%-6d: %7.1f us %5.1f%% of 4.24 TB/s (sdpa %5.1f%%) [%s]" % (
        v, r["batch"], r["heads"], r["kv_heads"], r["head_dim"], r["kv_len"], r["flashkit_us"],
        100 * r["flashkit_TBps"] / 4.24, 100 * r["sdpa_TBps"] / 4.24, r["flashkit_kernel"]))
EOF
      done
      tar czf "$OUT/decode-ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
log "decode_ab: status=$status"
exit $status
