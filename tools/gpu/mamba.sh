#!/usr/bin/env bash
# Mamba / selective scan on the GPU machine (an H200), one call, about 5 minutes with a warm build-gpu/:
#   build   the CUDA library, the SSM CUDA tests and the SSM benchmark (targets only, not the whole tree)
#   test    flashkit_ssm_cuda_tests (scan, decode step, conv1d against the f64 reference) and the CPU SSM tests
#   hf      tools/gpu/make_mamba_fixtures.py (torch + transformers only, its own process): a tiny random
#           MambaForCausalLM and its logits; then tools/gpu/mamba_check.py, one process per part (no torch in
#           them): the numpy oracle of the CPU CI test, flashkit's engine on the CPU (f32: rel <= 1e-3) and on CUDA
#           (bf16 weights: rel <= 3e-2, argmax agreement >= 90%); merged into mamba_check.json
#           (the CUDA engine test MambaCuda, CUDA vs CPU backend, runs in the test stage)
#   bench   flashkit_ssm_bench: scan forward bytes/s vs the 4.24 TB/s copy ceiling at batch 8, d_inner 1536,
#           d_state 16, seqlen 1k..16k, flash attention forward at matched width, the decode-step kernel, and the
#           engine's decode ms/token after contexts of 1k..32k on the tiny model
#   sass    per scan kernel (v1, v2, step): SASS opcode counts (MUFU, SHFL, BRA, FFMA, LDG, LDS, STG, BAR) into the
#           log, for the work log's instruction analysis (docs/worklog/ssm-scan.md; no cuobjdump off the GPU machine)
#   tools/gpu/mamba.sh [STAGES...]     default: build test hf bench sass
# Results: $OUT/mamba.log, $OUT/mamba_check.json, $OUT/ssm_bench.jsonl, $OUT/failed.txt. Exit status non-zero if
# any stage failed. Every step runs whatever happened to the ones before it (a crash is logged with its rc, and the
# stages after it still run); only a failed configure stops the job. carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/mamba.log"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so"
FIX="$BUILD/mamba-fixtures"   # the transformers-made tiny model (kept out of $OUT: only a few files come back)
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test hf bench sass)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      # -k 0: a target that fails to build does not stop the others (their stages then run, the missing one is logged)
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_ssm_cuda_tests flashkit_ssm_tests \
        flashkit_ssm_bench flashkit_engine_tests -- -k 0 ;;
    test)
      for b in flashkit_ssm_cuda_tests flashkit_ssm_tests; do
        p=$(bin $b); [ -n "$p" ] || { log "$b: not built"; status=1; continue; }
        run "$b" timeout 300 "$p" --gtest_brief=1
      done
      p=$(bin flashkit_engine_tests)
      if [ -n "$p" ]; then run engine_mamba timeout 300 "$p" --gtest_filter='Mamba*' --gtest_brief=1
      else log "flashkit_engine_tests: not built"; status=1; fi
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    hf)
      rm -f "$FIX/tiny_logits.json" "$FIX"/check_*.json "$FIX/mamba_check.json"
      run hf_fixtures timeout 180 python3 tools/gpu/make_mamba_fixtures.py "$FIX"
      for part in numpy cpu cuda; do run "hf_$part" timeout 120 python3 tools/gpu/mamba_check.py "$FIX" "$part"; done
      run hf_merge python3 tools/gpu/mamba_check.py "$FIX" merge
      cp "$FIX/mamba_check.json" "$OUT/" 2>/dev/null ;;
    bench)
      p=$(bin flashkit_ssm_bench)
      [ -n "$p" ] || { log "flashkit_ssm_bench: not built"; status=1; continue; }
      [ -f "$FIX/tiny/config.json" ] || run bench_fixtures timeout 180 python3 tools/gpu/make_mamba_fixtures.py "$FIX"
      log "bench: $p 16384 $FIX/tiny"
      timeout 300 "$p" 16384 "$FIX/tiny" > "$OUT/ssm_bench.jsonl" 2>> "$LOG"; rc=$?
      log "bench: rc=$rc"; [ $rc -ne 0 ] && status=1
      cat "$OUT/ssm_bench.jsonl" | tee -a "$LOG" ;;
    sass)
      log "sass: opcode counts per scan kernel (MUFU SHFL BRA FFMA LDG LDS STG BAR name)"
      cuobjdump -sass "$BUILD/lib/libflashkit_core.so" 2>> "$LOG" | awk '/Function :/{f=$3}
        f ~ /scan/ { for (i = 1; i <= NF; ++i) if ($i ~ /^[A-Z][A-Z0-9]+(\.|$)/) { split($i, o, "."); n[f, o[1]]++; k[f] = 1; break } }
        END { for (f in k) print n[f,"MUFU"]+0, n[f,"SHFL"]+0, n[f,"BRA"]+0, n[f,"FFMA"]+0, n[f,"LDG"]+0, n[f,"LDS"]+0,
              n[f,"STG"]+0, n[f,"BAR"]+0, f }' | sort -k9 | tee -a "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
