#!/usr/bin/env bash
# Quick start, main job: install dependencies, build, then run the flashkit CLI with the given
# arguments (default: `flashkit bench attention`, CPU, default sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
if [ $# -eq 0 ]; then set -- bench attention; fi
exec ./build/bin/flashkit "$@"
