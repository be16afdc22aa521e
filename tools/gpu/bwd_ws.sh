#!/usr/bin/env bash
# The warp-specialized Hopper attention backward at head dims 64/128 (flash_bwd_sm90_ws.cuh, worklog v22) on the GPU
# machine (an H200): build the library and the CUDA tests (registers/spills of the new kernel from ptxas), the CUDA
# grid's head-dim 64/128 cases (and those padded to them) on the default path (v22 at d128, v6 at d64), on the
# sm90bwd_v6 path (FLASHKIT_SM90_BWD_WS=0: v6 everywhere) and on the sm90bwd_ws path (FLASHKIT_SM90_BWD_WS=1: v22
# at d64 too), compute-sanitizer memcheck on three cases and racecheck on four (v22 at d128 causal, d128
# non-causal, d128 varlen, d64 forced), then the backward alone, v22 vs v6 vs SDPA flash vs cuDNN in one process
# (bench/cuda/bench_bwd_ws.py: d64 and d128, seqlen 1k/4k/16k, 32k tokens, 16 heads, causal or not).
#   tools/gpu/bwd_ws.sh [STAGES...]    default: build test sanitize bench   (about 4-5 minutes from a cold machine)
#   tools/gpu/bwd_ws.sh build d256     the d256 kernel (flash_bwd_sm90_ws_d256.cuh, worklog v24) alone: its ptxas
#     lines, the grid's head dims padded to 256 on it and on v16, the varlen non-finite test, memcheck and racecheck
#     on three d256 cases each, and its bench (v24 vs v16 vs SDPA flash vs cuDNN, lines "bwd256: ..."; bwd256.json)
# Results under $OUT: bwd-ws.log (every step), bwd-ws.txt (the summary printed at the end), bwd-ws.json (the
# benchmark rows), failed.txt. The tokenizer's PCRE2/ICU come from .fkdeps (carry=[".fkdeps.tar.xz"],
# see tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/bwd-ws.log"
SUM="$OUT/bwd-ws.txt"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
status=0
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit.so
: > "$SUM"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
A="$BUILD/tests/attention/flashkit_cuda_tests"
# Head dims 64/128 and those padded to them (D8, D40, D96) in the CUDA grid; test names are
# SUITE/CLASS.MatchesReference/[PATH_]CASE.
DIMS="D64 D128 D8 D40 D96"
FGRID=$(for d in $DIMS; do printf 'Grid/*_%s_*:' "$d"; done)
FV6=$(for d in $DIMS; do printf 'Paths/*/sm90bwd_v6_*_%s_*:' "$d"; done)
FWS=$(for d in D64 D8 D40; do printf 'Paths/*/sm90bwd_ws_*_%s_*:' "$d"; done)  # v22 where the default is v6
# "bwd path:" lines of the log's lines [$1, $2), counted per kernel.
paths_between() { sed -n "$1,$(($2 - 1))p" "$LOG" | grep -E '^bwd path:' | awk '{print $NF}' | sort | uniq -c | tr -s ' ' | tr '\n' ';'; }
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests || exit 1
      # Registers and spills of the new kernel (one instantiation per dtype and head dim), compiled again with
      # ptxas -v: 168 registers (the launch bound; setmaxnreg moves them), 0 spills and no C75xx line (serialized
      # wgmmas) expected for all four.
      for obj in bf16_d64 bf16_d128 f16_d64 f16_d128; do
        o=$BUILD/src/CMakeFiles/flashkit_core.dir/kernels/cuda/flash_bwd_sm90_ws_${obj}.cu.o
        cmd=$(cd "$BUILD" && ninja -t commands "${o#$BUILD/}" 2>/dev/null | tail -1 | sed "s# -o [^ ]*# -o /tmp/ptxas_ws_$obj.o#")
        [ -n "$cmd" ] && (cd "$BUILD" && eval "$cmd -Xptxas -v") 2>&1 |
          grep -E -A2 "flash_bwd_sm90_ws_kernel|C75[0-9][0-9]" | grep -E "registers|spill|C75[0-9][0-9]" | cut -c1-160 |
          sed "s/^/ptxas $obj: /" | tee -a "$SUM"
      done ;;
    test)
      run choice "$BUILD/tests/attention/flashkit_tests" --gtest_filter='CudaChoice.*' --gtest_brief=1
      l0=$(wc -l < "$LOG")
      run grid_default timeout 150 "$A" --gtest_filter="$FGRID" --gtest_brief=1
      l1=$(wc -l < "$LOG")
      run grid_v6 timeout 150 "$A" --gtest_filter="$FV6" --gtest_brief=1
      l2=$(wc -l < "$LOG")
      run grid_ws_forced timeout 150 "$A" --gtest_filter="$FWS" --gtest_brief=1
      l3=$(wc -l < "$LOG")
      run nonfinite timeout 60 "$A" --gtest_brief=1 \
        --gtest_filter='CudaAttention.NonFiniteLseInBackward:CudaAttention.VarlenNonFiniteStaysInItsSequence'
      grep -E "^\[  FAILED  \] [A-Z]" "$LOG" | sed 's/ ([0-9]* ms)$//' | sort -u | tail -40 > "$OUT/failed.txt"
      {
        echo "tests: $(grep -E '^\[  PASSED  \]' "$LOG" | tail -4 | tr '\n' ' ') failed: $(wc -l < "$OUT/failed.txt")"
        cat "$OUT/failed.txt"
        # Which backward each case ran: the default grid sm90ws.*.d128 except softcap cases, sm90wgmma for the
        # rest (d64 and softcap); the v6 path sm90wgmma only; the forced path sm90ws.*.d64 except softcap cases.
        # "flashkit: warp-specialized Hopper backward not used" on stderr: a fallback (say why).
        echo "bwd paths (Grid): $(paths_between "$l0" "$l1")"
        echo "bwd paths (Paths/sm90bwd_v6): $(paths_between "$l1" "$l2")"
        echo "bwd paths (Paths/sm90bwd_ws, d64 forced): $(paths_between "$l2" "$l3")"
        echo "bwd paths (varlen non-finite, v22 forced then v6 per head dim): $(grep -E '^bwd path: varlen non-finite' "$LOG" | awk '{print $NF}' | tr '\n' ' ')"
        echo "ws fallbacks: $(grep -c 'warp-specialized Hopper backward not used' "$LOG")"
      } | tee -a "$SUM" ;;
    sanitize)
      # v22 on each: d128 by default, d64 forced (the default grid runs v6 there).
      C='Grid/*Sq70_Sk190_H8x1_D128_causal_bf16:Paths/*/sm90bwd_ws_*Sq197_Sk199_H8x2_D64_f16:Grid/*H6x2_D128_causal_bf16_varlen'
      run memcheck_ws timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$C" --gtest_brief=1
      echo "memcheck: rc=$(grep -oE 'memcheck_ws: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'ERROR SUMMARY' "$LOG" | tail -1)" | tee -a "$SUM"
      # v22 at d128 causal (GQA 8:1, ragged tiles: run s14-3's LSE/Dsum hazards), d128 non-causal (f16, 3 query
      # tiles x 2 heads: the LSE/Dsum slots and the Q/dO ring wrap), d128 varlen (zeroed tails, empty sequences),
      # and d64 forced (BM 128).
      R='Grid/*Sq70_Sk190_H8x1_D128_causal_bf16:Grid/*Sq131_Sk67_H6x3_D128_f16:Grid/*H6x2_D128_causal_bf16_varlen'
      R="$R:Paths/*/sm90bwd_ws_*Sq197_Sk199_H8x2_D64_f16"
      run racecheck_ws timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$R" --gtest_brief=1
      echo "racecheck: rc=$(grep -oE 'racecheck_ws: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG" | tail -1) tests: $(grep -E '^\[  PASSED  \] [0-9]+ test' "$LOG" | tail -1)" | tee -a "$SUM" ;;
    bench)
      run bench timeout 200 python3 bench/cuda/bench_bwd_ws.py --json "$OUT/bwd-ws.json"
      grep -E "^bwd d|^d(64|128) causal=" "$LOG" | tail -14 | tee -a "$SUM" ;;
    d256)
      # v24: ptxas (168 registers, 0 spills, no C75xx line expected for both dtypes).
      for obj in bf16_d256 f16_d256; do
        o=$BUILD/src/CMakeFiles/flashkit_core.dir/kernels/cuda/flash_bwd_sm90_ws_${obj}.cu.o
        cmd=$(cd "$BUILD" && ninja -t commands "${o#$BUILD/}" 2>/dev/null | tail -1 | sed "s# -o [^ ]*# -o /tmp/ptxas_ws_$obj.o#")
        [ -n "$cmd" ] && (cd "$BUILD" && eval "$cmd -Xptxas -v") 2>&1 |
          grep -E -A2 "flash_bwd_sm90_ws_d256_kernel|C75[0-9][0-9]" | grep -E "registers|spill|C75[0-9][0-9]" |
          cut -c1-160 | sed "s/^/ptxas $obj: /" | tee -a "$SUM"
      done
      # The grid's head dims padded to 256 (D256, D200, D136): the default path (v24, softcap cases v16) and the
      # sm90bwd_v6 path (FLASHKIT_SM90_BWD_WS=0: v16 everywhere); then the varlen non-finite test (d64/d128/d256,
      # ws forced and v6/v16).
      F=$(for d in D256 D200 D136; do printf 'Grid/*_%s_*:' "$d"; done)
      FV16=$(for d in D256 D200 D136; do printf 'Paths/*/sm90bwd_v6_*_%s_*:' "$d"; done)
      l0=$(wc -l < "$LOG")
      run grid_d256 timeout 120 "$A" --gtest_filter="$F" --gtest_brief=1
      l1=$(wc -l < "$LOG")
      run grid_d256_v16 timeout 120 "$A" --gtest_filter="$FV16" --gtest_brief=1
      l2=$(wc -l < "$LOG")
      run nonfinite_d256 timeout 60 "$A" --gtest_brief=1 --gtest_filter='CudaAttention.VarlenNonFiniteStaysInItsSequence'
      grep -E "^\[  FAILED  \] [A-Z]" "$LOG" | sed 's/ ([0-9]* ms)$//' | sort -u | tail -40 > "$OUT/failed.txt"
      {
        echo "d256 tests: $(grep -E '^\[  PASSED  \]' "$LOG" | tail -3 | tr '\n' ' ') failed: $(wc -l < "$OUT/failed.txt")"
        cat "$OUT/failed.txt"
        # Expected: (Grid) sm90ws.{bf16,f16}.d256 for every case without "_cap", sm90wgmma for the "_cap" ones;
        # (v16 path) sm90wgmma only; "not on v24" 0; the non-finite test's d256 lines sm90ws then sm90wgmma.
        echo "bwd paths (Grid, d256): $(paths_between "$l0" "$l1")"
        echo "d256 cases without softcap not on v24: $(sed -n "$l0,$((l1 - 1))p" "$LOG" | grep -E '^bwd path:' | grep -v '_cap' | grep -vc 'sm90ws')"
        echo "bwd paths (Paths/sm90bwd_v6, d256): $(paths_between "$l1" "$l2")"
        echo "bwd paths (varlen non-finite, ws forced then v6/v16 per head dim): $(grep -E '^bwd path: varlen non-finite' "$LOG" | tail -6 | awk '{print $NF}' | tr '\n' ' ')"
        echo "ws fallbacks: $(grep -c 'warp-specialized Hopper backward not used' "$LOG")"
      } | tee -a "$SUM"
      # Sanitizers on v24: GQA 3:1 causal with nq < nk (the Q/dO ring and the P^T/dS^T parity buffers wrap over
      # heads), varlen non-causal (zeroed K and Q/dO tails, empty sequences), a two-sided window / more rows than keys.
      C='Grid/*Sq100_Sk333_H6x2_D256_causal_bf16:Grid/*H4x2_D256_bf16_varlen:Grid/*Sq200_Sk260_H4x4_D256_win40*'
      run memcheck_d256 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$C" --gtest_brief=1
      echo "memcheck d256: rc=$(grep -oE 'memcheck_d256: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'ERROR SUMMARY' "$LOG" | tail -1)" | tee -a "$SUM"
      R='Grid/*Sq100_Sk333_H6x2_D256_causal_bf16:Grid/*H4x2_D256_bf16_varlen:Grid/*Sq190_Sk65_H2x1_D256_causal_bf16'
      run racecheck_d256 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$R" --gtest_brief=1
      echo "racecheck d256: rc=$(grep -oE 'racecheck_d256: rc=[0-9]+' "$LOG" | tail -1 | cut -d= -f2) $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG" | tail -1)" | tee -a "$SUM"
      # Backward alone at d256 (bench_bwd_ws.py: its "v22" rows run FLASHKIT_SM90_BWD_WS=1, here v24; "v6" =0, here
      # v16), then one line per shape from the JSON.
      run bench_d256 timeout 150 python3 bench/cuda/bench_bwd_ws.py --head-dims 256 --reps 5 --json "$OUT/bwd256.json"
      [ -f "$OUT/bwd256.json" ] && python3 - "$OUT/bwd256.json" <<'PY' 2>&1 | tee -a "$SUM"
import json, sys
def tf(r, m):
    x = r.get(m) or {}
    return "%.0f" % x["bwd_tflops"] if "bwd_tflops" in x else "n/a"
for r in json.load(open(sys.argv[1])):
    e = r.get("v22_rel_err_vs_sdpa_flash") or {}
    print("bwd256: causal=%d s=%d ws=%s v16=%s flash=%s cudnn=%s TFLOP/s  [%s | %s] err ws dq/dk/dv %s" % (
        r["causal"], r["seqlen"], tf(r, "v22"), tf(r, "v6"), tf(r, "sdpa_flash"), tf(r, "sdpa_cudnn"),
        r.get("v22_kernel", "-"), r.get("v6_kernel", "-"), "/".join("%.1e" % e[k] for k in ("dq", "dk", "dv")) if e else "-"))
PY
      ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
echo "== summary ($SUM)"; cat "$SUM"
exit $status
