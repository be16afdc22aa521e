#!/usr/bin/env bash
# One device call for several topic scripts that share one build folder: configure and build every target they
# use once (16 cores), then run each "script:stage,stage" argument in order (e.g. bwd_ws:test,bench fp8:build,test).
#   tools/gpu/session_ab.sh bwd_ws:test,sanitize,bench ws_ssm_cleanup fp8:test      carry=[".fkdeps.tar.xz"]
# Each script writes its own log under $OUT; this one prints each script's exit status.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"; export OUT
BUILD=${BUILD:-build-gpu}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 \
    > "$OUT/session_configure.log" 2>&1 || { tail -20 "$OUT/session_configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_core flashkit_cuda_tests flashkit_tests \
  flashkit_fp8_cuda_tests flashkit_engine_tests flashkit_ssm_bench flashkit_ssm_cuda_tests \
  flashkit_ssm_tests -- -k 0 > "$OUT/session_build.log" 2>&1
echo "session build: rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "error|FAILED" "$OUT/session_build.log" | head -20
status=0
for arg in "$@"; do
  s=${arg%%:*}; st=${arg#*:}; [ "$st" = "$arg" ] && st=""
  t0=$(date +%s)
  bash "tools/gpu/$s.sh" ${st//,/ } > "$OUT/session_$s.out" 2>&1; rc=$?
  echo "session $s ${st}: rc=$rc ($(( $(date +%s) - t0 )) s)"; [ $rc -ne 0 ] && status=1
done
exit $status
