#!/usr/bin/env bash
# Trains the two shipped models, sharing one tokenizer (models/tokenizer, byte-level BPE, 8192 ids):
#   draft   models/recipes/draft.json   Llama-style, ~3.1M parameters -> models/draft   (bf16, ~6 MB)
#   target  models/recipes/target.json  Llama-style, ~22M parameters  -> models/target  (bf16, ~45 MB)
#
#   tools/train_models.sh prepare            corpus (tools/data/fetch.sh, Debian packages) -> data/tokens/*.bin;
#                                            trains models/tokenizer first if it is absent. Needs apt (root) or the
#                                            packages; the GPU machine has no network, so run this where apt works
#                                            and carry data/tokens over (64 MiB limit: the token files are ~8 MB).
#   tools/train_models.sh train [DEVICE] [STEPS]
#                                            both recipes on DEVICE (default cuda), STEPS overrides train.steps
#                                            (a reduced CPU run: tools/train_models.sh train cpu 20); runs/ holds the
#                                            checkpoints and logs, runs/loss.png the curves.
#   tools/train_models.sh all [DEVICE]       prepare, then train
# Environment: FLASHKIT (the binary; default build/bin/flashkit).
set -euo pipefail
cd "$(dirname "$0")/.."
FK=${FLASHKIT:-build/bin/flashkit}
stage=${1:-all}
device=${2:-cuda}
steps=${3:-}

prepare() {
  [ -d data/corpus ] && [ -n "$(ls data/corpus/*.txt 2>/dev/null)" ] || bash tools/data/fetch.sh data/corpus
  if [ ! -f models/tokenizer/tokenizer.json ]; then
    "$FK" train-tokenizer --vocab-size 8192 -o models/tokenizer data/corpus/*.txt
  fi
  "$FK" prepare-data --tokenizer models/tokenizer -o data/tokens --val-fraction 0.01 data/corpus/*.txt
  tail -c 40000 data/corpus/kjv.txt > data/tokens/kjv_tail.txt   # held out (the last 1% of kjv.txt is validation)
}

train_all() {
  [ -f data/tokens/train.bin ] || { echo "train_models.sh: data/tokens/train.bin is missing: run the prepare stage" >&2; exit 2; }
  local extra=()
  [ -n "$steps" ] && extra+=(--steps "$steps")
  local t0=$SECONDS
  for name in draft target; do
    echo "== $name ($device)"
    "$FK" train --config "models/recipes/$name.json" --device "$device" "${extra[@]}"
  done
  echo "== both models in $((SECONDS - t0)) s"
  du -ch models/draft/model.safetensors models/target/model.safetensors | tail -1
  # Held-out text: the tail of the Bible is in the validation split (prepare-data keeps the last 1% of a file).
  # (on the GPU machine data/corpus is absent: carry data/tokens/kjv_tail.txt, made by the prepare stage)
  if [ -f data/corpus/kjv.txt ]; then tail -c 40000 data/corpus/kjv.txt > runs/kjv_tail.txt
  elif [ -f data/tokens/kjv_tail.txt ]; then cp data/tokens/kjv_tail.txt runs/kjv_tail.txt
  else echo "train_models.sh: no held-out KJV text for the perplexity (run the prepare stage)" >&2; return 0; fi
  for name in draft target; do
    "$FK" perplexity -m "models/$name" -f runs/kjv_tail.txt --ctx 512 --stride 256 --device "$device" --json \
      > "runs/$name/perplexity_kjv_tail.json" || true
  done
  /usr/bin/python3 tools/plot_training.py runs/draft/log.jsonl runs/target/log.jsonl -o runs/loss.png || true
}

case "$stage" in
  prepare) prepare ;;
  train) train_all ;;
  all) prepare; train_all ;;
  *) echo "usage: tools/train_models.sh prepare | train [DEVICE] [STEPS] | all [DEVICE]" >&2; exit 2 ;;
esac
