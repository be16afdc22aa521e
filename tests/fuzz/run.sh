#!/bin/sh
# Builds the fuzzers with clang and runs each for a while on one core.
#   tests/fuzz/run.sh [seconds per target, default 180] [targets: safetensors gguf chat_template, default all]
# Seeds: tests/data/fuzz/{safetensors,gguf,chat} (regression inputs, kept in git) plus the model fixtures and the
# real chat templates; new corpus entries go to build-fuzz/corpus-*, crashes to build-fuzz/crash-*. Copy crashers
# into tests/data/fuzz/<format>/ so the GTest replays (tests/model/test_fuzz_corpus.cpp,
# tests/chat/test_chat_fuzz_corpus.cpp) run them in CI.
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-180}
[ $# -gt 0 ] && shift
targets=${*:-safetensors gguf chat_template}
CXX=clang++ cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2
/usr/bin/python3 tests/fuzz/make_seeds.py build-fuzz/seeds
/usr/bin/python3 tests/fuzz/make_chat_seeds.py build-fuzz/seeds
for target in $targets; do
  case $target in
    chat_template) fmt=chat max_len=16384 ;;
    *) fmt=$target max_len=65536 ;;
  esac
  mkdir -p build-fuzz/corpus-$fmt tests/data/fuzz/$fmt
  build-fuzz/fuzz_$target -dict=tests/fuzz/$fmt.dict -max_total_time="$secs" -max_len=$max_len -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=build-fuzz/crash-$fmt- -print_final_stats=1 \
    build-fuzz/corpus-$fmt tests/data/fuzz/$fmt build-fuzz/seeds/$fmt
done
