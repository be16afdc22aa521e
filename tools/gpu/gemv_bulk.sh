#!/usr/bin/env bash
# The bulk one-row decode GEMV (issue 18 Required 5; docs/worklog/mamba-decode-cuda.md v4; src/engine/cuda/gemv.cu
# gemv_bulk_kernel) on the GPU machine (an H200), in one call of under 5 minutes with a warm build-gpu/ and the random
# mamba-2.8b model already made (otherwise run "build test" first, then "bench decode"):
#   build   the CUDA library, flashkit_engine_tests, flashkit_gemv_bench, flashkit_ssm_bench (targets only)
#   test    the GEMV tests: the plan (pure), the bulk kernel bitwise the legacy one on every prologue / epilogue
#           feature and model shapes (CudaGemvBulk), every plan the same bits with the conv epilogue (CudaGemvPlan),
#           rows of T-row launches bitwise one-row launches (CudaExactRows: the one-row launches are now the bulk
#           kernel's), the Mamba fusion and the engine's CUDA ops; compute-sanitizer memcheck on CudaGemvBulk;
#           registers of gemv_bulk_kernel (cuobjdump) into the log
#   bench   flashkit_gemv_bench: legacy, bulk (default ring; 64, 96, 192 KB rings) and a read-only kernel over the same
#           bytes at (N, K) = (10240, 2560), (2560, 5120), (5120, 2560), (14336, 4096), CUDA-graph timed, median:
#           "[gemvbench]" lines (us, TB/s each, bulk vs legacy, bulk as a fraction of read), $OUT/gemv_bench.json
#   decode  flashkit_ssm_bench decode of random mamba-130m and mamba-2.8b models (made by
#           tools/gpu/make_mamba_decode_model.py into $BUILD/mamba-$size-random when missing) with
#           FLASHKIT_CUDA_GEMV_PLAN=legacy, bulk and auto: ms/token against the weight-streaming roofline;
#           $OUT/gemv_bulk_decode.jsonl and "gemvbulk decode:" lines (MAMBADEC_SIZES picks sizes)
#   ncu     (not in the default list) Nsight Compute durations and DRAM bytes of the 12 kernels of 4 layers of a 2.8b
#           decode token, legacy and bulk: "gemvbulk ncu:" lines, $OUT/gemv_bulk_ncu.tgz
#   tools/gpu/gemv_bulk.sh [STAGES...]     default: build test bench decode
# Results: $OUT/gemv_bulk.log (all of it), $OUT/gemv_bench.json, $OUT/gemv_bulk_decode.jsonl, $OUT/failed.txt. Exit
# status non-zero if any stage failed. carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh pack), as ssm_cuda.sh.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/gemv_bulk.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench decode)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1;
  git rev-parse --short HEAD 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      if [ ! -f "$BUILD/build.ninja" ]; then
        run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
          -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      fi
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_engine_tests flashkit_gemv_bench \
        flashkit_ssm_bench -- -k 0 ;;
    test)
      t=$(bin flashkit_engine_tests); [ -n "$t" ] || { log "flashkit_engine_tests: not built"; status=1; continue; }
      run gemv_tests timeout 200 "$t" --gtest_brief=1 \
        --gtest_filter='GemvPlan.*:CudaGemvBulk.*:CudaGemvPlan.*:CudaExactRows.*:CudaMambaFusion.*:MambaFusionChoice.*:CudaEngineOps.*'
      run gemv_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" --gtest_brief=1 \
        --gtest_filter='CudaGemvBulk.*'
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      log "regs: gemv_bulk_kernel and the legacy one-row GEMVs"
      cuobjdump -res-usage "$BUILD/lib/libflashkit.so" 2>> "$LOG" \
        | grep -A1 -E "Function .*(gemv_bulk_kernel|gemv_kernelILi1ELi[12]ELi[48]ELb0)" | tee -a "$LOG" ;;
    bench)
      b=$(bin flashkit_gemv_bench); [ -n "$b" ] || { log "flashkit_gemv_bench: not built"; status=1; continue; }
      FLASHKIT_GEMVBENCH_OUT="$OUT/gemv_bench.json" run gemv_bench timeout 120 "$b"
      grep "^\[gemvbench\]" "$LOG" | tail -8 ;;
    decode)
      b=$(bin flashkit_ssm_bench); [ -n "$b" ] || { log "flashkit_ssm_bench: not built"; status=1; continue; }
      : > "$OUT/gemv_bulk_decode.jsonl"
      for size in ${MAMBADEC_SIZES:-130m 2.8b}; do
        M="$BUILD/mamba-$size-random"
        [ -f "$M/config.json" ] || run decode_model_$size timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" "$size"
        for plan in legacy bulk auto; do
          log "gemvbulk decode $size: FLASHKIT_CUDA_GEMV_PLAN=$plan"
          r=$(FLASHKIT_CUDA_GEMV_PLAN=$plan timeout 120 "$b" decode "$M" 2>> "$LOG") \
            || { log "gemvbulk decode $size $plan: failed"; status=1; continue; }
          printf '%s\n' "$r" | python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip(): r=json.loads(l); r["size"]=sys.argv[1]; r["plan"]=sys.argv[2]; print(json.dumps(r))' \
            "$size" "$plan" >> "$OUT/gemv_bulk_decode.jsonl"
        done
      done
      cat "$OUT/gemv_bulk_decode.jsonl" >> "$LOG"
      python3 - "$OUT/gemv_bulk_decode.jsonl" <<'EOF2' | tee -a "$LOG"
import json, sys
rows = {}
for r in map(json.loads, filter(str.strip, open(sys.argv[1]))):
    rows[(r["size"], r["plan"])] = r
us = lambda r: 1e3 * r["ms_per_token"] / r["layers"]
for (size, plan), r in rows.items():
    print("gemvbulk decode: %-5s %-6s %.4f ms/token, roofline %.4f ms -> %.2fx (goal <= 1.5x: %s), %.1f us per layer"
          % (size, plan, r["ms_per_token"], r["weight_roofline_ms"], r["of_roofline"],
             "met" if r["of_roofline"] <= 1.5 else "not met", us(r)))
for size in dict.fromkeys(s for s, _ in rows):
    base = rows.get((size, "legacy"))
    for plan in ("bulk", "auto"):
        r = rows.get((size, plan))
        if base and r:
            print("gemvbulk decode: %-5s %-6s vs legacy: %.3fx (%.1f -> %.1f us per layer)"
                  % (size, plan, base["ms_per_token"] / r["ms_per_token"], us(base), us(r)))
EOF2
      ;;
    ncu)
      b=$(bin flashkit_ssm_bench); [ -n "$b" ] || { log "flashkit_ssm_bench: not built"; status=1; continue; }
      M="$BUILD/mamba-2.8b-random"
      [ -f "$M/config.json" ] || run decode_model_2.8b timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" 2.8b
      for plan in legacy bulk; do
        # 4 layers (12 kernels) of a decode token after 64 tokens' worth of launches; durations and DRAM bytes
        FLASHKIT_CUDA_GEMV_PLAN=$plan run "gemvbulk_ncu_$plan" timeout 150 \
          ncu --clock-control none -k 'regex:gemv_kernel|gemv_bulk_kernel|mamba_step_kernel' -s 12288 -c 12 \
          --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,launch__block_size \
          --csv --log-file "$OUT/gemv_bulk_ncu_$plan.csv" "$b" decode "$M"
      done
      python3 - "$OUT" <<'EOF2' | tee -a "$LOG"
import csv, collections, os, re, sys
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
for name in ("legacy", "bulk"):
    p = os.path.join(sys.argv[1], "gemv_bulk_ncu_%s.csv" % name)
    if not os.path.exists(p):
        print("gemvbulk ncu: %s: no csv" % name); continue
    per = collections.OrderedDict()
    for r in csv.DictReader(l for l in open(p) if l.startswith('"')):
        k = (r["ID"], re.sub(r"\(anonymous namespace\)::|unnamed>::|^void ", "", r["Kernel Name"]).split("(")[0])
        v = float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", ""), 1.0)
        per.setdefault(k, {})[r["Metric Name"]] = v
    total = 0.0
    for (i, kern), m in per.items():
        d, mb = m.get("gpu__time_duration.sum", 0), m.get("dram__bytes_read.sum", 0)
        total += d
        print("gemvbulk ncu: %-6s %-42s grid %5d x %3d regs %3d  %6.2f us  %6.2f MB  %5.2f TB/s" % (
            name, kern[:42], m.get("launch__grid_size", 0), m.get("launch__block_size", 0),
            m.get("launch__registers_per_thread", 0), d, mb, mb / max(d, 1e-9)))
    if per:
        print("gemvbulk ncu: %-6s %d kernels, %.1f us serialized = %.1f us per layer" % (
            name, len(per), total, total / max(1, len(per) // 3)))
EOF2
      tar -czf "$OUT/gemv_bulk_ncu.tgz" -C "$OUT" $(cd "$OUT" && ls gemv_bulk_ncu_*.csv 2>/dev/null) 2>> "$LOG" && \
        rm -f "$OUT"/gemv_bulk_ncu_*.csv ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
