#!/usr/bin/env bash
# Runs the engine's fused Mamba decode kernels (the mixer step, src/engine/cuda/mamba_step.cu, and the in_proj GEMV
# with its conv epilogue, src/engine/cuda/gemv.cu) on the CPU emulation of cuda_runtime.h against an f64 reference
# (mamba_step_harness.cpp): a development check of indexing and arithmetic without a GPU.
# engine_emu.cuh stands in for the engine's common.cuh. Needs the CPU build (build/lib/libflashkit_core.so: errors,
# dtype conversions). Usage: tools/cuda_emu/run_mamba_step.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD; BUILD=${1:-build}; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/inc"; cp tools/cuda_emu/cuda_runtime.h tools/cuda_emu/engine_emu.cuh "$W/inc/"
for k in mamba_step gemv; do
  sed 's|#include "engine/cuda/common.cuh"|#include "engine_emu.cuh"|' "src/engine/cuda/$k.cu" > "$W/$k.cu"
  /usr/bin/python3 tools/cuda_emu/convert.py "$W/$k.cu" "$W/${k}_emu.cpp"
done
# The mixer step as sm_90 code (its cluster path: cuda_runtime.h emulates clusters and DSMEM).
g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -D__CUDA_ARCH__=900 -DFLASHKIT_CUDA_EMU -c "$W/mamba_step_emu.cpp" \
  -o "$W/mamba_step_emu.o"
for f in "$W/gemv_emu.cpp" src/engine/mamba_fusion.cpp src/engine/gemv_plan.cpp tools/cuda_emu/mamba_step_harness.cpp; do
  g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -c "$f" -o "$W/$(basename "$f" .cpp).o"
done
g++ -o "$W/mamba_step_emu" "$W"/*.o -L"$R/$BUILD/lib" -lflashkit_core -Wl,-rpath,"$R/$BUILD/lib" -lpthread
"$W/mamba_step_emu"
