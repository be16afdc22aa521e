#!/usr/bin/env bash
# Batched serving on the CUDA backend (issue 16) on the GPU machine (an H200), one call, about 5 minutes with a warm
# build-gpu/:
#   build     the CLI, the engine and serve test binaries (targets only, not the whole tree)
#   test      the paged kernel against the f64 reference (CudaPagedKernel.*), the paged-step / serving tests on CUDA
#             (CudaServe.*), the CUDA paged plan (CudaChoice.Paged*) and the CPU serve tests (must stay green)
#   sanitize  compute-sanitizer memcheck on the paged kernel tests (store, attention, combine)
#   bench     `flashkit serve --device cuda` on a random-weights Llama-3.2-1B (bf16, block size 16, 64 running), driven
#             by `flashkit bench serve --url`: concurrency 1, 16, 64; 128-token prompts, 256 new tokens; then
#             2,176-token prompts, first unrelated, then sharing a 2,048-token prefix (prefix cache; bench serve runs
#             both when --shared-prefix is given). Greedy requests: the engine's device-argmax steps.
#   tools/gpu/serve_cuda.sh [STAGES...]    default: build test sanitize bench
#             Last, the goal's TTFT: 8 single 128-token requests (2 new tokens) sent while 64 clients decode; its RESULT
#             line is the one with c=1 and 8 requests of max_tokens 2 (ttft p50 = time to first token under load).
# Results: $OUT/serve_cuda.log (with the server's startup line: KV blocks and MiB), $OUT/serve_cuda.json (every
# bench run), $OUT/failed.txt. Exit status non-zero if any stage failed; stages run whatever happened before them
# (only a failed configure stops the job). carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/serve_cuda.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_engine_tests flashkit_serve_tests \
        flashkit_tests -- -k 0 ;;
    test)
      E=$(bin flashkit_engine_tests); S=$(bin flashkit_serve_tests); A=$(bin flashkit_tests)
      if [ -n "$E" ]; then run paged_kernel timeout 240 "$E" --gtest_filter='CudaPagedKernel.*'
      else log "flashkit_engine_tests: not built"; status=1; fi
      if [ -n "$A" ]; then run paged_plan timeout 60 "$A" --gtest_filter='CudaChoice.Paged*' --gtest_brief=1
      else log "flashkit_tests: not built"; status=1; fi
      if [ -n "$S" ]; then
        run serve_cuda timeout 300 "$S" --gtest_filter='CudaServe.*'
        run serve_cpu timeout 300 "$S" --gtest_filter='-CudaServe.*' --gtest_brief=1
      else log "flashkit_serve_tests: not built"; status=1; fi
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    sanitize)
      E=$(bin flashkit_engine_tests)
      run memcheck_paged_kernel timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$E" \
        --gtest_filter='CudaPagedKernel.*' --gtest_brief=1 ;;
    bench)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      PORT=18431
      "$FK" serve -m models/configs/llama-3.2-1b.json --random-weights --dtype bf16 --device cuda \
        --tokenizer tests/data/tokenizers/tiny_bytelevel --ctx 2560 --block-size 16 --max-running 64 \
        --max-step-tokens 512 --max-pending 1024 --max-connections 128 --port $PORT >> "$LOG" 2>&1 &
      SERVER=$!
      for i in $(seq 1 240); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        kill -0 $SERVER 2>/dev/null || break
        sleep 0.5
      done
      log "server pid $SERVER up after ~$((i / 2)) s"
      : > "$OUT/serve_cuda.jsonl"
      # (concurrency, requests): enough requests for two waves at 16 and 64 clients, a few at 1.
      for shared in 0 2048; do
        for cr in 1:4 16:32 64:128; do
          c=${cr%%:*}; n=${cr##*:}
          run "bench_c${c}_prefix${shared}" timeout 150 "$FK" bench serve --url "http://127.0.0.1:$PORT" \
            --concurrency "$c" --requests "$n" --prompt-tokens $((128 + shared)) --shared-prefix "$shared" \
            --max-tokens 256 --time-limit 120 -o "$OUT/bench_c${c}_p${shared}.json"
          cat "$OUT/bench_c${c}_p${shared}.json" >> "$OUT/serve_cuda.jsonl" 2>/dev/null
          rm -f "$OUT/bench_c${c}_p${shared}.json"
        done
      done
      # TTFT of a 128-token prompt on a loaded server: 8 single requests (1 client, 2 new tokens) while 64 clients
      # decode (the load: 128 requests of 128 + 256 tokens, started a second earlier).
      "$FK" bench serve --url "http://127.0.0.1:$PORT" --concurrency 64 --requests 128 --prompt-tokens 128 \
        --shared-prefix 0 --max-tokens 256 --time-limit 60 -o "$OUT/load.json" >> "$LOG" 2>&1 &
      LOAD=$!
      sleep 1
      run ttft_loaded timeout 90 "$FK" bench serve --url "http://127.0.0.1:$PORT" --concurrency 1 --requests 8 \
        --prompt-tokens 128 --shared-prefix 0 --max-tokens 2 --seed 7 --time-limit 60 -o "$OUT/ttft.json"
      wait $LOAD
      cat "$OUT/ttft.json" >> "$OUT/serve_cuda.jsonl" 2>/dev/null
      rm -f "$OUT/load.json" "$OUT/ttft.json"
      command -v curl > /dev/null && curl -sf "http://127.0.0.1:$PORT/metrics" >> "$LOG" 2>&1
      kill -INT $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
      /usr/bin/env python3 - "$OUT/serve_cuda.jsonl" "$OUT/serve_cuda.json" <<'EOF' >> "$LOG" 2>&1 || true
import json, sys
runs = []
dec = json.JSONDecoder()
text = open(sys.argv[1]).read()
i = 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    runs += obj.get("runs", []) if isinstance(obj, dict) else []
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    print("RESULT c=%-3d prompt=%-5d prefix=%-5d new=%-3d %9.1f tok/s  ttft p50 %8.2f ms  itl p50 %6.2f ms  ok %d/%d  hit %.2f" % (
        r["concurrency"], r["prompt_tokens"], r["shared_prefix_tokens"], r["max_tokens"], r["throughput_tok_s"], r["ttft_ms"].get("p50", 0),
        r["itl_ms"].get("p50", 0), r["ok"], r["requests"], r["prefix_cache_hit_rate"]))
EOF
      grep "^RESULT" "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
