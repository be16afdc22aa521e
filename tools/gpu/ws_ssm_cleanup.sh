#!/usr/bin/env bash
# Session 14's two cleanups on the device machine (an H200), in ONE call (~4-5 minutes on a cold machine with the
# build):
#   1. the warp-specialized Hopper forward's one-CTA-per-tile kernel (PERSISTENT = false) compiled back to the code it
#      had before the persistent refactor (docs/worklog/attention-cuda.md v19b): the kernel choice tests, the default
#      CUDA grid (every head dim), the ws kernel forced on every path that reaches a PERSISTENT = false instantiation
#      (sm90cfg3: BN 128 with ping-pong; _nopingpong; _bn176 at d128; _bn192 at d64; d256 on the default path) and
#      the persistent paths (unchanged), memcheck + racecheck on small one-CTA-per-tile cases, then the A/B bench one
#      CTA per tile ("ws") against the persistent grid, d64/d128, causal and not, 512/1k/4k tokens
#      (bench/cuda/bench_ws_persist.py). Compare the "ws" column with run s13-2's numbers for the same code (d128
#      non-causal 340 at 512, 460 at 1k, 600 at 4k; causal 168 at 512, 503 at 4k) and run s13-6's for main's grown
#      kernel (308, 449, 588; 155, 488): "ws_ab:" lines.
#   2. the retired selective-scan generations (9, 10: v5; 12; docs/worklog/ssm-scan.md "Retired generations"): the SSM
#      CUDA tests (every remaining generation) and the CPU SSM tests (the refusal of a retired generation), memcheck
#      on the generation tests, then flashkit_ssm_bench 4096: one "ssm gens:" line per seqlen with the generations
#      it ran (0-8, 11, 13), and the "gen13:" lines (production against its baseline 11, same process).
#   tools/gpu/ws_ssm_cleanup.sh        results in $OUT/ws_ssm_cleanup.log (+ failed.txt, ws_ab.txt, ssm_bench.jsonl);
#                                      carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh)
# Each step has its own timeout so a hang costs minutes, not the call.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
LOG="$OUT/ws_ssm_cleanup.log"
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
export FLASHKIT_LIBRARY="$PWD/$BUILD/lib/libflashkit.so" FLASHKIT_PYDIR="$PWD/python"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1
run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit flashkit_cuda_tests flashkit_tests \
  flashkit_ssm_cuda_tests flashkit_ssm_tests flashkit_ssm_bench -- -k 0 || exit 1
A=$(bin flashkit_cuda_tests); T=$(bin flashkit_tests); S=$(bin flashkit_ssm_cuda_tests); C=$(bin flashkit_ssm_tests)
# -- 1. the ws forward
run ws_choice timeout 60 "$T" --gtest_filter='CudaChoice.*:Errors.Sm90WsBnFromEnv' --gtest_brief=1
run ws_grid timeout 240 "$A" --gtest_filter='Grid/*' --gtest_brief=1
run ws_paths timeout 300 "$A" --gtest_brief=1 \
  --gtest_filter='Paths/*sm90cfg3*:Paths/*sm90ws_persist*-*_D200_*:*_D136_*'
F='Paths/*sm90cfg3_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90cfg3_nopingpong_flash_B2_Sq129_Sk257_H4x2_D64_bf16'
F="$F:Paths/*sm90cfg3_bn176_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16:Paths/*sm90cfg3_bn192_flash_B2_Sq129_Sk257_H4x2_D64_causal_bf16"
run ws_memcheck timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$A" --gtest_filter="$F" --gtest_brief=1
run ws_racecheck timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$A" --gtest_brief=1 \
  --gtest_filter='Paths/*sm90cfg3_flash_B1_Sq200_Sk100_H4x4_D128_causal_bf16'
run ws_ab timeout 150 python3 bench/cuda/bench_ws_persist.py --out "$OUT" --dims 64,128 --seqlens 512,1024,4096
grep -E "^persist d" "$LOG" | sed 's/^persist /ws_ab: /' | tee "$OUT/ws_ab.txt"
# -- 2. the selective scan without its retired generations
run ssm_cuda_tests timeout 180 "$S" --gtest_brief=1
run ssm_cpu_tests timeout 120 "$C" --gtest_brief=1
run ssm_memcheck timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$S" --gtest_brief=1 \
  --gtest_filter='Shapes/CudaScanGenerations.*:CudaScanV4Lean.*'
P=$(bin flashkit_ssm_bench)
run ssm_bench timeout 120 sh -c "\"$P\" 4096 > \"$OUT/ssm_bench.jsonl\""
python3 - "$OUT/ssm_bench.jsonl" <<'EOF' | tee -a "$LOG"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l) if l.strip() else {}
    if r.get("op") != "scan_fwd":
        continue
    g = {x["generation"]: (x["kernel"], x["ms"]) for x in r["generations"]}
    print("ssm gens: seqlen %5d  generations %s" % (r["seqlen"], ",".join(str(k) for k in sorted(g))))
    if 11 in g and 13 in g:
        print("gen13: seqlen %5d  %s %.3f ms  lean (11) %.3f ms -> %.3fx" % (
            r["seqlen"], g[13][0].replace("cuda.scan.", ""), g[13][1], g[11][1], g[11][1] / g[13][1]))
EOF
grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -60 > "$OUT/failed.txt"
grep -E "^== .*rc=" "$LOG"
log "ws_ssm_cleanup: status=$status"
exit $status
