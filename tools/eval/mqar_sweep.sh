#!/usr/bin/env bash
# MQAR sweep (docs/eval.md): train small models of each kind at several widths and sequence lengths on
# multi-query associative recall (prepare-data --synthetic mqar), then measure recall with `flashkit eval --task mqar`
# (token-id MQAR, every query scored teacher-forced) and write a summary (JSON, Markdown table, plot).
#
#   tools/eval/mqar_sweep.sh [OUT_DIR]          (default runs/mqar)
#
# Environment (defaults are the small CPU sweep committed in bench/results/eval-mqar-cpu.*):
#   KINDS="attention swa mamba"   one recipe per kind: models/recipes/mqar-<kind>.json (its model block is the
#                           template; width, sequence length and output are set here; Mamba: d_inner = expand x
#                           width). A new architecture joins the sweep by adding models/recipes/mqar-<kind>.json; a
#                           kind whose training fails is reported and skipped.
#   MAMBA_DEVICE=           the device of the mamba kind when it differs from DEVICE (the CUDA trainer has no
#                           selective-scan ops yet, so tools/gpu/eval.sh sets cpu)
#   WIDTHS="32 64"          hidden sizes (2 heads of width/2; MLP 2 x width)
#   SEQ_LENS="32 64"        training and evaluation lengths (tokens per example: 4 x pairs + 3)
#   STEPS=300 BATCH=16 VOCAB=64 EXAMPLES=4000 SAMPLES=64 SEED=1
#   DEVICE=cpu FLASHKIT=build/bin/flashkit PY=/usr/bin/python3 TAG=cpu RESULTS=bench/results
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/mqar}
KINDS=${KINDS:-"attention swa mamba"}
WIDTHS=${WIDTHS:-"32 64"}
SEQ_LENS=${SEQ_LENS:-"32 64"}
STEPS=${STEPS:-300}
BATCH=${BATCH:-16}
VOCAB=${VOCAB:-64}
EXAMPLES=${EXAMPLES:-4000}
SAMPLES=${SAMPLES:-64}
SEED=${SEED:-1}
DEVICE=${DEVICE:-cpu}
FLASHKIT=${FLASHKIT:-build/bin/flashkit}
PY=${PY:-/usr/bin/python3}
TAG=${TAG:-cpu}
RESULTS=${RESULTS:-bench/results}
mkdir -p "$OUT/eval" "$OUT/recipes"
start=$(date +%s)
for S in $SEQ_LENS; do
  data="$OUT/data-$S"
  [ -f "$data/train.bin" ] || "$FLASHKIT" prepare-data --synthetic mqar -o "$data" --vocab-size "$VOCAB" \
    --seq-len "$S" --examples "$EXAMPLES" --seed "$SEED" >/dev/null
  for K in $KINDS; do
    template=models/recipes/mqar-$K.json
    [ -f "$template" ] || { echo "mqar_sweep: no recipe $template for kind $K" >&2; exit 2; }
    dev=$DEVICE  # MAMBA_DEVICE: another device for the mamba kind (the CUDA trainer has no scan ops yet)
    if [ "$K" = mamba ] && [ -n "${MAMBA_DEVICE:-}" ]; then dev=$MAMBA_DEVICE; fi
    for W in $WIDTHS; do
      name="$K-w$W-s$S"
      recipe="$OUT/recipes/$name.json"
      "$PY" - "$template" "$recipe" "$W" "$S" "$VOCAB" "$data" "$OUT/runs/$name" "$STEPS" "$BATCH" "$dev" \
        "$SEED" <<'PYEOF'
import json, sys
src, dst, w, s, vocab, data, out, steps, batch, device, seed = sys.argv[1:]
w, s = int(w), int(s)
r = json.load(open(src))
m = r["model"]
if m["model_type"] == "mamba":  # no heads or positions: the width, and d_inner = expand x width
    m.update(hidden_size=w, intermediate_size=m.get("expand", 2) * w, vocab_size=int(vocab))
else:
    m.update(hidden_size=w, intermediate_size=2 * w, num_attention_heads=2, num_key_value_heads=2, head_dim=w // 2,
             vocab_size=int(vocab), max_position_embeddings=s)
if "query_pre_attn_scalar" in m:
    m["query_pre_attn_scalar"] = w // 2
r["data"] = {"train": f"{data}/train.bin", "val": f"{data}/val.bin"}
r["train"].update(steps=int(steps), batch_size=int(batch), seq_len=s, seed=int(seed))
r["train"]["warmup_steps"] = min(r["train"].get("warmup_steps", 0), int(steps) // 10)  # short test sweeps
r["output"] = {"dir": out}
r["device"] = device
json.dump(r, open(dst, "w"), indent=1)
PYEOF
      rm -rf "$OUT/runs/$name"
      t0=$(date +%s)
      if ! "$FLASHKIT" train --config "$recipe" -q >"$OUT/eval/$name.train.log" 2>&1; then
        echo "mqar_sweep: $name: training failed (kind $K skipped): $(tail -1 "$OUT/eval/$name.train.log")" >&2
        continue
      fi
      t1=$(date +%s)
      "$FLASHKIT" eval -m "$OUT/runs/$name/model" --task mqar --lengths "$S" --samples "$SAMPLES" \
        --seed $((SEED + 1000)) --device "$dev" -o "$OUT/eval/$name.json" 2>>"$OUT/eval/$name.train.log"
      acc=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['cells'][0]['accuracy'])" \
        "$OUT/eval/$name.json")
      echo "mqar_sweep: $name  train $((t1 - t0)) s  recall accuracy $acc" >&2
    done
  done
done
"$PY" tools/eval/mqar_summary.py "$OUT" --tag "$TAG" --results "$RESULTS" --steps "$STEPS" --batch "$BATCH" \
  --vocab "$VOCAB" --seconds $(( $(date +%s) - start ))
