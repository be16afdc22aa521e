#!/usr/bin/env bash
# n-gram speculative decoding inside `flashkit serve` (issue 17, Required 4: statistics through the server) on the GPU
# machine (an H200), one call, about 4 minutes with a cold build-gpu/:
#   build   the CLI and the serve test binary (targets only)
#   test    the speculative serving test on CUDA (CudaServe.Speculative*: greedy output as generate alone, near-ties
#           allowed, proposals accepted and rejected, blocks all free), the other CUDA serve tests and the CPU serve
#           tests (ServeSpec*, ServeSpecCommit.* among them; must stay green)
#   bench   `flashkit bench serve --device cuda` (server in process) on the input-grounded prompt
#           (bench/prompts/grounded.txt: a passage and a question quoting it, bench spec's grounded regime), greedy,
#           128 new tokens, concurrency 1, 4 and 32, without and with --lookup 3 (K = 4, then K = auto): on
#           models/draft (a trained tiny Llama: the step is launch-bound, so extra rows are almost free) and on a
#           random-weights Llama-3.2-1B (bf16; weight-bound decode). One RESULT line per run, with the acceptance.
#   tools/gpu/servespec.sh [STAGES...]    default: build test bench
# Results: $OUT/servespec.log (everything), $OUT/servespec.json (every bench run), $OUT/failed.txt. Exit status
# non-zero if any stage failed; stages run whatever happened before them (only a failed configure stops the job).
# carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/servespec.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_serve_tests -- -k 0 ;;
    test)
      S=$(bin flashkit_serve_tests)
      if [ -n "$S" ]; then
        run serve_spec_cuda timeout 240 "$S" --gtest_filter='CudaServe.Speculative*'
        run serve_cuda timeout 240 "$S" --gtest_filter='CudaServe.*:-CudaServe.Speculative*' --gtest_brief=1
        run serve_cpu timeout 240 "$S" --gtest_filter='-CudaServe.*' --gtest_brief=1
      else log "flashkit_serve_tests: not built"; status=1; fi
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    bench)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      : > "$OUT/servespec.jsonl"
      # name | model arguments
      MODELS=("draft|-m models/draft --dtype bf16"
              "llama1b|-m models/configs/llama-3.2-1b.json --random-weights --dtype bf16 --tokenizer models/tokenizer")
      for entry in "${MODELS[@]}"; do
        name=${entry%%|*}; margs=${entry#*|}
        for spec in "off|" "k4|--lookup 3 --draft-tokens 4" "auto|--lookup 3 --draft-tokens auto"; do
          sname=${spec%%|*}; sargs=${spec#*|}
          # shellcheck disable=SC2086
          run "bench_${name}_${sname}" timeout 100 "$FK" bench serve $margs --device cuda --ctx 512 \
            --max-running 64 --prompt-file bench/prompts/grounded.txt --concurrency 1,4,32 --requests 32 \
            --max-tokens 128 --time-limit 80 $sargs -o "$OUT/b.json"
          /usr/bin/env python3 - "$OUT/b.json" "$name" "$sname" >> "$OUT/servespec.jsonl" 2>> "$LOG" <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
for run in r["runs"]:
    run["model"], run["spec"] = sys.argv[2], sys.argv[3]
    print(json.dumps(run))
EOF
          rm -f "$OUT/b.json"
        done
      done
      /usr/bin/env python3 - "$OUT/servespec.jsonl" "$OUT/servespec.json" <<'EOF' >> "$LOG" 2>&1 || true
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
base = {(r["model"], r["concurrency"]): r["throughput_tok_s"] for r in runs if r["spec"] == "off"}
for r in runs:
    sp = r.get("speculative", {})
    b = base.get((r["model"], r["concurrency"]), 0)
    print("RESULT model=%-7s spec=%-4s c=%-3d %9.1f tok/s (x%.2f vs off)  ttft p50 %7.2f ms  itl p50 %6.2f ms  ok %d/%d"
          "  accepted %d/%d" % (r["model"], r["spec"], r["concurrency"], r["throughput_tok_s"],
                                r["throughput_tok_s"] / b if b else 0, r["ttft_ms"].get("p50", 0),
                                r["itl_ms"].get("p50", 0), r["ok"], r["requests"], sp.get("accepted", 0),
                                sp.get("proposed", 0)))
EOF
      rm -f "$OUT/servespec.jsonl"
      grep "^RESULT" "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
