#!/usr/bin/env bash
# Tensor-parallel inference (issue 21, Required 2; docs/distributed.md, "Tensor-parallel inference") on the GPU machine (one H200), one call,
# about 4 minutes from a cold build-gpu/:
#   build   the CLI and flashkit_dist_tests (targets only)
#   test    Tp*: the CPU thread-rank tests (tp 2 and 4 against one rank, every family, the shipped model, serve, bad
#           --tp) and TpCuda.* (two thread ranks sharing the one GPU: random llama / qwen2 / gemma3 f32 models to 1e-3,
#           the shipped bf16 model to 2e-2, greedy tokens identical); then `flashkit generate --device cuda --tp 2`
#           against --tp 1 on models/target (same ids)
#   bench   decode latency and prefill throughput, tp 1 vs tp 2, on the Llama-3.2-1B shape with random bf16 weights
#           (models/configs/llama-3.2-1b.json): a 512-token prompt, 128 greedy tokens. HONEST CAVEAT: the two ranks
#           share ONE GPU and all-reduce through host memory (the "threads" communicator) with CUDA graphs off, so
#           tp 2 is expected to be SLOWER than tp 1 here; the line measures the overhead of the TP schedule, not a
#           multi-GPU speed-up (that needs the NCCL communicator on two GPUs).
#   tools/gpu/tp.sh [STAGES...]    default: build test bench
# Results: $OUT/tp.log (RESULT lines at the end), $OUT/tp.json (the bench runs), $OUT/failed.txt.
# Exit status non-zero if any stage failed. carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/tp.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
export OMP_WAIT_POLICY=passive
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_dist_tests -- -k 0 ;;
    test)
      D=$(bin flashkit_dist_tests)
      if [ -n "$D" ]; then
        run tp_cpu timeout 240 "$D" --gtest_filter='Tp*:-TpCuda.*' --gtest_brief=1
        run tp_cuda timeout 180 "$D" --gtest_filter='TpCuda.*'
        grep -q "SKIPPED.*TpCuda" "$LOG" && { log "TpCuda skipped: no CUDA device seen"; status=1; }
      else log "flashkit_dist_tests: not built"; status=1; fi
      if [ -x "$FK" ]; then
        ids() { "$FK" generate -m models/target --device cuda --prompt-ids 1,5,9,200,33,4 -n 24 --temp 0 \
                  --ignore-eos --ids "$@" 2>>"$LOG"; }
        one=$(ids); two=$(ids --tp 2)
        log "generate cuda tp1: $one"; log "generate cuda tp2: $two"
        if [ -n "$one" ] && [ "$one" = "$two" ]; then log "RESULT generate cuda --tp 2 == --tp 1: yes"
        else log "RESULT generate cuda --tp 2 == --tp 1: NO"; status=1; fi
      else log "flashkit: not built"; status=1; fi
      grep -E "^\[  FAILED  \]|^FAILED " "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    bench)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      P=$(python3 -c "print(','.join(str((i * 7919) % 128000 + 1) for i in range(512)))")
      echo "[" > "$OUT/tp.json"
      for tp in 1 2; do
        run bench_tp$tp timeout 150 "$FK" generate -m models/configs/llama-3.2-1b.json --random-weights --dtype bf16 \
          --device cuda --tp $tp --ctx 1024 --prompt-ids "$P" -n 128 --temp 0 --ignore-eos --ids \
          --stats-json "$BUILD/tp$tp.json"
        [ -f "$BUILD/tp$tp.json" ] && { cat "$BUILD/tp$tp.json"; [ $tp = 1 ] && echo ","; } >> "$OUT/tp.json"
      done
      echo "]" >> "$OUT/tp.json"
      python3 - "$BUILD" >> "$LOG" 2>&1 <<'PY' || status=1
import json, sys
r = {tp: json.load(open(f"{sys.argv[1]}/tp{tp}.json")) for tp in (1, 2)}
for tp, j in r.items():
    print(f"RESULT llama-3.2-1b random bf16, tp {tp} ({j['backend']}): prefill {j['prefill_tokens_per_s']:.0f} tok/s, "
          f"decode {1e3 / j['decode_tokens_per_s']:.2f} ms/token ({j['decode_tokens_per_s']:.1f} tok/s)")
print(f"RESULT tp2/tp1 decode latency x{r[1]['decode_tokens_per_s'] / r[2]['decode_tokens_per_s']:.2f}, prefill "
      f"throughput x{r[2]['prefill_tokens_per_s'] / r[1]['prefill_tokens_per_s']:.2f} (two ranks on ONE GPU, host "
      f"all-reduce, no graphs: overhead, not speed-up)")
PY
      ;;
  esac
done
grep "RESULT" "$LOG" | tail -8
exit $status
