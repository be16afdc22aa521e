#!/bin/sh
# Builds the reader fuzzers with clang and runs each for a while on one core.
#   tests/fuzz/run.sh [seconds per target, default 180]
# Seeds: tests/data/fuzz/{safetensors,gguf} (regression inputs, kept in git) plus the model fixtures; new corpus
# entries go to build-fuzz/corpus-*, crashes to build-fuzz/crash-*. Copy crashers into tests/data/fuzz/<format>/ so
# the GTest test_fuzz_corpus.cpp replays them in CI.
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-180}
CXX=clang++ cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2
/usr/bin/python3 tests/fuzz/make_seeds.py build-fuzz/seeds
for fmt in safetensors gguf; do
  mkdir -p build-fuzz/corpus-$fmt
  build-fuzz/fuzz_$fmt -dict=tests/fuzz/$fmt.dict -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/crash-$fmt- -print_final_stats=1 \
    build-fuzz/corpus-$fmt tests/data/fuzz/$fmt build-fuzz/seeds/$fmt
done
