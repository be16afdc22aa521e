#!/usr/bin/env bash
# Issue 20 Required 5 (batch-1 decode bandwidth) on the device machine (an H200), one call: build, then the d256
# decode pipeline variants (attention-cuda.md v26): their tests against the f64 reference, compute-sanitizer on two
# cases, and the batch-1 A/B of FLASHKIT_DECODE_D256_PIPE in one process. <= 4 minutes for dec256 on a warm build.
#   tools/gpu/decode_ab.sh [STAGES...]      default: build dec256
# Stages:
#   build    configure + build libflashkit, flashkit_cuda_tests and flashkit_tests (as attn_frontier.sh)
#   dec256   (1) the decode grid cases at d256 (seqlen_q 1-3 and varlen) on the default path and every decode_*
#            path (decode_d256_base / _eager / _eager6 / _eager6_cluster, decode_cluster, decode_nopdl_splits64),
#            the graph-replay test, the PDL prefetch hazard test, the bit-equality of base / eager / prefetch and the
#            planner's tests; (2) memcheck of the prefetch (default) and eager6
#            kernels on the 32749-key window case and the 3001-key case, racecheck on the 3001-key case; (3)
#            bench/cuda/decode_d256_ab.py: base / auto (prefetch) / eager / eager6 interleaved in one process,
#            CUDA-graph timing, 32/8 d128 (control: the knob leaves d128 alone) and 8/1 d256 at 4k and 32k keys:
#            "dec256: h=8/1 d=256 keys=32768 base=13.70 new=9.90 us (80.1% of 4.24 TB/s; base 58.0%) eager=..."
#            The same lines in $OUT/dec256.txt, the samples in $OUT/decode-d256-ab.json.
# Results in $OUT/decode_ab.log (+ failed.txt). carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/decode_ab.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build dec256)
status=0
bin() { find "$BUILD/tests" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1
  git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
        -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests || exit 1 ;;
    dec256)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      # d256 decode cases: 8/1 heads (32749, 3001, 300 keys, a window, varlen) and 4/1 (3000 keys, window 500).
      G='Grid/*_Sq1_*D256*:Grid/*_Sq2_*D256*:Grid/*_Sq3_*D256*:Grid/*varlen*D256*'
      P=$(echo "$G" | sed 's/Grid\//Paths\/*decode_/g')
      run dec256_tests timeout 150 "$A" --gtest_filter="$G:$P:*DecodeGraph*:*PdlPrefetch*:*D256Pipes*" --gtest_brief=1
      grep -E "decode path: .*d256" "$LOG" | sort | uniq -c | sed 's/^/dec256: /' | tee -a "$OUT/dec256.txt"
      run dec256_choice timeout 60 "$T" --gtest_filter='CudaChoice.*Decode*' --gtest_brief=1
      S='Paths/CudaAttentionPaths.MatchesReference/decode_'
      F="Grid/CudaAttentionGrid.MatchesReference/flash_B1_Sq2_Sk32749_H8x1_D256_causal_win4000__1_cap_bf16"
      F="$F:Grid/CudaAttentionGrid.MatchesReference/flash_B1_Sq1_Sk3001_H8x1_D256_f16"
      F="$F:${S}d256_eager6_flash_B1_Sq1_Sk3001_H8x1_D256_f16:${S}d256_eager6_cluster_flash_B1_Sq1_Sk300_H8x1_D256_bf16"
      run dec256_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run dec256_racecheck timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" \
        --gtest_filter="Grid/CudaAttentionGrid.MatchesReference/flash_B1_Sq1_Sk3001_H8x1_D256_f16:${S}d256_eager6_flash_B1_Sq1_Sk3001_H8x1_D256_f16" \
        --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      run dec256_bench timeout 90 python3 bench/cuda/decode_d256_ab.py --out "$OUT"
      grep -E "^dec256: h=" "$LOG" | tee -a "$OUT/dec256.txt" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
log "decode_ab: status=$status"
exit $status
