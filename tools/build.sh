#!/usr/bin/env bash
# Configures and builds flashkit into ./build (Release, Ninja; CUDA when nvcc is found).
# Extra arguments go to cmake, e.g. tools/build.sh -DFLASHKIT_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FLASHKIT_BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$BUILD_DIR/configure.log" 2>&1 || {
  cat "$BUILD_DIR/configure.log"; exit 1; }
grep -E "flashkit: CUDA backend" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j "$(nproc)"
