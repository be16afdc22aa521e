#!/usr/bin/env bash
# Measurements that decide the next kernel changes (issue 20 Required 4/5, issue 18 Required 5), in one device call:
#   build    libflashkit, flashkit_core, the fp8 ctypes shim, flashkit_kernel_bench, bench/cuda/sfu_rates.cu
#   sfu      exp2 per SM and clock: ex2 f32 / f16x2 / bf16x2 on the SFU vs a cubic on the FMA pipe, and the MUFU
#            count of each loop in the SASS ("sfu_rates" lines, $OUT/sfu-sass.txt)
#   fp8ncu   Nsight Compute on the e4m3 forward, d128 and d256 at 16k (pipes, issue, stalls, per-SASS samples):
#            $OUT/fp8-ncu.txt, $OUT/fp8-sass.csv.xz; "fp8 ncu:" lines
#   decode   batch-1 decode per call from 16 to 32k keys (CUDA graphs; default, PDL off, one split):
#            "decode_fixed" lines, $OUT/decode-fixed.jsonl; then ncu per kernel at 16 and 32k keys ("decode ncu:")
#   layout   the read ceiling of a 32k-key, 8-head d128 KV cache per layout and grid (bench/cuda/kv_read_ceiling.cu,
#            "kv_read_ceiling" lines), then batch-1 decode at 4k/32k keys with K/V token-major (bshd) and head-major
#            (bhsd), default plan and split caps 8/32/64 ("decode_fixed ... bshd|bhsd" lines, $OUT/decode-layout.jsonl)
#   kbench   the engine's GEMVs incl. mamba-2.8b's in_proj/out_proj vs cuBLAS, graph-timed ("[kbench]" lines);
#            the latency floor of a graph level (empty / PDL kernels)
#   tools/gpu/floors_probe.sh [STAGES...]     default: build sfu fp8ncu decode kbench      carry=[".fkdeps.tar.xz"]
# Everything lands in $OUT/floors-probe.tgz (plus the log).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
LOG="$OUT/floors-probe.log"
P="$OUT/probe"; mkdir -p "$P"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build sfu fp8ncu decode kbench)
status=0
export PYTHONUNBUFFERED=1 FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
SHIM=$BUILD/lib/libfk_fp8_shim.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1
  git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
        -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || break
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_core flashkit_kernel_bench || break
      run shim g++ -std=c++20 -O2 -shared -fPIC -Iinclude -Isrc -I/usr/local/cuda/include bench/cuda/fp8_shim.cpp \
        -L"$BUILD/lib" -lflashkit_core -Wl,-rpath,"$PWD/$BUILD/lib" -L/usr/local/cuda/lib64 -lcudart -o "$SHIM"
      run sfu_build nvcc -O3 -std=c++17 -arch=sm_90a -o "$BUILD/sfu_rates" bench/cuda/sfu_rates.cu
      run floor_build nvcc -O3 -std=c++17 -arch=sm_90a -o "$BUILD/latency_floor" bench/cuda/latency_floor.cu
      run kvread_build nvcc -O3 -std=c++17 -arch=sm_90a -o "$BUILD/kv_read_ceiling" bench/cuda/kv_read_ceiling.cu ;;
    layout)
      run kvread "$BUILD/kv_read_ceiling"
      for cfg in "default:" "cap8:FLASHKIT_DECODE_MAX_SPLITS=8" "cap32:FLASHKIT_DECODE_MAX_SPLITS=32" \
                 "cap64:FLASHKIT_DECODE_MAX_SPLITS=64"; do
        label=${cfg%%:*}; envs=${cfg#*:}
        for lay in bshd bhsd; do
          run "decode_${label}_$lay" env $envs python3 bench/cuda/decode_fixed_cost.py "$label" --layout $lay \
            --keys 4096,32768 --out "$P/decode-layout.jsonl"
        done
      done
      grep -E "^kv_read_ceiling|^decode_fixed" "$LOG" | tail -60 ;;
    sfu)
      run sfu "$BUILD/sfu_rates"
      cuobjdump -sass "$BUILD/sfu_rates" > "$P/sfu-sass.txt" 2>&1
      awk '/Function :/{f=$3} /MUFU|F2FP|HADD2|LOP3|FFMA|IMAD|SHF/{split($2,a,"."); n[f" "a[1]]++} END{for(k in n) print "sfu sass:", k, n[k]}' \
        "$P/sfu-sass.txt" | sort | tee -a "$LOG"
      grep -E "^sfu_rates" "$LOG" ;;
    fp8ncu)
      run fp8ncu timeout 400 ncu --clock-control none -k 'regex:flash_fwd_fp8' -c 4 --import-source yes \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
        --section SchedulerStats --section SourceCounters --section Occupancy -f -o "$BUILD/fp8" \
        python3 tools/gpu/fp8_ncu.py "$SHIM" 128 256
      ncu -i "$BUILD/fp8.ncu-rep" --print-details all > "$P/fp8-ncu.txt" 2>&1
      ncu -i "$BUILD/fp8.ncu-rep" --page source --csv --print-source sass 2> /dev/null | xz -6 > "$P/fp8-sass.csv.xz"
      ncu -i "$BUILD/fp8.ncu-rep" --page raw --csv --metrics \
        'regex:sm__inst_executed_pipe_.*sum$|regex:sm__pipe_.*cycles_active.avg.pct_of_peak_sustained_active$|smsp__issue_active.avg.pct_of_peak_sustained_active|gpu__time_duration.sum' \
        > "$P/fp8-pipes.csv" 2>&1
      grep -E "^  [a-zA-Z_]|Duration|Throughput|Stall|Issued Warp|No Eligible|Eligible Warps|Registers|Pipe" \
        "$P/fp8-ncu.txt" | sed "s/^/fp8 ncu: /" | tee -a "$LOG" | head -120 ;;
    decode)
      for cfg in "default:" "nopdl:FLASHKIT_DECODE_PDL=0" "splits1:FLASHKIT_DECODE_MAX_SPLITS=1"; do
        label=${cfg%%:*}; envs=${cfg#*:}
        run "decode_$label" env $envs python3 bench/cuda/decode_fixed_cost.py "$label" --out "$P/decode-fixed.jsonl"
      done
      grep -E "^decode_fixed" "$LOG" | tail -30
      run decodencu timeout 300 ncu --clock-control none -k 'regex:decode|combine|merge' \
        --section SpeedOfLight --section LaunchStats --section Occupancy \
        --metrics dram__bytes_read.sum,gpu__time_duration.sum --log-file "$P/decode-ncu.txt" \
        python3 tools/gpu/decode_ncu.py 16 32768
      grep -E "^  [a-z_ ]*[a-zA-Z_:<>, 0-9]*\(|Duration|DRAM Throughput|Grid Size" "$P/decode-ncu.txt" \
        | sed 's/^/decode ncu: /' | tee -a "$LOG" | head -60 ;;
    kbench)
      FLASHKIT_KBENCH_OUT="$P/engine-kbench.json" run kbench "$BUILD/bench/engine/flashkit_kernel_bench"
      grep "^\[kbench\] gemv" "$LOG"
      run floor "$BUILD/latency_floor" "$P/latency-floor.json"
      grep -iE "empty|level|persistent" "$LOG" | tail -8 ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
log "floors_probe: status=$status"
cp "$LOG" "$P/"; tar -C "$OUT" -czf "$OUT/floors-probe.tgz" probe && rm -rf "$P"
exit $status
