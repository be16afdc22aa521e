#!/usr/bin/env bash
# The communication layer and data-parallel training (src/dist, docs/distributed.md) on the GPU machine (one H200).
#   tools/gpu/dist.sh [STAGES...]     default: build test bench train
# stages:
#   build  cmake with NCCL (FLASHKIT_NCCL=ON: nccl.h and libnccl from the CUDA toolkit), the dist tests, the
#          all-reduce benchmark and the CLI
#   test   flashkit_dist_tests: every communicator test, NCCL with one rank on device buffers, two thread ranks
#          sharing the GPU (device buffers staged through the host), DP=2/3 thread-rank training on the CPU
#   bench  flashkit_allreduce_bench: NCCL at 1 rank (busbw is 0 by definition at n = 1: algbw is the copy speed),
#          thread ranks 2 on device buffers; 1 KiB .. 256 MiB -> allreduce-*.jsonl
#   train  a tiny Llama on synthetic data on CUDA: --dp 1 against --dp 2 --dp-threads (two ranks on the one GPU),
#          same global batch; the losses must agree within bf16 noise (dist_train_check.py) -> dist-train.json
# On a machine with N >= 2 GPUs the same script measures N ranks: RANKS=N tools/gpu/dist.sh bench train.
# Results in $OUT: dist.log, allreduce-*.jsonl, dist-train.json. Exit status non-zero if any stage failed.
# Needs the tokenizer's PCRE2/ICU like the other GPU scripts: tools/gpu/engine.sh pack-deps, carry=[".fkdeps"].
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh
. tools/gpu/steps.sh
fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
RANKS=${RANKS:-1}
LOG="$OUT/dist.log"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench train)
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1
  git rev-parse --short HEAD 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DFLASHKIT_NCCL=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" || break
      grep -E "flashkit: (CUDA backend|NCCL)" "$LOG" | tail -2
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_dist_tests flashkit_allreduce_bench flashkit_cli || break
      ;;
    test) run dist_tests env OMP_WAIT_POLICY=passive "$BUILD/tests/dist/flashkit_dist_tests" --gtest_brief=1 ;;
    bench)
      B=$BUILD/bin/flashkit_allreduce_bench
      run bench_nccl "$B" --comm nccl --ranks "$RANKS" --min-bytes 1024 --max-bytes 268435456 --iters 20 \
        --link-gbs 450 --json "$OUT/allreduce-nccl-$RANKS.jsonl"
      run bench_threads_cuda "$B" --comm threads --ranks 2 --device cuda --min-bytes 1024 --max-bytes 67108864 \
        --iters 5 --json "$OUT/allreduce-threads-2.jsonl"
      grep -E "^#|^ +[0-9]" "$LOG" | tail -60
      ;;
    train)
      W=$OUT/dist-train-work
      rm -rf "$W"; mkdir -p "$W"
      run data "$BUILD/bin/flashkit" prepare-data --synthetic copy -o "$W/data" --vocab-size 256 --seq-len 128 \
        --examples 4000 --val-examples 64 || break
      python3 tools/gpu/dist_train_check.py recipe "$W" > "$W/recipe.json"
      run train_dp1 "$BUILD/bin/flashkit" train --config "$W/recipe.json" --device cuda --output "$W/dp1" -q
      if [ "$RANKS" -gt 1 ]; then
        run train_dp "$BUILD/bin/flashkit" train --config "$W/recipe.json" --device cuda --output "$W/dp" -q --dp "$RANKS"
      else
        run train_dp "$BUILD/bin/flashkit" train --config "$W/recipe.json" --device cuda --output "$W/dp" -q --dp 2 --dp-threads
      fi
      # flashkit cost's prediction beside the measurement: the per-step all-reduce + all-gather ring floor.
      python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["model"]))' "$W/recipe.json" > "$W/config.json"
      DPN=$([ "$RANKS" -gt 1 ] && echo "$RANKS" || echo 2)
      "$BUILD/bin/flashkit" cost -m "$W/config.json" --device h200 --dp "$DPN" --json > "$W/cost.json" 2>>"$LOG"
      run train_check python3 tools/gpu/dist_train_check.py compare "$W/dp1/log.jsonl" "$W/dp/log.jsonl" \
        --json "$OUT/dist-train.json" --cost "$W/cost.json"
      cat "$OUT/dist-train.json"
      tar czf "$OUT/dist-train-logs.tgz" -C "$W" dp1/log.jsonl dp/log.jsonl recipe.json 2>/dev/null
      ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
log "dist.sh: status $status"
exit $status
