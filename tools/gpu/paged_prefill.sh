#!/usr/bin/env bash
# Prompt chunks of a batched paged step through the flash kernel (engine/paged_spans.hpp) on the GPU machine (an
# H200): build, tests, and the A/B against the paged decode kernel (FLASHKIT_PAGED_FLASH=0) in one call.
#   tools/gpu/paged_prefill.sh [STAGES...]    default: build test serve eval
#   build   the CLI and the engine / serve / eval test binaries (sm_90a)
#   test    the gather kernel and the paged kernel against their references (CudaPagedKernel.*), the span plan
#           (PagedSpans.*), paged steps vs sessions with chunks on both paths and the scheduler on CUDA
#           (CudaServe.*), the eval tests; compute-sanitizer memcheck on the gather test
#   serve   `flashkit serve --device cuda` on a random-weights Llama-3.2-1B (bf16, ctx 8192, 512-token steps), chunks
#           through flash, then through the decode kernel: `bench serve` TTFT of 1k / 4k-token prompts (one client,
#           2 new tokens) and 8 clients of 2k-token prompts with 64 new tokens
#   eval    `flashkit eval` on CUDA with models/draft's weights at a 4096-token context (its config says 512;
#           accuracy past 512 is meaningless, the timing is not): passkey and niah_single at 1k/2k/4k, 8 samples a
#           cell, --batch 8 (flash chunks), --batch 8 with FLASHKIT_PAGED_FLASH=0, --batch 1 (a Session each)
# Results: $OUT/paged_prefill.log (RESULT / EVAL lines), $OUT/paged_prefill.json (the bench runs), $OUT/eval-*.json.
# carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/paged_prefill.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test serve eval)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
PY=$(command -v /usr/bin/python3 || command -v python3)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; git log -1 --format=%h 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_engine_tests flashkit_serve_tests \
        flashkit_eval_tests -- -k 0 ;;
    test)
      E=$(bin flashkit_engine_tests); S=$(bin flashkit_serve_tests); V=$(bin flashkit_eval_tests)
      run engine_tests timeout 240 "$E" --gtest_filter='CudaPagedKernel.*:PagedSpans.*' --gtest_brief=1
      run serve_cuda timeout 300 "$S" --gtest_filter='CudaServe.*'
      run eval_tests timeout 200 "$V" --gtest_brief=1
      run memcheck_gather timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" \
        --gtest_filter='CudaPagedKernel.GatherFollowsTheBlockTable' --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    serve)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      : > "$OUT/paged_prefill.jsonl"
      for flash in 1 0; do
        PORT=$((18500 + flash))
        FLASHKIT_PAGED_FLASH=$flash "$FK" serve -m models/configs/llama-3.2-1b.json --random-weights --dtype bf16 \
          --device cuda --tokenizer tests/data/tokenizers/tiny_bytelevel --ctx 8192 --block-size 16 --max-running 16 \
          --max-step-tokens 512 --max-pending 256 --port $PORT >> "$LOG" 2>&1 &
        SERVER=$!
        wait_port $PORT $SERVER || continue
        for spec in 1:4:1024:2 1:4:4096:2 8:16:2048:64; do
          IFS=: read -r c n p m <<< "$spec"
          run "bench_flash${flash}_c${c}_p${p}" timeout 120 "$FK" bench serve --url "http://127.0.0.1:$PORT" \
            --concurrency "$c" --requests "$n" --prompt-tokens "$p" --shared-prefix 0 --max-tokens "$m" --seed 11 \
            --time-limit 100 -o "$OUT/b.json"
          "$PY" -c "import json,sys; d=json.load(open('$OUT/b.json')); [r.update(paged_flash=$flash) for r in d.get('runs',[])]; print(json.dumps(d))" \
            >> "$OUT/paged_prefill.jsonl" 2>> "$LOG"
          rm -f "$OUT/b.json"
        done
        kill -INT $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
      done
      "$PY" - "$OUT/paged_prefill.jsonl" "$OUT/paged_prefill.json" <<'PY' | tee -a "$LOG"
import json, sys
runs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        runs += json.loads(line).get("runs", [])
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    print("RESULT flash=%d c=%-2d prompt=%-5d new=%-3d %9.1f tok/s  ttft p50 %8.2f ms  itl p50 %6.2f ms  ok %d/%d" % (
        r["paged_flash"], r["concurrency"], r["prompt_tokens"], r["max_tokens"], r["throughput_tok_s"],
        r["ttft_ms"].get("p50", 0), r["itl_ms"].get("p50", 0), r["ok"], r["requests"]))
PY
      ;;
    eval)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      M=$BUILD/draft-4k; rm -rf "$M"; mkdir -p "$M"
      for f in models/draft/*; do ln -sf "$PWD/$f" "$M/"; done
      rm -f "$M/config.json"; sed 's/"max_position_embeddings": 512/"max_position_embeddings": 4096/' \
        models/draft/config.json > "$M/config.json"
      for mode in batch8 batch8-decode batch1; do
        b=8; fl=1
        [ $mode = batch1 ] && b=1
        [ $mode = batch8-decode ] && fl=0
        run "eval_$mode" timeout 200 env FLASHKIT_PAGED_FLASH=$fl "$FK" eval -m "$M" --task passkey,niah_single \
          --lengths 1024,2048,4096 --depths 0.5 --samples 8 --device cuda --batch $b -o "$OUT/eval-$mode.json"
      done
      "$PY" - "$OUT" <<'PY' | tee -a "$LOG"
import json, sys, os
d = sys.argv[1]
res = {m: json.load(open(os.path.join(d, f"eval-{m}.json"))) for m in ("batch8", "batch8-decode", "batch1")
       if os.path.exists(os.path.join(d, f"eval-{m}.json"))}
for m, r in res.items():
    by_len = {}
    for c in r["cells"]:
        by_len.setdefault(c["length"], 0.0)
        by_len[c["length"]] += c["seconds"]
    print(f"EVAL {m:14s} " + "  ".join(f"{l}: {s:.3f} s" for l, s in sorted(by_len.items())) +
          f"  total {sum(by_len.values()):.3f} s")
if "batch8" in res and "batch1" in res:
    same = sum(x["accuracy"] == y["accuracy"] for x, y in zip(res["batch8"]["cells"], res["batch1"]["cells"]))
    print(f"EVAL cells with equal accuracy, batch 8 vs batch 1: {same}/{len(res['batch1']['cells'])}")
PY
      ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
