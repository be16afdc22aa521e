#!/usr/bin/env bash
# The engine checks that need transformers, on the GPU machine (needs $BUILD/lib/libflashkit.so: run
# `tools/gpu/engine.sh build` first, in the same call or on the same warm machine; no checkpoint is needed).
#   tools/gpu/hf_checks.sh [STAGES...]     default: fidelity chat fidelity1b
# stages:
#   fidelity    full-size logits fidelity, gemma-3-270m and Llama-3.2-1B (bench/engine/hf_fidelity.py): random
#               informative weights from models/configs, save_pretrained f32 + bf16; flashkit CPU f32 vs
#               transformers f32 (rel <= 1e-3 prefill and 32 decode steps, 64 identical greedy tokens), flashkit CUDA
#               bf16 vs transformers bf16 (top-1 >= 99%), flashkit CUDA on the f32 checkpoint (informational)
#   fidelity1b  the same for gemma-3-1b (a 4 GB f32 checkpoint: about a minute more)
#   chat        chat templates: tests/data/chat/expected.json vs transformers' tokenizer.apply_chat_template
#               (tools/chat/check_transformers.py, which also runs render_expected.py --use-transformers --check)
# env: BUILD (build-gpu), OUT (./build-gpu-out), HF_MODELS (/tmp/fk-hf-models: checkpoints and reference logits,
#      kept so a later call on the same machine skips re-making them), HF_FIDELITY_ARGS (extra arguments to
#      hf_fidelity.py run, e.g. --fk cpu-f32).
# Results in $OUT: hf_checks.log (everything), hf-fidelity.json, hf-chat.json. Every model step and the chat check
# run in their own processes, so a crash loses one number; the JSON files are rewritten after every step.
# Exit status: non-zero if any stage failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tools/gpu/carried_deps.sh
fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
HF_MODELS=${HF_MODELS:-/tmp/fk-hf-models}
LOG="$OUT/hf_checks.log"
FJSON="$OUT/hf-fidelity.json"
CJSON="$OUT/hf-chat.json"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(fidelity chat fidelity1b)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export FLASHKIT_LIBRARY="$BUILD/lib/libflashkit.so"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
status=0
T_START=$(date +%s)
log() { echo "== $*" | tee -a "$LOG"; }
run() {  # run NAME CMD...: output appended to the log; rc and seconds printed and logged
  local name=$1; shift
  log "$name: $*"
  local t0; t0=$(date +%s)
  "$@" >> "$LOG" 2>&1
  local rc=$?
  log "$name: rc=$rc ($(( $(date +%s) - t0 )) s, $(( $(date +%s) - T_START )) s total)"
  if [ $rc -ne 0 ]; then
    status=1
    echo "-- last lines of $name's output:"; tail -n 25 "$LOG" | grep -v "^== $name" | tail -n 20
  fi
  return $rc
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c "import torch, transformers, numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)" 2>&1
  echo "cpus $(nproc), BUILD=$BUILD, HF_MODELS=$HF_MODELS"; git rev-parse --short HEAD 2>/dev/null; } >> "$LOG" 2>&1
fidelity() {  # fidelity NAME MODELS
  if [ ! -f "$FLASHKIT_LIBRARY" ]; then
    log "$1: $FLASHKIT_LIBRARY is missing (run tools/gpu/engine.sh build first)"; status=1; return 1
  fi
  # shellcheck disable=SC2086
  run "$1" python3 bench/engine/hf_fidelity.py run --models "$2" --work "$HF_MODELS" --build "$BUILD" \
    --json "$FJSON" ${HF_FIDELITY_ARGS:-}
}
for st in "${STAGES[@]}"; do
  case $st in
    fidelity) fidelity fidelity gemma-3-270m,llama-3.2-1b ;;
    fidelity1b) fidelity fidelity1b gemma-3-1b ;;
    chat) run chat python3 tools/chat/check_transformers.py --json "$CJSON" ;;
    *) log "unknown stage $st (fidelity, fidelity1b, chat)"; status=1 ;;
  esac
done
# Summary table
{
  echo "== summary ($(( $(date +%s) - T_START )) s)"
  if [ -f "$FJSON" ]; then
    echo "fidelity (rel = max ||d||/||ref|| over rows; greedy = matching/64; top-1 over prefill rows + 63 decode steps):"
    python3 bench/engine/hf_fidelity.py run --summary --json "$FJSON" 2>&1
  fi
  if [ -f "$CJSON" ]; then
    python3 - "$CJSON" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("error"):
    print("chat: error", r["error"])
for part in ("cases", "corpus"):
    if part in r:
        p = r[part]
        print("chat %-6s %3d rendered by apply_chat_template: %s" % (part, p["total"], p["counts"]))
        for q in p["problems"][:5]:
            print("   ", json.dumps(q, ensure_ascii=False)[:300])
c = r.get("render_expected_check")
if c:
    print("chat render_expected.py --use-transformers --check: rc=%s: %s" % (c["rc"], (c["output"].splitlines() or [""])[-1][:200]))
print("chat:", "PASS" if r.get("pass") else "FAIL", "(transformers %s, jinja2 %s)" % (r.get("transformers"), r.get("jinja2")))
PY
  fi
  grep -E "^== .*rc=" "$LOG"
} 2>&1 | tee -a "$LOG"
exit $status
