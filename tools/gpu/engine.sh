#!/usr/bin/env bash
# The CUDA model engine on the GPU machine (an H200): build, tests, memcheck, decode/prefill benchmark against
# transformers, and the fidelity check of flashkit's greedy tokens against transformers at full model size.
#   tools/gpu/engine.sh [STAGES...]     default: build test sanitize models bench fidelity hf
# stages:
#   build     cmake + ninja (sm_90a by default: ARCHS=...), the library, the engine tests and the two benchmark
#             executables (bench/engine: flashkit_engine_bench, flashkit_kernel_bench)
#   test      flashkit_engine_tests (every engine test; the CUDA ones need the GPU)
#   sanitize  compute-sanitizer memcheck (and racecheck on the decode attention) on small CUDA engine tests
#   models    random-weight bf16 gemma-3-270m and Llama-3.2-1B checkpoints in $MODELS (transformers save_pretrained)
#   bench     flashkit_engine_bench: 256 greedy tokens after a 128-token prompt (graphs on/off), 4k-token prefill
#   hf        transformers: eager generate, static cache + torch.compile, 4k-token prefill
#   fidelity  flashkit's greedy tokens teacher-forced through transformers (bf16, and f32 with TF32 off)
#   ncu       per-kernel GPU time of decode steps (Nsight Compute, random weights: no checkpoint needed; needs a
#             Firecracker machine, ncu cannot read counters under gVisor) -> engine-ncu.txt
#   opprofile the engine's per-op profile mode (a sync after every op: unfused, no graphs) -> in engine.log
#   kbench    the decode kernels alone (GEMVs of both models vs cuBLAS, decode attention at several context lengths),
#             CUDA-graph timed -> engine-kbench.json (flashkit_kernel_bench)
#   floor     what one dependency level of a decode step costs at minimum (bench/cuda/latency_floor.cu: empty
#             kernels, PDL, a 640-float level, a grid barrier) -> engine-latency-floor.json
#   ab        decode with one switch flipped at a time (FLASHKIT_CUDA_{PDL,FUSE,PINGPONG,LDCS}=0, FLASHKIT_CUDA_PREFETCH=1,
#             FLASHKIT_DEVICE_ARGMAX=0), random weights
#             -> engine-ab.txt
# Results in $OUT (or ./build-gpu-out): engine.log, engine-flashkit.json, engine-hf.json, engine-fidelity.json.
# Exit status: non-zero if any stage failed. Stages of one call share $BUILD and $MODELS, so on a warm machine a
# later call can run only the later stages.
#
# The tokenizer needs PCRE2 and ICU development files, which the GPU machine's image lacks (2026-11-30). Run
#   tools/gpu/engine.sh pack-deps        (here, once: copies headers, libraries and .pc files into .fkdeps/)
# and pass carry=[".fkdeps"] to the device run; this script then points pkg-config and the loader at it.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh
. tools/gpu/steps.sh   # log / run: each step timed and logged to $LOG, failures in $status
if [ "${1:-}" = pack-deps ]; then fk_pack_deps; exit 0; fi
fk_use_deps
OUT=${OUT:-$PWD/build-gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
MODELS=${MODELS:-/tmp/fk-engine-models}
LOG="$OUT/engine.log"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize models bench fidelity hf)
status=0
export PYTHONUNBUFFERED=1
T=$BUILD/tests/engine/flashkit_engine_tests
EB=$BUILD/bench/engine/flashkit_engine_bench   # FLASHKIT_BENCH_* in, [bench] lines out (bench/engine/engine_bench.cpp)
KB=$BUILD/bench/engine/flashkit_kernel_bench   # FLASHKIT_KBENCH_OUT in, [kbench] lines out
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  nvcc --version | tail -1; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || break
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_engine_tests flashkit_engine_bench \
        flashkit_kernel_bench || break
      ;;
    test) run engine_tests "$T" --gtest_brief=1 ;;
    sanitize)
      F='CudaEngineOps.Linear:CudaEngineOps.FusedSequences:CudaEngineOps.SmallOps:CudaEngineOps.DecodeAttention:CudaEngineOps.PrefillAttention:CudaEngineOps.GraphReplayMatchesEagerAndCpu:CudaEngineOps.Argmax:CudaEngineOps.Bf16Intermediates:CudaEngineOps.DecodeAttentionMerges:CudaEngineOps.ResidualPingPong:CudaEngineOps.DecodeAttentionClusterChoice:DeviceGreedy.*Cuda*'
      run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$T" --gtest_filter="$F" --gtest_brief=1
      run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_filter='CudaEngineOps.DecodeAttention:CudaEngineOps.DecodeAttentionMerges:CudaEngineOps.Argmax' --gtest_brief=1
      ;;
    models) run make_models python3 bench/engine/bench_hf_cuda.py make "$MODELS" ;;
    bench)
      FLASHKIT_BENCH_MODELS="$MODELS/gemma-3-270m,$MODELS/llama-3.2-1b" FLASHKIT_BENCH_OUT="$OUT/engine-flashkit.json" \
        run flashkit_bench "$EB"
      grep "^\[bench\]" "$LOG" | tail -8
      ;;
    hf) run hf_bench python3 bench/engine/bench_hf_cuda.py bench "$MODELS" --json "$OUT/engine-hf.json" ;;
    fidelity)
      run fidelity python3 bench/engine/bench_hf_cuda.py fidelity "$MODELS" --flashkit "$OUT/engine-flashkit.json" \
        --json "$OUT/engine-fidelity.json"
      ;;
    ncu)
      for m in gemma-3-270m llama-3.2-1b; do
        log "ncu_$m: ncu on decode steps (random weights)"
        FLASHKIT_BENCH_RANDOM=1 FLASHKIT_BENCH_REPS=1 FLASHKIT_BENCH_NEW=24 FLASHKIT_BENCH_PREFILL=128 \
        FLASHKIT_BENCH_MODELS=models/configs/$m.json ncu --clock-control none --print-units base \
          --kernel-name regex:'gemv_kernel|decode_attn_kernel|embed_kernel' --launch-skip 300 --launch-count 200 \
          --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread --csv \
          "$EB" > "$OUT/ncu_$m.csv" 2>>"$LOG" ||
          { log "ncu_$m: rc=$?"; status=1; }
        python3 - "$OUT/ncu_$m.csv" "$m" <<'PY' | tee -a "$LOG" "$OUT/engine-ncu.txt"
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    print(sys.argv[2], ": no ncu rows (gVisor machine, or ncu failed; see engine.log)"); sys.exit(0)
h = rows[0]; k, n, v, g = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("ID")
per = collections.defaultdict(dict)
for r in rows[1:]:
    per[(r[g], r[k][:60])][r[n]] = float(r[v].replace(",", ""))
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for (i, name), m in per.items():
    key = (name, int(m.get("launch__grid_size", 0)), int(m.get("launch__registers_per_thread", 0)))
    a = agg[key]; a[0] += 1; a[1] += m.get("gpu__time_duration.sum", 0); a[2] += m.get("dram__bytes_read.sum", 0)
print(sys.argv[2], "decode kernels (ncu, serialized: no PDL overlap):")
for (name, grid, regs), (c, t, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print("  %-60s grid %5d regs %3d  x%3d  %7.2f us/launch  %8.2f MB read  %5.2f TB/s" % (
        name, grid, regs, c, t / c / 1e3, b / c / 1e6, b / max(t, 1) / 1e3))
PY
      done
      rm -f "$OUT"/ncu_*.csv
      ;;
    kbench)
      FLASHKIT_KBENCH_OUT="$OUT/engine-kbench.json" \
        run kbench "$KB"
      grep "^\[kbench\]" "$LOG"
      ;;
    floor)
      run floor_build nvcc -O3 -std=c++17 -arch=sm_90a -o "$BUILD/latency_floor" bench/cuda/latency_floor.cu &&
        run floor "$BUILD/latency_floor" "$OUT/engine-latency-floor.json"
      grep "^\[floor\]" "$LOG"
      ;;
    ab)
      for knob in ${AB_KNOBS:-none CUDA_PDL=0 CUDA_FUSE=0 CUDA_PINGPONG=0 CUDA_PREFETCH=1 CUDA_LDCS=0 DEVICE_ARGMAX=0}; do
        extra=(); [ "$knob" != none ] && extra=("FLASHKIT_$knob")
        env "${extra[@]}" FLASHKIT_BENCH_RANDOM=1 FLASHKIT_BENCH_REPS=2 FLASHKIT_BENCH_NEW=128 FLASHKIT_BENCH_PREFILL=512 \
          FLASHKIT_BENCH_MODELS=models/configs/gemma-3-270m.json,models/configs/llama-3.2-1b.json \
          "$EB" 2>&1 | grep "graphs_on" |
          sed "s/^/[ab $knob] /" | tee -a "$LOG" "$OUT/engine-ab.txt"
      done
      ;;
    opprofile)
      FLASHKIT_BENCH_PROFILE=1 FLASHKIT_BENCH_RANDOM=1 FLASHKIT_BENCH_REPS=1 FLASHKIT_BENCH_NEW=32 FLASHKIT_BENCH_PREFILL=256 \
        FLASHKIT_BENCH_MODELS=models/configs/gemma-3-270m.json,models/configs/llama-3.2-1b.json \
        run opprofile "$EB"
      grep "^\[profile\]" "$LOG" | tail -30
      ;;
    *) echo "unknown stage $st"; status=1 ;;
  esac
done
# Summary: decode tok/s against the weight-streaming roofline (bf16 weight bytes / 4.24 TB/s per token).
python3 - "$OUT" <<'PY' 2>&1 | tee -a "$LOG"
import json, os, sys
out = sys.argv[1]
roof = {"gemma-3-270m": 7900.0, "llama-3.2-1b": 1715.0}
try:
    fk = {os.path.basename(os.path.normpath(e["model"])): e for e in json.load(open(os.path.join(out, "engine-flashkit.json")))}
except Exception:
    fk = {}
try:
    hf = json.load(open(os.path.join(out, "engine-hf.json")))["models"]
except Exception:
    hf = {}
for name, r in roof.items():
    f, h = fk.get(name, {}), hf.get(name, {})
    on = f.get("graphs_on", {}).get("decode_tok_s", 0)
    print("%-14s flashkit decode %7.1f tok/s (graphs off %7.1f) = %4.1f%% of roofline %.0f | transformers eager %7.1f, "
          "compiled %7.1f | prefill 4k flashkit %8.0f, transformers %8.0f tok/s" % (
              name, on, f.get("graphs_off", {}).get("decode_tok_s", 0), 100 * on / r, r, h.get("eager_decode_tok_s", 0),
              h.get("compiled_decode_tok_s", 0), f.get("prefill", {}).get("tok_s", 0), h.get("prefill_tok_s", 0)))
PY
grep -E "^== .*rc=" "$LOG"
exit $status
