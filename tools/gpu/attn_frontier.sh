#!/usr/bin/env bash
# Issue 20's attention work on the device machine (an H200), one call per job: build what the attention tests and
# benchmarks need, run the Hopper kernels' tests, memcheck them, and time them against SDPA's flash and cuDNN
# backends in one process (bench/cuda/bench_attention.py).
#   tools/gpu/attn_frontier.sh [STAGES...]      default: build test sanitize bench256
# Stages:
#   build      configure + build libflashkit and flashkit_cuda_tests (the build folder stays on a warm machine)
#   test       the CUDA grid and paths at head dims 200/256 (every d256 kernel: sm80, the Hopper ws forward, the
#              backward's choice), the non-finite rules, determinism, and the kernel-choice tests
#   sanitize   compute-sanitizer memcheck + racecheck on small d256 cases of the Hopper forward
#   bench256   head dim 256 forward and forward+backward, seqlen 512..16k (16k tokens per batch, 8 heads):
#              flashkit vs SDPA flash vs SDPA cuDNN, TFLOP/s (CUDA-graph replays); $OUT/bench256.txt
#   grid       the whole prefill grid (d64/128/256) and batch-1 decode: $OUT/attention-cuda.{json,md}, decode-cuda.json
#   decode1    batch-1 decode bandwidth only: $OUT/decode-cuda.json
#   bn176      d128's wide key tile (FLASHKIT_SM90_WS_BN=176, v18): the grid's d128 cases on it, memcheck and
#              racecheck on two small cases, then the d128 forward (causal and not, 512..16k) with BN 128 and with
#              BN 176 against SDPA cuDNN (graph timing, one process each): $OUT/bn176.txt, "bn176:" lines
#   bn192      the same for d64's wide tile (BN 192, v18b): $OUT/bn192.txt, "bn192:" lines
#   decodencu  Nsight Compute on batch-1 decode calls at 32k keys (tools/gpu/decode_ncu.py; DECODE_NCU_KV to change):
#              every kernel of each call (decode, split merge) with its duration, DRAM bytes and throughput, grid,
#              occupancy: $OUT/decode-ncu.txt and one "decode ncu:" line per kernel
#   persist    the persistent ws forward (v19; after build): the choice tests, the CUDA grid at d64/d96/d128 (default
#              path and sm90cfg3: the ws kernel with one CTA per tile) and its
#              two forced-persistent paths (sm90ws_persist: one CTA per SM; sm90ws_persist3: 3 CTAs, several tiles
#              each), memcheck + racecheck on small persistent cases, then the A/B bench persistent vs one CTA per
#              tile vs SDPA flash / cuDNN at d64/d128, causal and not, 512..16k (bench/cuda/bench_ws_persist.py; one
#              "persist d.. causal=. s=..: ws A persistent B (+x%) sdpa_flash C cudnn D same=1 kernel=..." line per
#              point): $OUT/persist.txt, $OUT/ws-persist.json
#   short      the persistent ws forward's epilogue under the next tile's first product (v23; after build): the choice
#              tests, the CUDA grid on the six persistent paths (sm90ws_persist / sm90ws_persist3: the new order;
#              *_serialepi: v19's order; *_tma: the new order with O stored by TMA, v23b) and d128's default grid,
#              memcheck + racecheck on four small persistent cases (3 CTAs: several tiles each; one with TMA
#              stores), then the A/B/C bench base (v19's order) vs new vs new2 (v23b), all on the forced persistent
#              grid, vs SDPA flash / cuDNN at d64/d128, causal and not, 512..4k (bench/cuda/bench_ws_short.py; one
#              "short: d=.. causal=.. s=.. base=.. new=.. (+x%) new2=.. (+y%) sdpa_flash=.. cudnn=.. TFLOP/s same=1
#              ..." line per point): $OUT/short.txt, $OUT/ws-short.json
#   bwdncu     Nsight Compute on the Hopper backward at d128 (tools/gpu/ncu_profile.py: b4 s4096 h16, non-causal):
#              speed of light, memory (L2 atomics), warp states, scheduler, and the per-instruction stall samples of
#              the SASS: $OUT/bwd-ncu.txt, $OUT/bwd-sass.csv.xz; "bwd ncu:" lines
#   fwdncu     the same stall view of the short-sequence forward (tools/gpu/fwd_short_ncu.py: d128 s512 non-causal
#              and causal, d64 s512 causal; b32): $OUT/fwd-ncu.txt, $OUT/fwd-sass.csv.xz
#   decodesrc  the same stall view of batch-1 decode at 32k keys (both goal shapes): $OUT/decode-src.txt,
#              $OUT/decode-sass.csv.xz
#   dense      the persistent ws forward's DENSE variant (v27; after build): the choice tests, the CUDA grid on the
#              four sm90ws_dense paths (the grid's dense cases take it, the others fall back), dense vs general
#              bit for bit (WsDenseBitIdenticalToGeneral), memcheck + racecheck on
#              three small dense persistent cases (3 CTAs: several tiles each), then the A/B bench general vs dense on
#              the forced persistent grid vs SDPA flash / cuDNN at d64/d128, causal and not, 512..4k
#              (bench/cuda/bench_ws_short.py --ab dense; one "dense: d=.. causal=.. s=.. general=.. dense=.. (+x%)
#              cudnn=.. TFLOP/s same=1 ..." line per point): $OUT/dense.txt, $OUT/ws-dense.json
# Results in $OUT/attn_frontier.log (+ failed.txt). carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/attn_frontier.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench256)
status=0
bin() { find "$BUILD/tests" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1
  git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
D256='*_D256_*:*_D200_*'
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
        -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests ${EXTRA_TARGETS:-} || exit 1 ;;
    test)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run test_d256 timeout 900 "$A" --gtest_filter="Grid/$D256:Paths/$D256" --gtest_brief=1
      run test_nonfinite timeout 600 "$A" --gtest_filter='*NonFinite*:*Deterministic*' --gtest_brief=1
      run test_choice timeout 120 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    sanitize)
      A=$(bin flashkit_cuda_tests)
      F='Grid/*B1_Sq100_Sk333_H6x2_D256_causal_bf16*:Grid/*H4x2_D256_bf16_varlen*:Grid/*B1_Sq256_Sk300_H4x2_D256_causal_win64*'
      run memcheck_d256 timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run racecheck_d256 timeout 600 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1 ;;
    bench256)
      run bench256 timeout 500 python3 bench/cuda/bench_attention.py --only flashkit,sdpa_flash,sdpa_cudnn --dims 256 \
        --timing graph --reps 10
      sed -n '/bench256: python3/,$p' "$LOG" | grep -v "^== bench256: rc" > "$OUT/bench256.txt" ;;
    persist)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run persist_choice timeout 60 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      run persist_paths timeout 300 "$A" --gtest_brief=1 \
        --gtest_filter='Paths/*sm90ws_persist*:Paths/*sm90cfg3_flash*:Grid/*_D64_*:Grid/*_D96_*:Grid/*_D128_*-*_D256_*:*_D200_*:*_D136_*'
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      F='Paths/*sm90ws_persist3_*_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90ws_persist3_*_H4x2_D64_causal_bf16_varlen'
      F="$F:Paths/*sm90ws_persist3_*_B1_Sq256_Sk300_H4x4_D128_causal_win64*:Paths/*sm90ws_persist_*_B2_Sq129_Sk257_H4x2_D64_bf16"
      run persist_memcheck timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run persist_racecheck timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run persist_bench timeout 300 python3 bench/cuda/bench_ws_persist.py --out "$OUT"
      grep -E "^persist d" "$LOG" | tee "$OUT/persist.txt" ;;
    short)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run short_choice timeout 60 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      run short_paths timeout 200 "$A" --gtest_brief=1 \
        --gtest_filter='Paths/*sm90ws_persist*:Paths/*sm90ws_persist*_tma_*:Grid/*_D128_*-*_D256_*:*_D200_*:*_D136_*'
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      F='*/sm90ws_persist3_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16:*/sm90ws_persist3_flash_B1_Sq256_Sk300_H4x4_D128_causal_win64*'
      F="$F:*/sm90ws_persist3_flash_*_H4x2_D64_causal_bf16_varlen"
      F="$F:*/sm90ws_persist3_tma_flash_B1_Sq256_Sk300_H4x4_D128_causal_win64*"  # v23b: TMA stores, buffer reuse
      run short_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run short_racecheck timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run short_bench timeout 150 python3 bench/cuda/bench_ws_short.py --out "$OUT"
      grep -E "^short: d" "$LOG" | tee "$OUT/short.txt" ;;
    grid)
      run grid timeout 580 python3 bench/cuda/bench_attention.py --out "$OUT" ;;
    decode1)
      run decode1 timeout 300 python3 bench/cuda/bench_attention.py --out "$OUT" --decode-only --batch1 ;;
    bn176)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run test_choice timeout 120 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      run test_bn176 timeout 600 "$A" --gtest_filter='Paths/*sm90cfg3_bn176*D128*' --gtest_brief=1
      F='Paths/*sm90cfg3_bn176_flash_B1_Sq300_Sk300_H8x1_D128_causal_bf16:Paths/*sm90cfg3_bn176_flash_B1_Sq0_Sk0_H8x2_D128_causal_bf16_varlen:Paths/*sm90cfg3_bn176_flash_B1_Sq200_Sk100_H4x4_D128_bf16'
      run memcheck_bn176 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run racecheck_bn176 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      for bn in 128 176; do
        FLASHKIT_SM90_WS_BN=$bn run "bench_bn$bn" timeout 300 python3 bench/cuda/bench_attention.py \
          --only flashkit,sdpa_cudnn --dims 128 --fwd-only --timing graph --reps 10
      done
      grep -E "^== bench_bn|^d128" "$LOG" | sed 's/^/bn176: /' | tee "$OUT/bn176.txt" ;;
    bn192)
      A=$(bin flashkit_cuda_tests)
      run test_bn192 timeout 600 "$A" --gtest_filter='Paths/*sm90cfg3_bn192*D64*' --gtest_brief=1
      F='Paths/*sm90cfg3_bn192_flash_B2_Sq129_Sk257_H4x2_D64_causal_bf16:Paths/*sm90cfg3_bn192_flash_B1_Sq1000_Sk600_H20x4_D64_causal_win300__1_bf16'
      run memcheck_bn192 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run racecheck_bn192 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      for bn in 128 192; do  # d64 takes the ws kernel from 2k tokens (causal 4k): the shorter points time cfg 1/2
        FLASHKIT_SM90_WS_BN=$bn run "bench_d64_bn$bn" timeout 300 python3 bench/cuda/bench_attention.py \
          --only flashkit,sdpa_cudnn --dims 64 --fwd-only --timing graph --reps 10
      done
      grep -E "^== bench_d64_bn|^d64" "$LOG" | sed 's/^/bn192: /' | tee "$OUT/bn192.txt" ;;
    decodencu)
      run decodencu timeout 300 ncu --clock-control none -k 'regex:decode|combine|merge' \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
        --metrics dram__bytes_read.sum,gpu__time_duration.sum --log-file "$OUT/decode-ncu.txt" \
        python3 tools/gpu/decode_ncu.py ${DECODE_NCU_KV:-32768}
      grep -E "^  [a-z_ ]*[a-zA-Z_:<>, 0-9]*\(|Duration|DRAM Throughput|dram__bytes_read.sum|Grid Size|Achieved Occupancy" \
        "$OUT/decode-ncu.txt" | sed 's/^/decode ncu: /' | tee -a "$LOG" | head -80 ;;
    bwdncu|decodesrc|fwdncu)
      if [ "$st" = bwdncu ]; then K='regex:flash_bwd_sm90'; C=2; PY=(tools/gpu/ncu_profile.py 128); N=bwd
      elif [ "$st" = fwdncu ]; then K='regex:flash_fwd'; C=3; PY=(tools/gpu/fwd_short_ncu.py 512); N=fwd
      else K='regex:decode'; C=8; PY=(tools/gpu/decode_ncu.py 32768); N=decode; fi
      run "$st" timeout 400 ncu --clock-control none -k "$K" -c $C --import-source yes \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section ComputeWorkloadAnalysis --section SourceCounters --section Occupancy -f -o "$BUILD/$N" \
        python3 "${PY[@]}"
      ncu -i "$BUILD/$N.ncu-rep" --print-details all > "$OUT/$N-ncu.txt" 2>&1
      ncu -i "$BUILD/$N.ncu-rep" --page source --csv --print-source sass 2> /dev/null | xz -6 > "$OUT/$N-sass.csv.xz"
      grep -E "^  [a-zA-Z_]|Duration|Throughput|Stall|Issued Warp|No Eligible|Eligible Warps|Registers|Achieved Occ" \
        "$OUT/$N-ncu.txt" | sed "s/^/$N ncu: /" | tee -a "$LOG" | head -120 ;;
    dense)
      A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests)
      run dense_choice timeout 60 "$T" --gtest_filter='CudaChoice.*' --gtest_brief=1
      run dense_paths timeout 240 "$A" --gtest_brief=1 \
        --gtest_filter='Paths/*sm90ws_dense*:*WsDenseBitIdenticalToGeneral*'
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      F='*/sm90ws_dense3_tma_flash_B2_Sq129_Sk257_H4x2_D64_causal_bf16:*/sm90ws_dense3_tma_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16'
      F="$F:*/sm90ws_dense3_serialepi_flash_B1_Sq300_Sk300_H8x1_D128_bf16"
      run dense_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run dense_racecheck timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
      run dense_bench timeout 150 python3 bench/cuda/bench_ws_short.py --ab dense --out "$OUT"
      grep -E "^dense: d" "$LOG" | tee "$OUT/dense.txt" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
log "attn_frontier: status=$status"
exit $status
