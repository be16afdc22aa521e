#!/usr/bin/env bash
# The fp8 (e4m3) attention forward on the GPU machine (an H200; issue 20; docs/worklog/attention-fp8-cuda.md), in
# one call that fits in ~5 minutes:
#   build     libflashkit_core (sm_90a only), flashkit_fp8_cuda_tests, and bench/cuda/fp8_shim.cpp (ctypes shim)
#   test      flashkit_fp8_cuda_tests: quantize_e4m3 on the device vs the CPU bytes, the fp8 kernels (d128, d256) vs the f64
#             reference of the dequantized inputs with P rounded to e4m3 (odd seqlens, GQA, causal, poisoned
#             outputs), the unsupported-head-dim error
#   sanitize  compute-sanitizer memcheck on two small cases (17 keys causal; batch 2, 255 keys, GQA, causal)
#   bench     bench/cuda/bench_attention_fp8.py: d128 and d256, 16 heads, seqlen 1k/4k/16k at 32k tokens, causal and not:
#             fp8 vs flashkit bf16 vs SDPA cuDNN/flash bf16 (TFLOP/s), the V^T prep alone, accuracy vs bf16
#   rescale   v4 (O's rescale skipped or lazy, Tuning::fp8_rescale; worklog v4), in ~4 minutes: build, ptxas's
#             verdict on the 10 fp8 kernels (spills, wgmma serialization), a smoke case, the fp8 tests (every Grid
#             case with RESCALE 0, 1, 2: 1 byte for byte against 0, 2 against the lazy reference; d256 with 0 and 1),
#             memcheck on two cases of RESCALE 1 and 2, the bench at d128 and d256 ([r0 .. r1 .. r2 ..])
#   keytile   v5 (the wide key tiles of d128, Tuning::fp8_key_tile; worklog v5), in ~5 minutes: build, ptxas's
#             verdict on the 12 fp8 kernels, a smoke case per tile, all fp8 tests (KeyTiles: every Grid case at BN
#             192 against the reference with p_tile = BN), memcheck on three wide-tile cases, the bench at d128
#             ({bn128 .. bn192 ..}, alternated 3 times, both masks, 1k-16k)
#   flagab    a compile-time variant (FP8_AB_FLAGS, e.g. -DNAME=VALUE) against the default build: two builds, the
#             bench alternated 3 times (d128, d256, 4k-32k), the SM clock and power logged (nvidia-smi, 200 ms)
#   power     bench/cuda/power_clock_probe.py (after build): each forward run back to back for 3 s, its TFLOP/s beside
#             the SM clock and power nvidia-smi saw meanwhile (fp8 and bf16 d128 16k, bf16 d64 causal 1k; SDPA too)
#   keybench  the key tiles' bench alone (after build): alternated 7 times a point, d128, both masks, 1k-32k
#   python    tools/gpu/fp8_python_check.py (not a default stage; after build): flashkit.torch.quantize_e4m3 and
#             attention_forward_fp8 on CUDA float8_e4m3fn tensors against the CPU path on the same bytes (~30 s);
#             prints "python fp8: ok rel_rms X"
#   tools/gpu/fp8.sh [STAGES...]     default: build test bench sanitize (the numbers before the slow memcheck)
#   tools/gpu/fp8.sh build python    the Python wrappers only
#   tools/gpu/fp8.sh rescale         v4's checks and numbers
# Results: $OUT/fp8.log (everything), $OUT/attention-fp8.json, $OUT/failed.txt. Exit status non-zero if a stage
# failed. carry=[".fkdeps.tar.xz"] (configure finds PCRE2/ICU through carried_deps.sh, as the other scripts).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/fp8.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench sanitize)
status=0
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
T=$BUILD/tests/attention/flashkit_fp8_cuda_tests
SHIM=$BUILD/lib/libfk_fp8_shim.so
# DIR STEP_SUFFIX TARGETS...: configure and build DIR (CUDAFLAGS from the environment reach nvcc at configure time),
# then link the benchmark's ctypes shim into DIR/lib/libfk_fp8_shim.so.
build_tree() {
  local dir=$1 sfx=$2
  shift 2
  run configure$sfx cmake -S . -B "$dir" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
    -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || return 1
  run build$sfx cmake --build "$dir" -j"$(nproc)" --target "$@" || return 1
  run shim$sfx g++ -std=c++20 -O2 -shared -fPIC -Iinclude -Isrc -I/usr/local/cuda/include bench/cuda/fp8_shim.cpp \
    -L"$dir/lib" -lflashkit_core -Wl,-rpath,"$PWD/$dir/lib" -L/usr/local/cuda/lib64 -lcudart \
    -o "$dir/lib/libfk_fp8_shim.so" || return 1
}
build() {
  build_tree "$BUILD" "" flashkit_core flashkit_fp8_cuda_tests || exit 1
  # Registers and spills of the fp8 kernels (REG:168 STACK:0 LOCAL:0 expected: the setmaxnreg budget, no spills).
  for f in d128 d128_r1 d128_r2 d128_r1_bn192 d256 d256_r1; do
    cuobjdump --dump-resource-usage "$BUILD"/src/CMakeFiles/flashkit_core.dir/kernels/cuda/fp8/flash_fwd_fp8_sm90_$f.cu.o \
      2>/dev/null | grep -E "REG" | sed -E 's/^ *//' | tee -a "$LOG"
  done
  return 0
}
# ptxas's own verdict with this machine's nvcc on the 12 fp8 kernels (d128 with RESCALE 0/1/2 and with 1 at BN 192,
# d256 with 0/1; ping-pong on/off), compiled in parallel: spills and wgmma serialization (C7510/C7514/C7520
# "Potential Performance Loss"). Expected: one line "ptxas fp8: 12 0 bytes stack frame, 0 bytes spill stores, 0
# bytes spill loads" and no other.
ptxas_fp8() {
  local f
  for f in d128 d128_r1 d128_r2 d128_r1_bn192 d256 d256_r1; do
    nvcc -std=c++20 --expt-relaxed-constexpr -O3 -DNDEBUG -DFLASHKIT_HAVE_SM90A -DFLASHKIT_WITH_CUDA -Iinclude -Isrc \
      --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v -c src/kernels/cuda/fp8/flash_fwd_fp8_sm90_$f.cu \
      -o "$BUILD/fp8_${f}_ptxas.o" > "$BUILD/fp8_${f}_ptxas.log" 2>&1 &
  done
  wait
  cat "$BUILD"/fp8_d*_ptxas.log >> "$LOG"
  cat "$BUILD"/fp8_d*_ptxas.log | grep -A2 "Compiling entry function '_ZN8flashkit4cuda25flash_fwd_fp8" \
    | grep -E "Potential|spill" | sed -E 's/ in the function.*//; s/^ *//' | sort | uniq -c | sed 's/^/ptxas fp8: /' \
    | tee -a "$LOG"
  grep -E "Potential|C75[0-9][0-9]" "$BUILD"/fp8_d*_ptxas.log | sed 's/^/ptxas fp8: /' | tee -a "$LOG"
}
# A kernel variant's checks: build, ptxas beside the GPU steps, smoke cases first (a hang costs 60 s, not the run;
# returns 1 then), all fp8 tests (lines matching $3 shown), memcheck on $4, the bench with the remaining arguments.
variant_checks() {
  local name=$1 smoke=$2 shown=$3 memcheck=$4
  shift 4
  build || exit 1
  ptxas_fp8 &
  local ptxas_pid=$!
  run fp8_smoke timeout 60 "$T" --gtest_filter="$smoke"
  if [ $? -eq 124 ]; then log "fp8 kernel hung on the smoke case: stopping"; status=1; wait $ptxas_pid; return 1; fi
  run fp8_tests timeout 200 "$T"
  grep -E "$shown|SKIPPED" "$LOG" | tail -30
  grep -qE "SKIPPED.*Fp8Cuda" "$LOG" && { log "Fp8Cuda was skipped: no Hopper GPU visible?"; status=1; }
  run memcheck_fp8_$name timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_brief=1 \
    --gtest_filter="$memcheck"
  run bench_fp8_$name timeout 200 python3 bench/cuda/bench_attention_fp8.py --shim "$SHIM" --out "$OUT" "$@" \
    ${QUICK:+--quick}
  grep -E "^fp8 d|unavailable" "$LOG" | tail -12
  wait $ptxas_pid
}
for st in "${STAGES[@]}"; do
  case $st in
    build) build || exit 1 ;;
    rescale)
      # Grid index 3 * case + RESCALE. Smoke: 17 x 17 causal (masked tiles only) then 255 x 1000 (8 key tiles), both
      # on RESCALE 2. memcheck: 13 = 255 x 1000 keys on RESCALE 1, 11 = batch 2 x 255 keys, GQA, causal on RESCALE 2.
      variant_checks rescale 'Grid/Fp8Cuda.MatchesTheRoundedPReference/8:Grid/Fp8Cuda.MatchesTheRoundedPReference/14' \
        "^fp8 cuda" 'Grid/Fp8Cuda.MatchesTheRoundedPReference/13:Grid/Fp8Cuda.MatchesTheRoundedPReference/11' \
        --dims 128,256 || break ;;
    keytile)
      # KeyTiles index = case (BN 192). Smoke: one key, 255 x 1000 keys. memcheck: 130 x 449 keys (a 65-key last
      # tile), batch 2 x 255 keys GQA causal, 1000 x 1000 causal.
      K=KeyTiles/Fp8CudaKeyTile.MatchesTheRoundedPReference
      L=KeyTilesLastKey/Fp8CudaKeyTile.MatchesTheRoundedPReference
      variant_checks keytile "$K/0:$K/4" "^fp8 cuda r1 bn192" "$L/0:$K/3:$K/5" \
        --dims 128 --modes "" --key-tiles 128,192 --rounds 3 || break ;;
    flagab)
      # A compile-time variant against the default build, in one process each, alternated: the library built again
      # in $BUILD-ab with CUDAFLAGS=$FP8_AB_FLAGS (required: e.g. a -D of a macro the variant's code reads; worklog
      # v7 used -DFLASHKIT_FP8_SOFTMAX_PARTS=4), then the bench's automatic call (and BN 192 at d128) with each shim,
      # 3 rounds, d128 and d256, 4k-32k, both masks; nvidia-smi's SM clock and power every 200 ms ($OUT/smi.csv).
      FLAGS=${FP8_AB_FLAGS:?flagab needs FP8_AB_FLAGS}
      build || exit 1
      BUILD_AB=$BUILD-ab
      CUDAFLAGS="$FLAGS" build_tree "$BUILD_AB" _ab flashkit_core || exit 1
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 \
        > "$OUT/smi.csv" 2>&1 &
      SMI=$!
      for round in 1 2 3; do
        for side in base ab; do
          shim=$SHIM; [ $side = ab ] && shim=$BUILD_AB/lib/libfk_fp8_shim.so
          log "flagab round $round side $side ($FLAGS)"
          run bench_fp8_${side}_$round timeout 200 python3 bench/cuda/bench_attention_fp8.py --shim "$shim" \
            --out "$OUT/flagab-$side-$round" --dims 128,256 --modes "" --key-tiles 192 --seqlens 4096,16384,32768
          grep -E "^fp8 d" "$LOG" | tail -12 | sed -E "s/^/$side $round: /; s/\(rel_rms [0-9.e-]+\)//g; s/flashkit_bf16.*//"
        done
      done
      kill $SMI ;;
    power)
      # Sustained TFLOP/s, SM clock and power of the fp8 and bf16 forwards beside SDPA (after build; ~40 s).
      run power_probe timeout 150 python3 bench/cuda/power_clock_probe.py --shim "$SHIM" --out "$OUT"
      grep -E "^power probe|unavailable" "$LOG" | tail -8 ;;
    keybench)
      # The key tiles alone, alternated 7 times a point, 1k-32k (after build).
      run bench_fp8_keybench timeout 300 python3 bench/cuda/bench_attention_fp8.py --shim "$SHIM" --out "$OUT" \
        --dims 128 --modes "" --key-tiles 128,192 --rounds 7 --seqlens 1024,2048,4096,8192,16384,32768
      grep -E "^fp8 d|unavailable" "$LOG" | tail -12 ;;
    test)
      # One small case first: a kernel that hangs (an mbarrier protocol error) costs 60 s here, not the whole run.
      # Grid index 3 * case + RESCALE: /3 is 17 x 17 keys on RESCALE 0.
      run fp8_smoke timeout 60 "$T" --gtest_filter='Grid/Fp8Cuda.MatchesTheRoundedPReference/3'
      if [ $? -eq 124 ]; then log "fp8 kernel hung on the smoke case: stopping"; status=1; break; fi
      run fp8_tests timeout 180 "$T"
      grep -E "^fp8 cuda|SKIPPED" "$LOG" | tail -34
      grep -qE "SKIPPED.*Fp8Cuda" "$LOG" && { log "Fp8Cuda was skipped: no Hopper GPU visible?"; status=1; } ;;
    sanitize)
      # 17 keys causal and batch 2, 255 keys, GQA, causal (RESCALE 0: Grid index 3 * case).
      run memcheck_fp8 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_brief=1 \
        --gtest_filter='Grid/Fp8Cuda.MatchesTheRoundedPReference/6:Grid/Fp8Cuda.MatchesTheRoundedPReference/9' ;;
    bench)
      run bench_fp8 timeout 200 python3 bench/cuda/bench_attention_fp8.py --shim "$SHIM" --out "$OUT" ${QUICK:+--quick}
      grep -E "^fp8 d|unavailable" "$LOG" | tail -14 ;;
    python)
      export FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit_core.so  # the attention library alone (all the build stage makes)
      run python_fp8 timeout 120 python3 tools/gpu/fp8_python_check.py
      grep -E "^python fp8|^FAIL" "$LOG" | tail -12 ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
grep -E "^\[  FAILED  \]|rc=[1-9]|ERROR SUMMARY: [1-9]|hung" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
log "done: status=$status (failures, if any: $OUT/failed.txt)"
exit $status
