#!/usr/bin/env bash
# Tensor parallelism with ranks in processes over NCCL (issue 21; docs/distributed.md, "Ranks in processes") on the
# GPU machine, one call, under 3 minutes from a cold build-gpu/ (targets only):
#   build   cmake with NCCL (FLASHKIT_NCCL=ON), flashkit_cli and flashkit_dist_tests
#   test    TpNccl*: the leader / follower protocol over thread ranks (CPU), the thread-or-process choice, and
#           TpNcclCuda (a one-rank NCCL leader on the GPU, bitwise the plain model's logits and tokens); Tp* thread
#           ranks on the CPU still green (TpCuda.* is tools/gpu/tp.sh's)
#   cli     `flashkit generate --device cuda` on models/target: plain vs FLASHKIT_TP_BACKEND=nccl --tp 1 (one rank
#           process over NCCL, the command stream through a device buffer): the same ids; the same for chat;
#           --tp 2 forced onto processes with one GPU: one error line, exit status 2, no flashkit process left;
#           with >= 2 GPUs visible: --tp 2 in processes vs --tp 1 (same ids)
#   bench   Llama-3.2-1B shape, random bf16, 512-token prompt, 128 greedy tokens: plain vs the NCCL path at world size 1
#           (the cost of the command broadcast per step)
#   tools/gpu/tp_nccl.sh [STAGES...]    default: build test cli bench
# Results: $OUT/tp_nccl.log (RESULT lines at the end), $OUT/tp_nccl.json (bench), $OUT/failed.txt.
# Exit status non-zero if any stage failed. carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/tp_nccl.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test cli bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
export OMP_WAIT_POLICY=passive
unset RANK WORLD_SIZE LOCAL_RANK FLASHKIT_RENDEZVOUS FLASHKIT_TP_BACKEND
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1; echo "GPUs: $GPUS"; } >> "$LOG" 2>&1
same() {  # NAME A B: RESULT line, status
  if [ -n "$2" ] && [ "$2" = "$3" ]; then log "RESULT $1: yes"; else log "RESULT $1: NO ($2 | $3)"; status=1; fi
}
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DFLASHKIT_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      grep -E "flashkit: NCCL" "$LOG" | tail -1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_dist_tests -- -k 0 ;;
    test)
      D=$(bin flashkit_dist_tests)
      if [ -n "$D" ]; then
        run tp_nccl_tests timeout 120 "$D" --gtest_filter='TpNccl*'
        grep -q "SKIPPED.*TpNcclCuda" "$LOG" && { log "TpNcclCuda skipped: no NCCL or no GPU seen"; status=1; }
        run tp_thread_tests timeout 120 "$D" --gtest_filter='Tp*:-TpNccl*:TpCuda*' --gtest_brief=1
      else log "flashkit_dist_tests: not built"; status=1; fi
      grep -E "^\[  FAILED  \]|^FAILED " "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    cli)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      ids() { timeout 60 "$FK" generate -m models/target --device cuda --prompt-ids 1,5,9,200,33,4 -n 24 --temp 0 \
                --ignore-eos --ids "$@" 2>>"$LOG"; }
      plain=$(ids); nccl=$(FLASHKIT_TP_BACKEND=nccl ids --tp 1 --stats-json "$OUT/nccl1.json")
      log "generate plain: $plain"; log "generate nccl world 1: $nccl"
      grep -o '"backend": *"[^"]*"' "$OUT/nccl1.json" >> "$LOG" 2>&1
      same "generate cuda FLASHKIT_TP_BACKEND=nccl --tp 1 == plain" "$plain" "$nccl"
      chat() { printf 'hello\nand again\n' | timeout 60 "$FK" chat -m models/target --device cuda --temp 0 -n 12 "$@" \
                 2>>"$LOG"; }
      same "chat cuda nccl world 1 == plain" "$(chat)" "$(FLASHKIT_TP_BACKEND=nccl chat --tp 1)"
      if [ "$GPUS" -lt 2 ]; then
        FLASHKIT_TP_BACKEND=nccl timeout 60 "$FK" generate -m models/target --device cuda --tp 2 --prompt-ids 1,5 -n 4 \
          > /dev/null 2> "$OUT/err.txt"; rc=$?
        cat "$OUT/err.txt" >> "$LOG"
        if [ $rc = 2 ] && grep -q "needs CUDA devices 0..1, this machine has 1" "$OUT/err.txt"; then
          log "RESULT --tp 2 forced onto processes with one GPU: exit 2, one line: yes"
        else log "RESULT --tp 2 forced onto processes with one GPU: NO (rc=$rc)"; status=1; fi
      else
        two=$(ids --tp 2)
        log "generate processes tp 2: $two"
        same "generate cuda --tp 2 (2 processes over NCCL) == plain" "$plain" "$two"
      fi
      sleep 1
      left=$(pgrep -c -f "^$FK " || true)
      if [ "${left:-0}" = 0 ]; then log "RESULT no flashkit process left: yes"
      else log "RESULT no flashkit process left: NO ($left)"; status=1; fi ;;
    bench)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      P=$(python3 -c "print(','.join(str((i * 7919) % 128000 + 1) for i in range(512)))")
      for mode in plain nccl; do
        env $([ $mode = nccl ] && echo FLASHKIT_TP_BACKEND=nccl) timeout 120 "$FK" generate \
          -m models/configs/llama-3.2-1b.json --random-weights --dtype bf16 --device cuda --tp 1 --ctx 1024 \
          --prompt-ids "$P" -n 128 --temp 0 --ignore-eos --ids --stats-json "$OUT/bench_$mode.json" \
          > "$OUT/bench_$mode.ids" 2>> "$LOG" || { log "bench $mode: failed"; status=1; }
      done
      python3 - "$OUT" >> "$LOG" 2>&1 <<'PY' || status=1
import json, sys
o = sys.argv[1]
r = {m: json.load(open(f"{o}/bench_{m}.json")) for m in ("plain", "nccl")}
json.dump(r, open(f"{o}/tp_nccl.json", "w"), indent=1)
for m, j in r.items():
    print(f"RESULT llama-3.2-1b bf16 {m} ({j['backend']}): prefill {j['prefill_tokens_per_s']:.0f} tok/s, "
          f"decode {1e3 / j['decode_tokens_per_s']:.3f} ms/token")
ids = [open(f"{o}/bench_{m}.ids").read().split() for m in ("plain", "nccl")]
print(f"RESULT llama-3.2-1b nccl world 1 ids == plain: {'yes' if ids[0] and ids[0] == ids[1] else 'NO'}")
print(f"RESULT nccl world 1 decode overhead x{r['plain']['decode_tokens_per_s'] / r['nccl']['decode_tokens_per_s']:.3f}")
PY
      rm -f "$OUT"/bench_*.ids "$OUT"/bench_*.json "$OUT/nccl1.json" "$OUT/err.txt" ;;
  esac
done
grep "RESULT" "$LOG" | tail -12
exit $status
