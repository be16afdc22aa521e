#!/usr/bin/env bash
# Quick start, tests: install dependencies, build, run every test (C++, C API, Python, CLI) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
