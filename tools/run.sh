#!/usr/bin/env bash
# Quick start, main job: install the build and run dependencies (not the tests'), build, then run the flashkit CLI with the given
# arguments (default: `flashkit bench attention`, CPU, default sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# Without GoogleTest (tools/install-test-deps.sh brings it) the test suite is left out of the build.
tests=ON
dpkg-query -W -f='${Status}' libgtest-dev 2>/dev/null | grep -q "install ok installed" || tests=OFF
bash tools/build.sh -DFLASHKIT_BUILD_TESTS=$tests
if [ $# -eq 0 ]; then set -- bench attention; fi
exec ./build/bin/flashkit "$@"
