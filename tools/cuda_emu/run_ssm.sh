#!/usr/bin/env bash
# Runs the SSM CUDA kernels (src/kernels/cuda/ssm/*.cu) on the CPU, without a GPU, against the f64 reference: every
# forward generation and both backward generations on small odd shapes. A development check of indexing and
# algorithm (the GPU tests, tools/gpu/ssm_cuda.sh, remain the real ones): cuda_runtime.h here emulates the CUDA subset
# the kernels use (one block at a time, one std::thread per CUDA thread, __syncthreads as a std::barrier, shuffles
# through a block-wide exchange, dynamic shared memory poisoned per block); convert.py rewrites the launches.
# Needs the CPU build (build/lib/libflashkit_core.so: the reference). Usage: tools/cuda_emu/run_ssm.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD; BUILD=${1:-build}; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/inc/kernels/cuda/ssm"; cp tools/cuda_emu/cuda_runtime.h "$W/inc/"
cp tools/cuda_emu/async_copy.cuh "$W/inc/kernels/cuda/ssm/"  # deferred copies in place of cp.async
# v4's block holds an `extern __shared__`: converted too, found before src/ on the include path
/usr/bin/python3 tools/cuda_emu/convert.py src/kernels/cuda/ssm/scan_v4_block.cuh "$W/inc/kernels/cuda/ssm/scan_v4_block.cuh"
for f in scan scan_v3 scan_v4 scan_v4_pipe scan_backward scan_backward_v2; do
  /usr/bin/python3 tools/cuda_emu/convert.py "src/kernels/cuda/ssm/$f.cu" "$W/$f.cpp"
done
for f in scan scan_v3 scan_v4 scan_v4_pipe scan_backward scan_backward_v2; do
  g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -Itests/ssm -c "$W/$f.cpp" -o "$W/$f.o"
done
g++ -std=c++20 -O1 -w -I"$W/inc" -Iinclude -Isrc -Itests/ssm -c tools/cuda_emu/ssm_harness.cpp -o "$W/harness.o"
g++ -o "$W/ssm_emu" "$W"/*.o -L"$R/$BUILD/lib" -lflashkit_core -Wl,-rpath,"$R/$BUILD/lib" -lpthread
"$W/ssm_emu"
