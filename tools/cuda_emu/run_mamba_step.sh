#!/usr/bin/env bash
# Runs the engine's Mamba mixer-step kernel (src/engine/cuda/mamba_step.cu) on the CPU emulation of cuda_runtime.h
# against an f64 reference (mamba_step_harness.cpp): a development check of indexing and arithmetic without a GPU.
# engine_emu.cuh stands in for the engine's common.cuh. Needs the CPU build (build/lib/libflashkit_core.so: errors,
# dtype conversions). Usage: tools/cuda_emu/run_mamba_step.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD; BUILD=${1:-build}; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/inc"; cp tools/cuda_emu/cuda_runtime.h tools/cuda_emu/engine_emu.cuh "$W/inc/"
sed 's|#include "engine/cuda/common.cuh"|#include "engine_emu.cuh"|' src/engine/cuda/mamba_step.cu > "$W/step.cu"
/usr/bin/python3 tools/cuda_emu/convert.py "$W/step.cu" "$W/step.cpp"
for f in "$W/step.cpp" src/engine/mamba_fusion.cpp tools/cuda_emu/mamba_step_harness.cpp; do
  g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -c "$f" -o "$W/$(basename "$f" .cpp).o"
done
g++ -o "$W/mamba_step_emu" "$W"/*.o -L"$R/$BUILD/lib" -lflashkit_core -Wl,-rpath,"$R/$BUILD/lib" -lpthread
"$W/mamba_step_emu"
