#!/usr/bin/env bash
# The CS149 kernels (issue 19) on the GPU machine (an H200): build, CUDA tests at full and odd shapes, the
# benchmark against PyTorch eager / torch.compile at the course shapes, Nsight Compute once per kernel.
#   tools/gpu/cs149.sh [STAGES...]    default: build test bench ncu  (about 5 minutes from a warm build dir;
#                                     a cold library build takes longer: run `build` alone first then)
#   tools/gpu/cs149.sh build test ab ncu_ab    the A/B question in one call (< 8 minutes from a cold machine):
#                                     are the new versions correct (CUDA tests of every kernel variant, the
#                                     bench's course check of each) and faster (all five problems, any A/B variant
#                                     (bench.py's candidates; none since run s10-10) beside the default, no
#                                     torch.compile; the decoder per step; kernel time vs op time of each flashkit
#                                     call from torch.profiler), and what ncu says of the kernels (SOL, compute,
#                                     memory, warp stalls).
# Results under $OUT: cs149.log (every step), cs149-bench.json and cs149-bench.md (the tables), failed.txt,
# cs149-ncu.txt (SOL and memory lines of each kernel) and cs149-ncu.tar.gz (the full ncu output); the ab stages
# write cs149-ab.json, cs149-ab.md, cs149-ncu-ab.txt and add their full ncu text to cs149-ncu.tar.gz.
# The tokenizer's PCRE2/ICU come from .fkdeps (carry=[".fkdeps.tar.xz"], see tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/cs149.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench ncu)
status=0
export PYTHONPATH=$PWD/python FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
# The lines of an ncu text report that say what bounds each kernel.
ncu_summary() {
  local keys="Duration|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput"
  keys+="|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Registers Per Thread|Achieved Occupancy"
  keys+="|Warp Cycles Per Issued Instruction|Dynamic Shared Memory Per Block"
  grep -E "^  [A-Za-z_0-9:<>, ]+\(|$keys" "$1"
}
# Adds a full ncu text to cs149-ncu.tar.gz (at most 8 files come back from the machine).
pack_ncu() {
  local dir="$OUT/.ncu"; mkdir -p "$dir"
  [ -f "$OUT/cs149-ncu.tar.gz" ] && tar xzf "$OUT/cs149-ncu.tar.gz" -C "$dir"
  mv "$OUT/$1" "$dir/" && tar czf "$OUT/cs149-ncu.tar.gz" -C "$dir" . && rm -rf "$dir"
}
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cs149_cuda_tests flashkit_cs149_tests \
        || exit 1 ;;
    test)
      run cuda_tests timeout 240 "$BUILD/tests/cs149/flashkit_cs149_cuda_tests" --gtest_brief=1
      run cpu_tests timeout 120 "$BUILD/tests/cs149/flashkit_cs149_tests" --gtest_brief=1
      run python_tests timeout 120 python3 -m pytest -q -p no:cacheprovider tests/cs149/test_cs149.py \
        bench/cs149/test_bench.py
      grep -E "^\[  FAILED  \]|^FAILED" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      grep -E "^\[  PASSED  \]|^[0-9]+ passed" "$LOG" | tail -3
      cat "$OUT/failed.txt" ;;
    bench)
      run bench timeout 300 python3 bench/cs149/bench.py --runs 10 --budget-s 3 --json "$OUT/cs149-bench.json"
      { sed -n '/^| problem/,/^== bench: rc/p' "$LOG" | grep -v '^== '; echo
        grep -E "^[a-z_0-9]+: flashkit[a-z_0-9]* (OK|FAILED)" "$LOG" | tail -8; } > "$OUT/cs149-bench.md"
      cat "$OUT/cs149-bench.md" ;;
    ncu)  # one process, every flashkit kernel of the five problems once (RK4: one step, the four stage kernels)
      K='regex:histogram_kernel|swiglu_3xtf32|rk4_stage|flash_fwd|layernorm_head|query_embed'
      run ncu timeout 240 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        -k "$K" -c 14 --log-file "$OUT/cs149-ncu-full.txt" python3 tools/gpu/cs149_ncu.py
      ncu_summary "$OUT/cs149-ncu-full.txt" > "$OUT/cs149-ncu.txt"
      pack_ncu cs149-ncu-full.txt
      cat "$OUT/cs149-ncu.txt" ;;
    ab)  # every variant beside the default, checked with the course tolerance; no torch.compile (it takes minutes)
      run ab timeout 270 python3 bench/cs149/bench.py --problems histogram,swiglu,rk4,occupancy_decoder,flashattention \
        --no-compile --kernel-split --runs 10 --budget-s 2 --json "$OUT/cs149-ab.json"
      { sed -n '/^| problem | variant/,/^== ab: rc/p' "$LOG" | grep -v '^== '; echo
        grep -E "^[a-z_0-9]+: flashkit[a-z_0-9]* (OK|FAILED)|flashkit steps:|flashkit kernels:" "$LOG" | tail -20
      } > "$OUT/cs149-ab.md"
      cat "$OUT/cs149-ab.md" ;;
    ncu_ab)  # the kernels (new A/B variants go beside them as PROBLEM:KERNEL), with the sections that say why
      K='regex:histogram_kernel|swiglu_3xtf32|rk4_stage|query_embed|layernorm_head'
      run ncu_ab timeout 200 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        -k "$K" -c 8 --log-file "$OUT/cs149-ncu-ab-full.txt" python3 tools/gpu/cs149_ncu.py histogram \
        swiglu rk4 occupancy_decoder
      ncu_summary "$OUT/cs149-ncu-ab-full.txt" > "$OUT/cs149-ncu-ab.txt"
      pack_ncu cs149-ncu-ab-full.txt
      cat "$OUT/cs149-ncu-ab.txt" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
grep -E "^== .*rc=[1-9]" "$LOG" >> "$OUT/failed.txt" 2>/dev/null
exit $status
