#!/usr/bin/env bash
# CPU offload of weights on the CUDA backend (issue 16, Required 4; docs/serving.md "CPU offload",
# docs/worklog/offload-cuda.md) on the GPU machine (an H200), one call, under 5 minutes from a warm build-gpu/:
#   build     flashkit_engine_tests, flashkit_offload_bench and the CLI (targets only)
#   test      CudaOffload.* (offloaded logits bitwise equal to the resident model: 0/1/3/4/6 of 6 layers, chunked
#             prefill, decode steps, greedy generate, graphs on and off, bf16 and f32; serving's paged steps; the
#             --gpu-memory plan and errors; 30 MB layers whose copies dominate), OffloadPlan.* / OffloadSchedule.*
#             (CPU side); CudaOffload.* again with FLASHKIT_CUDA_PDL=0 (diagnostic); and the CUDA engine's own tests
#             (CudaEngineModel.*, DeviceGreedy.*: must stay green with the layer stamps in the schedule)
#   sanitize  compute-sanitizer memcheck on CudaOffload.* (but the 30 MB-layer test)
#   cli       `flashkit generate --device cuda` on random Llama-3.2-1B weights with --offload-layers 8 and with
#             --gpu-memory 1500M (the report's offload line), and --gpu-memory 256M (refused: one line, exit 2)
#   bench     flashkit_offload_bench: pinned / pageable H2D GB/s, decode and prefill tok/s at 0/25/50/75/100% offloaded
#             on the Llama-3.2-1B shape (random bf16), the CPU backend's decode, the modelled crossover
#   tools/gpu/offload.sh [STAGES...]    default: build test sanitize cli bench
# Results: $OUT/offload.log (RESULT lines at the end), $OUT/offload_bench.json, $OUT/failed.txt. Exit status non-zero
# if any stage failed; stages run whatever happened before them (only a failed configure stops the job).
# carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU, tools/gpu/carried_deps.sh). Split the stages over two calls
# (`build test sanitize`, then `cli bench`) if a cold build leaves too little of the 5 minutes.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/offload.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize cli bench)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
FK=$BUILD/bin/flashkit
CFG=models/configs/llama-3.2-1b.json
{ nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_engine_tests flashkit_offload_bench flashkit_cli \
        -- -k 0 ;;
    test)
      T=$(bin flashkit_engine_tests)
      if [ -n "$T" ]; then
        run offload_tests timeout 180 "$T" --gtest_filter='CudaOffload.*:Offload*'
        grep -q "SKIPPED.*CudaOffload" "$LOG" && { log "CudaOffload skipped: no CUDA device seen"; status=1; }
        # The GEMV streams its weights before its programmatic-dependent-launch wait: the same tests without PDL tell
        # an ordering problem between the copy events and PDL from any other.
        FLASHKIT_CUDA_PDL=0 run offload_tests_nopdl timeout 120 "$T" --gtest_filter='CudaOffload.*' --gtest_brief=1
        run cuda_engine_tests timeout 180 "$T" --gtest_filter='CudaEngineModel.*:DeviceGreedy.*' --gtest_brief=1
      else log "flashkit_engine_tests: not built"; status=1; fi
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    sanitize)
      T=$(bin flashkit_engine_tests)
      [ -n "$T" ] || { log "flashkit_engine_tests: not built"; status=1; continue; }
      run memcheck timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
        --gtest_filter='CudaOffload.*:-CudaOffload.WideLayers*' --gtest_brief=1 ;;
    cli)
      [ -x "$FK" ] || { log "flashkit: not built"; status=1; continue; }
      P=$(seq -s, 1 64)
      for opt in "--offload-layers 8" "--gpu-memory 1500M"; do
        run "generate ${opt}" timeout 120 "$FK" generate -m "$CFG" --random-weights --device cuda --dtype bf16 \
          --prompt-ids "$P" -n 32 --temp 0 --ids --ignore-eos $opt
      done
      "$FK" generate -m "$CFG" --random-weights --device cuda --prompt-ids 1,2,3 -n 2 --ids --gpu-memory 256M \
        > /dev/null 2> "$OUT/too_small.txt"
      rc=$?
      log "generate --gpu-memory 256M: rc=$rc (expected 2): $(head -c 400 "$OUT/too_small.txt")"
      [ $rc -eq 2 ] || status=1
      rm -f "$OUT/too_small.txt"
      grep -E "^offload:" "$LOG" | sed 's/^/RESULT cli /' >> "$LOG" ;;
    bench)
      B=$(bin flashkit_offload_bench)
      [ -n "$B" ] || { log "flashkit_offload_bench: not built"; status=1; continue; }
      FLASHKIT_OFFLOAD_CONFIG=$CFG FLASHKIT_OFFLOAD_OUT="$OUT/offload_bench.json" \
        run bench timeout 240 "$B" ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
grep "^RESULT" "$LOG"
exit $status
