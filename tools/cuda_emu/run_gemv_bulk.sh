#!/usr/bin/env bash
# Runs the bulk GEMV (src/engine/cuda/gemv.cu) on the CPU emulation of cuda_runtime.h against the legacy kernel and an
# f64 reference (gemv_bulk_harness.cpp): a development check of the ring's indexing and barriers without a GPU.
# Needs the CPU build (build/lib/libflashkit_core.so: errors, dtype conversions). Usage: run_gemv_bulk.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD; BUILD=${1:-build}; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/inc"; cp tools/cuda_emu/cuda_runtime.h tools/cuda_emu/engine_emu.cuh "$W/inc/"
sed 's|#include "engine/cuda/common.cuh"|#include "engine_emu.cuh"|' src/engine/cuda/gemv.cu > "$W/gemv.cu"
# (the harness reads the name of the last launch through a function of the emulated translation unit)
printf '\nnamespace flashkit::engine::cuda { const char* emu_last_launch_name() { return emu_last_launch; } }\n' >> "$W/gemv.cu"
/usr/bin/python3 tools/cuda_emu/convert.py "$W/gemv.cu" "$W/gemv_emu.cpp"
for f in "$W/gemv_emu.cpp" src/engine/gemv_plan.cpp tools/cuda_emu/gemv_bulk_harness.cpp; do
  g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -Itests/engine -c "$f" -o "$W/$(basename "$f" .cpp).o"
done
g++ -o "$W/gemv_bulk_emu" "$W"/*.o -L"$R/$BUILD/lib" -lflashkit_core -Wl,-rpath,"$R/$BUILD/lib" -lpthread
"$W/gemv_bulk_emu"
