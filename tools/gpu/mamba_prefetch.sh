#!/usr/bin/env bash
# The L2 prefetch of the next GEMV's weights in the Mamba decode (issue 18 Required 5; docs/worklog/mamba-decode-cuda.md
# v5; engine/l2_prefetch_plan.hpp; FLASHKIT_CUDA_L2_PREFETCH=0|out|all|late) on the GPU machine (an H200), in one call.
# The parts, in this order (MAMBAPF_PARTS picks some; default "build test decode"):
#   build   configure build-gpu if needed; flashkit_engine_tests and flashkit_ssm_bench
#   test    the pure plan tests (L2PrefetchPlan.*) and the Mamba CUDA engine tests (a layer's decode steps vs f64
#           with the prefetch counter, the whole-model logits fused vs unfused, the logits bit for bit with the
#           prefetch off / out / all / late, the mixer kernel, the GEMV plans) with FLASHKIT_CUDA_L2_PREFETCH unset
#           (default out), then the backend tests again with =0, =all and =late; compute-sanitizer memcheck on the layer
#           steps and the bitwise test with =all; registers of the mixer and the one-row GEMVs (cuobjdump)
#   decode  `flashkit_ssm_bench decode-l2` at mamba-130m, 1.4b, 2.8b (MAMBAPF_SIZES; random bf16 models made by
#           transformers with tools/gpu/make_mamba_decode_model.py, kept in build-gpu/mamba-SIZE-random): one model
#           per mode (0, out, all, late) in one process, their generate() calls alternated, best of 4; $OUT/mambapf_decode.jsonl and
#           one line per config "mambapf decode: <size> <knob> <ms/token> <x roofline>", then per size
#           "mambapf decode: <size> <knob> vs 0: <speed-up>x (<us per layer> -> <us per layer>)" and whether the
#           generated tokens equal mode 0's
#   ncu     (not in the default list) Nsight Compute on 4 layers (12 kernels) of a 2.8b decode token, modes 0 and
#           out, caches NOT flushed between kernels (--cache-control none: the prefetch lives in L2 across kernel
#           boundaries): per kernel duration and DRAM bytes, "mambapf ncu:" lines; out_proj's DRAM bytes should fall
#           from ~26 MB to a few MB with the prefetch on
# Results: $OUT/mamba_prefetch.log, $OUT/mambapf_decode.jsonl, $OUT/mambapf_ncu.tgz, $OUT/failed.txt. Exit status
# non-zero if any step failed. ~4-5 min on a warm machine whose build-gpu/ and models exist; a cold build-gpu (the
# library's attention kernels) does not fit: run MAMBAPF_PARTS="build test" first, then MAMBAPF_PARTS="decode ncu".
# carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU that libflashkit links, tools/gpu/carried_deps.sh pack).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/mamba_prefetch.log"
status=0
parts=" ${MAMBAPF_PARTS:-build test decode} "
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1

if [[ $parts == *" build "* ]]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
      -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
  fi
  run build_mambapf cmake --build "$BUILD" -j"$(nproc)" --target flashkit_engine_tests flashkit_ssm_bench -- -k 0
fi
t=$(bin flashkit_engine_tests) b=$(bin flashkit_ssm_bench)

if [[ $parts == *" test "* ]]; then
  if [ -n "$t" ]; then
    # the backend tests the knob changes (the kernel tests below call the launchers directly)
    BF='Shapes/CudaMambaStep.*:CudaMambaFusion.*'
    run mambapf_tests timeout 150 "$t" --gtest_brief=1 \
      --gtest_filter="L2PrefetchPlan.*:MambaFusionChoice.*:GemvPlan.*:$BF:Inner/CudaMambaStepKernel.*:CudaMambaStepLauncher.*:CudaGemvPlan.*:MambaCuda.*"
    for mode in 0 all late; do
      FLASHKIT_CUDA_L2_PREFETCH=$mode run "mambapf_tests_l2_$mode" timeout 90 "$t" --gtest_brief=1 --gtest_filter="$BF"
    done
    FLASHKIT_CUDA_L2_PREFETCH=all run mambapf_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$t" --gtest_brief=1 --gtest_filter='Shapes/CudaMambaStep.*:CudaMambaFusion.L2PrefetchKeepsTheBits'
    grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
    log "regs: mixer step (64-wide) and the one-row GEMVs"
    cuobjdump -res-usage "$BUILD/lib/libflashkit.so" 2>> "$LOG" \
      | grep -A1 -E "Function .*(mamba_step_kernelILi64|gemv_kernelILi1ELi[12]ELi[48]ELb0)" | tee -a "$LOG"
  else log "flashkit_engine_tests: not built"; status=1; fi
fi

if [[ $parts == *" decode "* ]]; then
  : > "$OUT/mambapf_decode.jsonl"
  for size in ${MAMBAPF_SIZES:-130m 1.4b 2.8b}; do
    M="$BUILD/mamba-$size-random"
    [ -f "$M/config.json" ] || run decode_model_$size timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" "$size"
    [ -n "$b" ] || { log "flashkit_ssm_bench: not built"; status=1; break; }
    log "mambapf decode $size: flashkit_ssm_bench decode-l2"
    r=$(timeout 150 "$b" decode-l2 "$M" 2>> "$LOG") || { log "mambapf decode $size: failed"; status=1; continue; }
    printf '%s\n' "$r" | python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip(): r=json.loads(l); r["size"]=sys.argv[1]; print(json.dumps(r))' "$size" >> "$OUT/mambapf_decode.jsonl"
  done
  cat "$OUT/mambapf_decode.jsonl" >> "$LOG"
  python3 - "$OUT/mambapf_decode.jsonl" <<'EOF' | tee -a "$LOG"
import json, sys
rows = {}
for r in map(json.loads, filter(str.strip, open(sys.argv[1]))):
    rows[(r["size"], r["l2_prefetch"])] = r
us = lambda r: 1e3 * r["ms_per_token"] / r["layers"]
for (size, knob), r in rows.items():
    print("mambapf decode: %s %s %.4f %.2fx" % (size, knob, r["ms_per_token"], r["of_roofline"]))
for size in dict.fromkeys(s for s, _ in rows):
    off = rows.get((size, "0"))
    for knob in ("out", "all", "late"):
        r = rows.get((size, knob))
        if off and r:
            print("mambapf decode: %s %s vs 0: %.3fx (%.1f -> %.1f us per layer), tokens %s" % (
                size, knob, off["ms_per_token"] / r["ms_per_token"], us(off), us(r),
                "same" if r["same_tokens_as_off"] else "DIFFER"))
EOF
  grep -q '"same_tokens_as_off": false' "$OUT/mambapf_decode.jsonl" && { log "mambapf decode: tokens differ"; status=1; }
fi

if [[ $parts == *" ncu "* ]] && [ -n "$b" ]; then
  M="$BUILD/mamba-2.8b-random"
  [ -f "$M/config.json" ] || run decode_model_2.8b timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" 2.8b
  for mode in 0 out; do
    # 4 layers (12 kernels) of a decode token after 64 tokens' worth of launches; L2 kept across kernels
    FLASHKIT_CUDA_L2_PREFETCH=$mode run "mambapf_ncu_$mode" timeout 150 \
      ncu --clock-control none --cache-control none -k 'regex:gemv_kernel|mamba_step_kernel' -s 12288 -c 12 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,launch__grid_size \
      --csv --log-file "$OUT/mambapf_ncu_$mode.csv" "$b" decode "$M"
  done
  python3 - "$OUT" <<'EOF' | tee -a "$LOG"
import csv, collections, os, re, sys
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
for mode in ("0", "out"):
    p = os.path.join(sys.argv[1], "mambapf_ncu_%s.csv" % mode)
    if not os.path.exists(p):
        print("mambapf ncu: %s: no csv" % mode); continue
    per = collections.OrderedDict()
    for r in csv.DictReader(l for l in open(p) if l.startswith('"')):
        k = (r["ID"], re.sub(r"\(anonymous namespace\)::|unnamed>::|^void ", "", r["Kernel Name"]).split("(")[0])
        v = float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", ""), 1.0)
        per.setdefault(k, {})[r["Metric Name"]] = v
    for (i, kern), m in per.items():
        d, mb = m.get("gpu__time_duration.sum", 0), m.get("dram__bytes_read.sum", 0)
        print("mambapf ncu: %-3s %-40s grid %5d  %6.2f us  DRAM %6.2f MB  L2 hit %5.1f%%" % (
            mode, kern[:40], m.get("launch__grid_size", 0), d, mb, m.get("lts__t_sector_hit_rate.pct", 0)))
EOF
  tar -czf "$OUT/mambapf_ncu.tgz" -C "$OUT" $(cd "$OUT" && ls mambapf_ncu_*.csv 2>/dev/null) 2>> "$LOG" && \
    rm -f "$OUT"/mambapf_ncu_*.csv
fi
exit $status
