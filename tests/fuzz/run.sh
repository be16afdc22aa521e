#!/bin/sh
# Builds the libFuzzer targets with clang and runs each for a while on one core (docs/fuzzing.md).
#   tests/fuzz/run.sh [--seconds N] [TARGET...]     N seconds per target (default 180); TARGETs: safetensors gguf
#                                                   tokenizer config chat_template (default: all)
#   tests/fuzz/run.sh --seconds 30                  the CI mode (.ci/run: FLASHKIT_FUZZ_SECONDS=30, tools/test.sh)
#   tests/fuzz/run.sh 600 tokenizer                 (a bare number is the seconds, as before)
# Seeds: tests/data/fuzz/<target> (regression inputs, kept in git and replayed by the normal tests) plus fresh
# ones from make_seeds.py (micro checkpoints, the tokenizer and config fixtures); new corpus entries go to
# build-fuzz/corpus-<target>, crashes to build-fuzz/crash-<target>-*. Exit status 1 when any target found a crash.
set -eu
cd "$(dirname "$0")/../.."
secs=180
seed=0   # libFuzzer's -seed: 0 picks a random one; CI passes a fixed seed so its short run is reproducible
targets=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) secs=$2; shift 2 ;;
    --seconds=*) secs=${1#--seconds=}; shift ;;
    --seed) seed=$2; shift 2 ;;
    [0-9]*) secs=$1; shift ;;
    safetensors|gguf|tokenizer|config|chat_template) targets="$targets $1"; shift ;;
    *) echo "run.sh: unknown argument '$1' (expected --seconds N or a target: safetensors gguf tokenizer config chat_template)" >&2
       exit 2 ;;
  esac
done
[ -n "$targets" ] || targets="safetensors gguf tokenizer config chat_template"
CXX=clang++ cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in $targets; do cmake --build build-fuzz -j2 --target fuzz_$t; done
/usr/bin/python3 tests/fuzz/make_seeds.py build-fuzz/seeds
/usr/bin/python3 tests/fuzz/make_chat_seeds.py build-fuzz/seeds
found=0
for t in $targets; do
  d=$t; [ "$t" = chat_template ] && d=chat   # the chat target's corpus, seeds and dictionary are named chat
  mkdir -p "build-fuzz/corpus-$d" "tests/data/fuzz/$d"
  dict=""
  [ -f "tests/fuzz/$d.dict" ] && dict="-dict=tests/fuzz/$d.dict"
  # A larger input limit for tokenizer.json (the seeds are a few KB to 30 KB), a smaller one for templates.
  maxlen=65536
  [ "$t" = tokenizer ] && maxlen=262144
  [ "$t" = chat_template ] && maxlen=16384
  build-fuzz/fuzz_$t $dict -max_total_time="$secs" -seed="$seed" -max_len=$maxlen -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="build-fuzz/crash-$d-" -print_final_stats=1 \
    "build-fuzz/corpus-$d" "tests/data/fuzz/$d" "build-fuzz/seeds/$d" || found=1
done
exit $found
