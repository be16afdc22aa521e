#!/usr/bin/env bash
# Mamba models through `flashkit serve` on CUDA (issue 18, Required 2) on the GPU machine (an H200), one call, about
# 4 minutes from a cold build-gpu/:
#   build   the CLI and the serve test binary (targets only)
#   test    ServeMamba.* (CPU) and ServeMambaCuda.* (CUDA: concurrent greedy requests through the serve engine, one
#           session each, token for token against generate() alone), the whole CPU serve suite (must stay green),
#           and tests/serve/test_serve_mamba_http.py against `flashkit serve --device cuda` (FLASHKIT_SERVE_DEVICE)
#   bench   `flashkit serve --device cuda --max-running 32` on a random mamba-130m-shaped checkpoint (numpy-written,
#           f32 on disk, bf16 on the device), driven by `flashkit bench serve --url`: concurrency 1, 8, 32; 128-token
#           prompts, 64 new tokens. Sequences run one session each, round-robin (no batching across sequences yet):
#           the numbers are the baseline a batched Mamba step would be measured against.
#   tools/gpu/mambaserve.sh [STAGES...]    default: build test bench
# Results: $OUT/mambaserve.log (RESULT lines at the end), $OUT/mambaserve.json (every bench run), $OUT/failed.txt.
# Exit status non-zero if any stage failed; stages run whatever happened before them (only a failed configure stops
# the job). carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, tools/gpu/carried_deps.sh).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/mambaserve.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli flashkit_serve_tests -- -k 0 ;;
    test)
      S=$(bin flashkit_serve_tests)
      if [ -n "$S" ]; then
        run serve_mamba timeout 120 "$S" --gtest_filter='ServeMamba*'
        grep -q "SKIPPED.*ServeMambaCuda" "$LOG" && { log "ServeMambaCuda skipped: no CUDA device seen"; status=1; }
        run serve_cpu timeout 300 "$S" --gtest_filter='-CudaServe.*:ServeMamba*' --gtest_brief=1
      else log "flashkit_serve_tests: not built"; status=1; fi
      if [ -x "$FK" ]; then
        FLASHKIT_CLI="$FK" FLASHKIT_TEST_DATA="$PWD/tests/data" FLASHKIT_SERVE_DEVICE=cuda \
          run http_mamba_cuda timeout 120 python3 -m pytest -q -p no:cacheprovider tests/serve/test_serve_mamba_http.py
      else log "flashkit: not built"; status=1; fi
      grep -E "^\[  FAILED  \]|^FAILED " "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    bench)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      M="$BUILD/mamba-130m-random"   # kept out of $OUT: only a few files come back
      run make_model python3 - "$M" <<'PY'
import json, os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
H, L, N, E, K, V = 768, 24, 16, 2, 4, 50280
R, DI = (H + 15) // 16, E * H
json.dump({"model_type": "mamba", "vocab_size": V, "hidden_size": H, "state_size": N, "num_hidden_layers": L,
           "expand": E, "conv_kernel": K, "time_step_rank": R, "bos_token_id": 0, "eos_token_id": 0},
          open(os.path.join(d, "config.json"), "w"))
rng = np.random.default_rng(0)
t = {"backbone.embeddings.weight": rng.normal(0, 0.02, (V, H)), "backbone.norm_f.weight": np.ones(H)}
for i in range(L):
    p = f"backbone.layers.{i}."
    t[p + "norm.weight"] = np.ones(H)
    t[p + "mixer.in_proj.weight"] = rng.normal(0, 0.02, (2 * DI, H))
    t[p + "mixer.conv1d.weight"] = rng.normal(0, 0.2, (DI, 1, K))
    t[p + "mixer.conv1d.bias"] = np.zeros(DI)
    t[p + "mixer.x_proj.weight"] = rng.normal(0, 0.02, (R + 2 * N, DI))
    t[p + "mixer.dt_proj.weight"] = rng.normal(0, 0.1, (DI, R))
    t[p + "mixer.dt_proj.bias"] = np.full(DI, -4.0)
    t[p + "mixer.A_log"] = np.log(np.tile(np.arange(1, N + 1), (DI, 1)))
    t[p + "mixer.D"] = np.ones(DI)
    t[p + "mixer.out_proj.weight"] = rng.normal(0, 0.02, (H, DI))
header, off, blobs = {}, 0, []
for k, a in t.items():
    b = np.ascontiguousarray(a, dtype="<f4").tobytes()
    header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(len(h).to_bytes(8, "little") + h)
    for b in blobs:
        f.write(b)
print("wrote", d, off // 4, "parameters")
PY
      PORT=18433
      "$FK" serve -m "$M" --device cuda --tokenizer tests/data/tokenizers/tiny_bytelevel --ctx 1024 --max-running 32 \
        --max-pending 1024 --max-connections 128 --port $PORT >> "$LOG" 2>&1 &
      SERVER=$!
      for i in $(seq 1 240); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        kill -0 $SERVER 2>/dev/null || break
        sleep 0.5
      done
      log "server pid $SERVER up after ~$((i / 2)) s"
      : > "$OUT/mambaserve.jsonl"
      for cr in 1:4 8:16 32:64; do
        c=${cr%%:*}; n=${cr##*:}
        run "bench_c${c}" timeout 120 "$FK" bench serve --url "http://127.0.0.1:$PORT" --concurrency "$c" \
          --requests "$n" --prompt-tokens 128 --shared-prefix 0 --max-tokens 64 --time-limit 90 -o "$OUT/bench_c${c}.json"
        cat "$OUT/bench_c${c}.json" >> "$OUT/mambaserve.jsonl" 2>/dev/null
        rm -f "$OUT/bench_c${c}.json"
      done
      command -v curl > /dev/null && curl -sf "http://127.0.0.1:$PORT/metrics" >> "$LOG" 2>&1
      kill -INT $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
      python3 - "$OUT/mambaserve.jsonl" "$OUT/mambaserve.json" <<'PY' >> "$LOG" 2>&1 || true
import json, sys
runs, dec, text, i = [], json.JSONDecoder(), open(sys.argv[1]).read(), 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    runs += obj.get("runs", []) if isinstance(obj, dict) else []
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    print("RESULT mamba c=%-3d prompt=%-4d new=%-3d %9.1f tok/s  ttft p50 %8.2f ms  itl p50 %6.2f ms  ok %d/%d" % (
        r["concurrency"], r["prompt_tokens"], r["max_tokens"], r["throughput_tok_s"], r["ttft_ms"].get("p50", 0),
        r["itl_ms"].get("p50", 0), r["ok"], r["requests"]))
PY
      rm -f "$OUT/mambaserve.jsonl"
      grep "^RESULT" "$LOG" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
