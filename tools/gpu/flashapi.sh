#!/usr/bin/env bash
# flashkit's flash-attn-compatible PyTorch API on the device machine (an H200, torch 2.11): builds the library
# (target flashkit only; skipped when $BUILD/lib/libflashkit.so exists) and the torch.ops.flashkit extension against
# this torch, runs the Python tests (CPU tensors, extension and custom-op fallback), the CUDA checks against SDPA
# including torch.compile(fullgraph=True) (tools/gpu/flashapi_check.py), then the host-overhead benchmark for both
# backends (bench/python/flash_attn_overhead.py), and prints a short table.
#   tools/gpu/flashapi.sh lib        only the library (a fresh machine: its CUDA build may not fit in one call
#                                    with the rest; the build folder stays on the warm machine for the next call)
#   tools/gpu/flashapi.sh            results in $OUT: flashapi.log, flashapi-check.json, flashapi-check-custom-op.json,
#                                    flashapi-bench.json, flashapi-bench-ctypes.json, flashapi-profile.txt,
#                                    flashapi-logs.tar.gz
# Run with carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, tools/gpu/carried_deps.sh). Exit status: non-zero if
# a step failed.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/flashapi.log"
status=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } >> "$LOG" 2>&1

if [ ! -f "$BUILD/lib/libflashkit.so" ]; then
  run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
  run build_lib cmake --build "$BUILD" -j"$(nproc)" --target flashkit || exit 1
fi
[ "${1:-}" = lib ] && exit $status
export FLASHKIT_LIBRARY=$PWD/$BUILD/lib/libflashkit.so
export MAX_JOBS=$(nproc)
run build_ext python3 python/flashkit/csrc/build.py || exit 1
run pytest python3 -m pytest -q -p no:cacheprovider tests/python/test_flash_attn.py tests/python/test_torch.py
run cuda_checks python3 tools/gpu/flashapi_check.py "$OUT/flashapi-check.json"
# --profile: torch.profiler's table of where one flash_attn_func call's host time goes (issue 20's next steps).
run bench_ext python3 bench/python/flash_attn_overhead.py --json "$OUT/flashapi-bench.json" \
  --profile "$OUT/flashapi-profile.txt"
# The fallback when the extension is not built: torch.library.custom_op over the ctypes calls.
run bench_ctypes env FLASHKIT_TORCH_EXT=0 \
  python3 bench/python/flash_attn_overhead.py --json "$OUT/flashapi-bench-ctypes.json"
run cuda_checks_custom_op env FLASHKIT_TORCH_EXT=0 \
  python3 tools/gpu/flashapi_check.py "$OUT/flashapi-check-custom-op.json"

echo "== summary"
grep -E "^(PASS|FAIL) |checks, .* failed|passed|failed|^backend" "$LOG" | sed 's/^/  /'
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
print("%-22s %-10s %14s %22s" % ("call", "backend", "host us/call", "decode Sk=4096 us/call"))
for f in ("flashapi-bench.json", "flashapi-bench-ctypes.json"):
    p = os.path.join(out, f)
    if not os.path.isfile(p):
        continue
    r = json.load(open(p))
    for name, row in r["rows"].items():
        print("%-22s %-10s %14.2f %22.2f" % (name, r["backend"], row["host_us"], row["decode_us"]))
EOF
tar -czf "$OUT/flashapi-logs.tar.gz" -C "$OUT" flashapi.log $(cd "$OUT" && ls flashapi-*.json flashapi-*.txt 2>/dev/null) \
  >/dev/null 2>&1
exit $status
