#!/usr/bin/env bash
# Long-context evaluation on the GPU machine (an H200): build, the eval tests, `flashkit eval` on CUDA against the
# CPU, and the MQAR sweep with a GPU-sized budget (docs/eval.md).
#   tools/gpu/eval.sh [STAGES...]   default: build test parity mqar pack
# Within one 5-minute call when the build is cached; otherwise `build test parity pack`, then `mqar pack`.
# stages:
#   build   cmake + ninja (sm_90a): the CLI and flashkit_eval_tests
#   test    flashkit_eval_tests and the eval CLI tests (tests/eval, pytest)
#   parity  flashkit eval on models/target, all tasks at 256/512 (cwe needs >= 224 tokens), on the CPU and on
#           CUDA (same prompts; the accuracies agree unless bf16 flips a greedy token), and on CUDA again with
#           --batch 8 (through the serving engine; CUDA's default is a Session per sample): the same accuracies, and
#           the wall time of each -> eval-target-{cpu,cuda,cuda-batch8}.json, eval-target-cuda.png
#   mqar    tools/eval/mqar_sweep.sh with DEVICE=cuda: attention and sliding window, widths 64/128, lengths 32/120
#           (7 and 29 pairs), 3000 steps of batch 64 (the CPU runs' 3k-64k sequences never got past 1/pairs;
#           this is 192k per run); the stage is cut at 150 s and summarises what finished -> eval-mqar-h200.*
#           Mamba: the CUDA trainer has no selective-scan ops yet, so the mamba kind trains and evaluates on the
#           host's CPU cores (DEVICE=cpu, 12 threads: 4 cores left to the CUDA sweep), in the background beside it,
#           with a CPU-sized budget (600 steps of batch 64, widths 64/128, the same lengths, cut at 150 s)
#           -> eval-mqar-h200-mamba-cpu.*
#           (its own table: another budget than the CUDA kinds')
#   pack    results/ (the JSON, tables, plots above) and the sweep's eval/ (per-run results and training logs) and
#           recipes/ as $OUT/eval-results.tar.gz; the log is $OUT/eval.log
# The tokenizer's PCRE2/ICU come from .fkdeps (carry=[".fkdeps"]).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/eval.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test parity mqar pack)
status=0
FK=$BUILD/bin/flashkit
PY=$(command -v /usr/bin/python3 || command -v python3)
# Work files stay beside the build; $OUT gets only eval.log and eval-results.tar.gz (few files come back).
WORK=${WORK:-$BUILD/eval-work}; RES="$WORK/results"; mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_eval_tests || exit 1 ;;
    test)
      run eval_tests timeout 120 "$BUILD/tests/eval/flashkit_eval_tests" --gtest_brief=1
      run eval_cli env FLASHKIT_CLI="$FK" timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/eval ;;
    parity)
      for dev in cpu cuda; do
        run "eval_target_$dev" timeout 120 "$FK" eval -m models/target --task all --lengths 256,512 \
          --depths 0,0.5,1 --samples 2 --device "$dev" -o "$RES/eval-target-$dev.json"
      done
      run eval_target_cuda_batch8 timeout 120 "$FK" eval -m models/target --task all --lengths 256,512 \
        --depths 0,0.5,1 --samples 8 --device cuda --batch 8 -o "$RES/eval-target-cuda-batch8.json"
      run eval_target_cuda_batch1 timeout 120 "$FK" eval -m models/target --task all --lengths 256,512 \
        --depths 0,0.5,1 --samples 8 --device cuda --batch 1 -o "$RES/eval-target-cuda-batch1.json"
      "$PY" tools/plots/eval_heatmap.py "$RES/eval-target-cuda.json" -o "$RES/eval-target-cuda.png" \
        --title "models/target on CUDA" >> "$LOG" 2>&1
      "$PY" - "$RES/eval-target-cpu.json" "$RES/eval-target-cuda.json" "$RES/eval-target-cuda-batch8.json" \
        "$RES/eval-target-cuda-batch1.json" <<'PY' | tee -a "$LOG"
import json, sys
a, b, b8, c = (json.load(open(p))["cells"] for p in sys.argv[1:])
same = sum(x["accuracy"] == y["accuracy"] for x, y in zip(a, b))
tps = lambda cells: sum(c["tokens_per_s"] for c in cells) / len(cells)
print(f"eval parity: {same}/{len(a)} cells with equal accuracy; mean tokens/s cpu {tps(a):.0f} cuda {tps(b):.0f}")
same1 = sum(x["accuracy"] == y["accuracy"] and x["prompt_tokens_mean"] == y["prompt_tokens_mean"] for x, y in zip(b8, c))
secs = lambda cells: sum(c["seconds"] for c in cells)
print(f"eval on cuda, 8 samples a cell: {same1}/{len(c)} cells equal between --batch 8 ({secs(b8):.2f} s, the "
      f"serving engine) and --batch 1 ({secs(c):.2f} s, a Session each)")
PY
      ;;
    mqar)
      # Mamba on the CPU cores (no CUDA scan training ops yet), in the background while the GPU trains the others.
      timeout 150 env FLASHKIT_NUM_THREADS=12 DEVICE=cpu KINDS=mamba WIDTHS="64 128" SEQ_LENS="32 120" STEPS=600 BATCH=64 SAMPLES=128 \
        EXAMPLES=20000 TAG=h200-mamba-cpu RESULTS="$RES" FLASHKIT="$FK" PY="$PY" \
        tools/eval/mqar_sweep.sh "$WORK/mqar-mamba" > "$WORK/mqar-mamba.log" 2>&1 &
      mamba_pid=$!
      run mqar_sweep timeout 150 env DEVICE=cuda KINDS="attention swa" WIDTHS="64 128" SEQ_LENS="32 120" \
        STEPS=3000 BATCH=64 SAMPLES=128 EXAMPLES=20000 TAG=h200 RESULTS="$RES" FLASHKIT="$FK" PY="$PY" \
        tools/eval/mqar_sweep.sh "$WORK/mqar"
      # the summary of whatever finished (the sweep writes it too when it is not cut short)
      run mqar_summary "$PY" tools/eval/mqar_summary.py "$WORK/mqar" --tag h200 --results "$RES" --steps 3000 \
        --batch 64 --vocab 64
      cat "$RES/eval-mqar-h200.md" 2>/dev/null | tee -a "$LOG"
      wait "$mamba_pid"
      cat "$WORK/mqar-mamba.log" >> "$LOG"
      run mqar_mamba_summary "$PY" tools/eval/mqar_summary.py "$WORK/mqar-mamba" --tag h200-mamba-cpu \
        --results "$RES" --steps 600 --batch 64 --vocab 64
      cat "$RES/eval-mqar-h200-mamba-cpu.md" 2>/dev/null | tee -a "$LOG" ;;
    pack)
      tar czf "$OUT/eval-results.tar.gz" -C "$WORK" results mqar/eval mqar/recipes mqar-mamba/eval \
        mqar-mamba/recipes 2>> "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
