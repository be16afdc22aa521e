#!/usr/bin/env bash
# Training on the GPU machine (an H200): build, the training tests, a CUDA-vs-CPU parity run, the two shipped
# models, samples from them, and the GPT-2-small-sized throughput run.
#   tools/gpu/train.sh [STAGES...]   default: build test parity models sample gpt2 pack
# stages:
#   build   cmake + ninja (sm_90a): the CLI, the training tests and the CUDA kernel tests
#   test    flashkit_train_tests (CPU ops/model/training; CUDA backend cases where present) and
#           flashkit_train_cuda_tests (every kernel against its f64 reference)
#   parity  the draft recipe, 30 steps at batch 8 x 256, on the CPU and on CUDA: the two loss curves side by side
#   models  tools/train_models.sh train cuda (models/draft, models/target, runs/*/log.jsonl, runs/loss.png)
#   sample  greedy and sampled text from both models, perplexity on held-out KJV text
#   spec    flashkit bench spec on the trained target/draft pair (CUDA) -> spec-cuda.{json,txt}
#   hfcheck tools/gpu/train_hf_check.py (builds nothing): one training step on CPU and CUDA vs PyTorch autograd in
#           transformers, models/{target,draft} logits vs transformers, the tokenizer and chat template vs
#           transformers -> $OUT/train-hf-check.json (needs the build stage's CLI and libflashkit.so)
#   gpt2    models/recipes/gpt2-small-bench.json (~124M parameters, seq 1024): tokens/s and MFU
#   pack    models/{draft,target} + logs as $OUT/models.tar.part-* (15 MiB pieces; join with cat)
# Needs data/tokens (made here by `tools/train_models.sh prepare`; carry=["data/tokens", ".fkdeps"]).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/train.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test parity models sample gpt2 pack)
status=0
export PYTHONUNBUFFERED=1
FK=$BUILD/bin/flashkit
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_train_tests flashkit_train_cuda_tests || exit 1 ;;
    test)
      run train_tests timeout 300 "$BUILD/tests/train/flashkit_train_tests" --gtest_brief=1
      run train_cuda_tests timeout 300 "$BUILD/tests/train/cuda/flashkit_train_cuda_tests" --gtest_brief=1 ;;
    parity)
      for dev in cpu cuda; do
        /usr/bin/env python3 - "$dev" <<'PY'
import json, sys
dev = sys.argv[1]
r = json.load(open("models/recipes/draft.json"))
r["train"].update(steps=30, batch_size=8, seq_len=256, warmup_steps=3)
r["eval"] = {"interval": 0, "batches": 1}; r["checkpoint"] = {"interval": 0, "keep": 1}
r["log"] = {"interval": 1}; r["output"] = {"dir": f"runs/parity-{dev}", "model_dir": "", "dtype": "f32"}
r["device"] = dev
json.dump(r, open(f"/tmp/parity-{dev}.json", "w"))
PY
        rm -rf "runs/parity-$dev"
        run "parity_$dev" timeout 240 "$FK" train --config "/tmp/parity-$dev.json" -q
      done
      python3 - <<'PY' | tee -a "$LOG" "$OUT/parity.txt"
import json
def losses(d):
    try: return {r["step"]: r["loss"] for r in map(json.loads, open(f"runs/parity-{d}/log.jsonl")) if "loss" in r and "step" in r}
    except Exception as e: return {}
c, g = losses("cpu"), losses("cuda")
print("step  cpu_f32_loss  cuda_bf16_loss  rel_diff")
for s in sorted(set(c) | set(g)):
    a, b = c.get(s), g.get(s)
    rd = abs(a - b) / abs(a) if a and b else float("nan")
    print(f"{s:4d}  {a if a is not None else float('nan'):12.5f}  {b if b is not None else float('nan'):14.5f}  {rd:8.2e}")
PY
      ;;
    models) run models timeout 900 env FLASHKIT="$FK" bash tools/train_models.sh train cuda ;;
    sample)
      for m in target draft; do
        [ -d "models/$m" ] || continue
        for p in "In the beginning" "The Debian package manager" "And the LORD said unto Moses,"; do
          log "sample $m greedy: $p"
          "$FK" generate -m "models/$m" -p "$p" -n 60 --temp 0 -q --device cuda >> "$LOG" 2>&1; echo >> "$LOG"
          log "sample $m temp 0.8 seed 1: $p"
          "$FK" generate -m "models/$m" -p "$p" -n 60 --temp 0.8 --seed 1 -q --device cuda >> "$LOG" 2>&1; echo >> "$LOG"
        done
        run "perplexity_$m" "$FK" perplexity -m "models/$m" -f data/tokens/kjv_tail.txt --ctx 512 --stride 256 --device cuda
      done ;;
    spec)  # speculative decoding on the trained pair (docs/speculative.md): K x proposer x regime, greedy, checked
      [ -d models/target ] && [ -d models/draft ] || { log "spec: no trained models"; status=1; continue; }
      run spec_bench timeout 300 "$FK" bench spec -m models/target --draft models/draft --device cuda -n 128 --repeats 3 \
        --json "$OUT/spec-cuda.json"
      sed -n "/^bench spec:/,\$p" "$LOG" | head -80 > "$OUT/spec-cuda.txt" ;;
    hfcheck)
      if [ ! -x "$FK" ] || [ ! -f "$BUILD/lib/libflashkit.so" ]; then
        log "hfcheck: $FK or $BUILD/lib/libflashkit.so is missing (run the build stage first)"; status=1; continue
      fi
      run hfcheck timeout 900 env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
        FLASHKIT_LIBRARY="$BUILD/lib/libflashkit.so" /usr/bin/env python3 tools/gpu/train_hf_check.py \
        --flashkit "$FK" --out "$OUT/train-hf-check.json"
      sed -n '/^train_hf_check:/,/^overall:/p' "$LOG" | tail -40 | tee "$OUT/train-hf-check.txt" ;;
    gpt2) rm -rf runs/gpt2-small-bench; run gpt2 timeout 600 "$FK" train --config models/recipes/gpt2-small-bench.json ;;
    pack)
      tar cf /tmp/models.tar models/draft models/target runs/*/log.jsonl runs/loss.png runs/*/perplexity*.json 2>>"$LOG"
      split -b 15M -d /tmp/models.tar "$OUT/models.tar.part-"
      ls -la "$OUT" >> "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
