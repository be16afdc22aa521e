#!/usr/bin/env bash
# The CUDA selective scan (issue 18) on the GPU machine (an H200), one call, under 5 minutes with a warm build-gpu/
# (the same build directory as tools/gpu/mamba.sh; cold, the library's attention kernels dominate the build):
#   build     the CUDA library, flashkit_ssm_cuda_tests, flashkit_ssm_tests, flashkit_ssm_bench (targets only)
#   test      the SSM CUDA tests (forward: every kernel generation v1 / v2 / v3 (3 variants) / v4 (5 variants, lean
#             (generation 11) and pipelined (13) included), v4 on odd shapes with both copy paths and the state
#             carried into decode steps, decode step, conv1d;
#             backward vs the f64 reference, determinism, seqlen 0, central differences of the CUDA forward) and the
#             CPU SSM tests
#   sanitize  compute-sanitizer memcheck on the backward, forward-generation and v4 tests, racecheck on small shapes of
#             all three (v3, v4 and the backward share tiles through shared memory; v4 fills them with cp.async);
#             the generation, v4 and lean cases run generations 11 and 13 too
#   regs      registers / spills / shared memory per SSM kernel (cuobjdump -res-usage) into the log
#   sass      (not in the default list) SASS of v4_npt4, of its lean generation 11 and of 13 (lean, pipelined):
#             sass-scan-v4.txt, sass-scan-v4-lean.txt, sass-scan-v4-pipe.txt, their instruction and MUFU.EX2 counts in
#             the log
#   bench     flashkit_ssm_bench 32768: batch 8, d_inner 1536, d_state 16, seqlen 1k..32k: each generation's ms and
#             fraction of the 4.24 TB/s copy ceiling, the backward's (both generations), flash attention forward at
#             matched width; the decode step; then $OUT/ssm_cuda_summary.json (one row per seqlen) and one "v4:" line
#             per seqlen: the faster v4 variant against the 70% goal, production and attention; one "lean:" line per
#             seqlen (generation 11,
#             v4_npt4 with less per-chunk overhead, against v4_npt4 timed in the same process: ms, fraction of the
#             copy ceiling, speed-up) and a last "lean: beats|does not beat v4_npt4 at every length" line; one
#             "gen13:" line per seqlen (generation 13, lean with its chunk phases software-pipelined, production,
#             against lean timed in the same process) and a last "gen13: beats|does not beat lean at every length"
#             line. The retired generations (9, 10: v5; 12: two channels per thread) are in dev/cuda/ssm/
#   decode    the Mamba decode step against the weight-streaming roofline (issue 18: within 1.5x at batch 1): a
#             random model at mamba-130m's shape made by transformers (tools/gpu/make_mamba_decode_model.py, kept in
#             $BUILD/mamba-130m-random), then `flashkit_ssm_bench decode DIR`: greedy decode ms/token on CUDA against
#             its stored weight bytes at 4.24 TB/s; $OUT/ssm_decode.jsonl and one "decode:" line per model.
#             MAMBA_DECODE_SIZES="130m 1.4b 2.8b" measures the other published shapes too (bf16 files)
#   profile   the same model through `flashkit generate --profile` on CUDA (eager per-op timing, 64 tokens): where a
#             Mamba decode step's time goes, per op kind; $OUT/mamba_profile.json (and the op split in the log)
#   fused     the fused Mamba decode step (issue 18; engine/mamba_fusion.hpp: 3 kernels per layer instead of 6): builds
#             flashkit_engine_tests and flashkit_ssm_bench, runs the Mamba engine tests (the fusion choice, a layer's
#             decode steps vs f64 with fusion on and off on odd shapes, whole-model decode logits fused vs unfused,
#             CUDA vs CPU; the mixer kernel at every block width x cluster size), compute-sanitizer memcheck on the
#             CUDA ones, registers of the two fused kernels, then the decode roofline of the mamba-130m-shaped model
#             in one run with fusion off (FLASHKIT_CUDA_FUSE=0) and on with the mixer's block width automatic and
#             forced to 32, 16, 8 channels (FLASHKIT_CUDA_MAMBA_CHANNELS, read by the bench's default tuning):
#             $OUT/ssm_decode_fused.jsonl (each row tagged "mixer_channels") and "fused decode:" lines
#   mixerncu  (not in the default list) Nsight Compute durations of the mixer-step kernel alone at each block width
#             (32, 16, 8; 48 decode launches each, cold L2 as in decode) in the same model's decode:
#             $OUT/ncu_mixer_w*.csv and one "mixer ncu:" line per width
#   layerncu  (not in the default list) Nsight Compute on 4 layers of one decode token of a larger random model
#             (MAMBA_NCU_SIZE, default 2.8b; made as in decode): each kernel's duration, DRAM bytes and throughput,
#             grid, occupancy: $OUT/ncu_layer_$SIZE.txt and one "layer ncu:" line per kernel
#   mambadec  (not in the default list; issue 18 Required 5, session 13: the balanced GEMV plan and the 64-channel
#             mixer, docs/worklog/mamba-decode-cuda.md v3) in one call, the parts in this order (MAMBADEC_PARTS
#             picks some: "build test decode ncu attn"):
#               build   flashkit_engine_tests, flashkit_ssm_bench, flashkit_engine_bench
#               test    the Mamba engine tests, the GEMV plan tests (pure and on the GPU: every plan the same bits),
#                       the mixer at every width incl. 64 (bits equal across widths); memcheck on the small kernel
#                       tests
#               decode  `flashkit_ssm_bench decode` at 130m, 1.4b, 2.8b (MAMBADEC_SIZES), each with the change
#                       off ("base": FLASHKIT_CUDA_GEMV_PLAN=legacy, mixer width 32 at 2.8b, as before) and on
#                       ("new": both automatic), at 2.8b also each half alone ("gemv", "mixer"):
#                       $OUT/mambadec_decode.jsonl and "mambadec decode:" lines
#               ncu     Nsight Compute durations of the 12 kernels of 4 layers of a 2.8b decode token, base and new:
#                       "mambadec ncu:" lines
#               attn    flashkit_engine_bench decode of a random Llama-3.2-1B (the GEMV is shared) with the plan
#                       legacy, auto, balanced: "mambadec attn:" lines
#             ~4-5 min on a warm machine whose build-gpu/ and mamba-{1.4b,2.8b}-random exist; otherwise split it:
#             MAMBADEC_PARTS="build test" first, then MAMBADEC_PARTS="decode ncu attn" (the 2.8b model: ~60-90 s)
#   tools/gpu/ssm_cuda.sh [STAGES...]     default: build test sanitize regs bench decode fused
# Results: $OUT/ssm_cuda.log, $OUT/ssm_bench.jsonl, $OUT/ssm_cuda_summary.json, $OUT/ssm_decode.jsonl,
# $OUT/ssm_decode_fused.jsonl, $OUT/failed.txt. Exit status non-zero
# if any stage failed; every stage runs whatever happened before it (only a failed configure stops the job).
# carry=[".fkdeps.tar.xz"] (the tokenizer's PCRE2/ICU that libflashkit links, tools/gpu/carried_deps.sh pack).
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-gpu-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-90a-real}
LOG="$OUT/ssm_cuda.log"
STAGES=("$@"); [ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize regs bench decode fused)
status=0
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } >> "$LOG" 2>&1
for st in "${STAGES[@]}"; do
  case $st in
    build)
      run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      run build cmake --build "$BUILD" -j"$(nproc)" --target flashkit_ssm_cuda_tests flashkit_ssm_tests \
        flashkit_ssm_bench -- -k 0 ;;
    test)
      for b in flashkit_ssm_cuda_tests flashkit_ssm_tests; do
        p=$(bin $b); [ -n "$p" ] || { log "$b: not built"; status=1; continue; }
        run "$b" timeout 240 "$p" --gtest_brief=1
      done
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    sanitize)
      p=$(bin flashkit_ssm_cuda_tests); [ -n "$p" ] || { log "flashkit_ssm_cuda_tests: not built"; status=1; continue; }
      MF='Shapes/CudaScanBackward.*:CudaScanBackward.Deterministic:CudaScanBackward.EmptySequence*'
      run memcheck_ssm timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$p" \
        --gtest_filter="$MF:Shapes/CudaScanGenerations.*:Shapes/CudaScanV4.*:CudaScanV4Continuation.*:CudaScanV4Lean.*" \
        --gtest_brief=1
      RF='Shapes/CudaScanBackward.MatchesReference/1:Shapes/CudaScanBackward.MatchesReference/6'
      # v4: 4-byte copies over 2 chunks (b2 L17 Di19), 16-byte copies over 7
      # chunks through the 4-stage ring (b3 L100)
      V4F='Shapes/CudaScanV4.MatchesReference/1:Shapes/CudaScanV4.MatchesReference/2'
      run racecheck_ssm timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$p" \
        --gtest_filter="$RF:Shapes/CudaScanGenerations.BothMatchReference/5:$V4F" --gtest_brief=1
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt" ;;
    regs)
      log "regs: cuobjdump -res-usage, SSM kernels"
      cuobjdump -res-usage "$BUILD/lib/libflashkit_core.so" 2>> "$LOG" \
        | grep -A1 -E "Function .*(scan|checkpoint|reverse|reduce_bc|reduce_channel)" | tee -a "$LOG" ;;
    sass)
      # SASS of the production forward scan (v4, 4 states per thread): what the recurrence costs per state step.
      cuobjdump -sass "$BUILD/lib/libflashkit_core.so" 2>> "$LOG" | awk '/Function : .*scan_v4_kernel.*Li4ELi16E/{on=1}
        on && /Function : / && !/scan_v4_kernel.*Li4ELi16E/{on=0} on' > "$OUT/sass-scan-v4.txt"
      log "sass: $(wc -l < "$OUT/sass-scan-v4.txt") lines of scan_v4 SASS in sass-scan-v4.txt"
      # generation 11 (v4_npt4_lean) beside it: the per-chunk overhead it cuts
      cuobjdump -sass "$BUILD/lib/libflashkit_core.so" 2>> "$LOG" | awk '/Function : .*scan_v4_lean_kernel.*Li4ELi16E/{on=1}
        on && /Function : / && !/scan_v4_lean_kernel.*Li4ELi16E/{on=0} on' > "$OUT/sass-scan-v4-lean.txt"
      # generation 13 (lean, chunk phases pipelined): one barrier per chunk, the three phases in one basic block
      cuobjdump -sass "$BUILD/lib/libflashkit_core.so" 2>> "$LOG" | awk '/Function : .*scan_v4_pipe_kernel/{on=1}
        on && /Function : / && !/scan_v4_pipe_kernel/{on=0} on' > "$OUT/sass-scan-v4-pipe.txt"
      for f in sass-scan-v4 sass-scan-v4-lean sass-scan-v4-pipe; do
        python3 - "$OUT/$f.txt" "$f" <<'EOF' | tee -a "$LOG"
import re, sys
# The first function of a cuobjdump -sass listing: its instructions, and those of its largest loop (the chunk loop:
# the longest span from a backward BRA's target to the BRA), with the recurrence's MUFU.EX2 and the cp.async LDGSTS.
ins, seen = [], 0
for l in open(sys.argv[1]):
    if 'Function :' in l:
        seen += 1
        if seen > 1: break
    m = re.match(r'\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;', l)
    if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
addr = {a: i for i, (a, _) in enumerate(ins)}
loops = []
for i, (a, t) in enumerate(ins):
    b = re.search(r'\bBRA\s+(?:`\()?(0x[0-9a-f]+)', t)
    if b and int(b.group(1), 16) < a and int(b.group(1), 16) in addr: loops.append((addr[int(b.group(1), 16)], i))
s, e = max(loops, key=lambda x: x[1] - x[0]) if loops else (0, -1)
body = [t for _, t in ins[s:e + 1]]
print("%s: %d SASS instructions, chunk loop %d (MUFU.EX2 %d, LDGSTS %d, IMAD.WIDE %d)" % (
    sys.argv[2], len(ins), len(body), sum('MUFU.EX2' in x for x in body), sum('LDGSTS' in x for x in body),
    sum('IMAD.WIDE' in x for x in body)))
EOF
      done
      grep -oE "^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+" "$OUT/sass-scan-v4.txt" | awk '{print $2}' | sed 's/\..*//' \
        | sort | uniq -c | sort -rn | head -25 | tee -a "$LOG" ;;
    bench)
      p=$(bin flashkit_ssm_bench)
      [ -n "$p" ] || { log "flashkit_ssm_bench: not built"; status=1; continue; }
      log "bench: $p ${SSM_BENCH_MAX:-32768}"  # SSM_BENCH_MAX: the longest sequence (a shorter run for A/Bs)
      timeout 200 "$p" "${SSM_BENCH_MAX:-32768}" > "$OUT/ssm_bench.jsonl" 2>> "$LOG"; rc=$?
      log "bench: rc=$rc"; [ $rc -ne 0 ] && status=1
      cat "$OUT/ssm_bench.jsonl" >> "$LOG"
      python3 - "$OUT/ssm_bench.jsonl" "$OUT/ssm_cuda_summary.json" <<'EOF' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = []
NEW_GENS = [("gen13", "cuda.scan.v4.n16.split4.tc16.s5.lean.pipe")]
NEW_ENUM = {"gen13": "v4_npt4_lean_pipe"}
for r in rows:
    if r.get("op") != "scan_fwd":
        continue
    g = {x["kernel"]: (x["ms"], x["of_copy_ceiling"]) for x in r["generations"]}
    out.append({"seqlen": r["seqlen"], "generations": g, "bwd_ms": r["bwd_ms"],
                "bwd_of_copy_ceiling": r["bwd_of_copy_ceiling"], "bwd1_ms": r["bwd1_ms"],
                "bwd1_of_copy_ceiling": r["bwd1_of_copy_ceiling"], "attention_fwd_ms": r["attention_fwd_ms"]})
    print("seqlen %6d  " % r["seqlen"] + "  ".join("%s %.3f ms %4.1f%%" % (k.replace("cuda.scan.", ""), ms, 100 * f)
                                                  for k, (ms, f) in g.items())
          + "  | bwd %.3f ms %4.1f%%  bwd1 %.3f ms %4.1f%%  | attention %.3f ms" % (
              r["bwd_ms"], 100 * r["bwd_of_copy_ceiling"], r["bwd1_ms"], 100 * r["bwd1_of_copy_ceiling"],
              r["attention_fwd_ms"]))
    v4 = {k: v for k, v in g.items() if ".v4." in k}
    if v4:
        k4, (ms4, f4) = min(v4.items(), key=lambda kv: kv[1][0])
        out[-1]["v4_best"] = {"kernel": k4, "ms": ms4, "of_copy_ceiling": f4,
                              "vs_production": r["ms"] / ms4, "vs_attention": r["attention_fwd_ms"] / ms4}
        print("v4: seqlen %6d  best %s %.3f ms = %4.1f%% of the copy ceiling (goal 70%%: %s)  %.2fx production (%s)"
              "  %.2fx attention" % (r["seqlen"], k4.replace("cuda.scan.", ""), ms4, 100 * f4,
                                     "met" if f4 >= 0.70 else "not met", r["ms"] / ms4,
                                     r["kernel"].replace("cuda.scan.", ""), r["attention_fwd_ms"] / ms4))
    npt4 = [ms for k, (ms, f) in g.items() if k == "cuda.scan.v4.n16.split4.tc16.s4"]
    # generation 11 (v4_npt4_lean: v4_npt4 with less per-chunk overhead) against v4_npt4 (generation 6), same process
    lean = [(ms, f) for k, (ms, f) in g.items() if k == "cuda.scan.v4.n16.split4.tc16.s4.lean"]
    if lean and npt4:
        msl, fl = lean[0]
        out[-1]["lean"] = {"ms": msl, "of_copy_ceiling": fl, "v4_npt4_ms": npt4[0], "vs_v4_npt4": npt4[0] / msl}
        print("lean: seqlen %6d  v4.n16.split4.tc16.s4.lean %.3f ms = %4.1f%% of the copy ceiling (goal 70%%: %s)"
              "  v4_npt4 %.3f ms = %4.1f%%  -> %.3fx v4_npt4" % (
                  r["seqlen"], msl, 100 * fl, "met" if fl >= 0.70 else "not met", npt4[0],
                  100 * g["cuda.scan.v4.n16.split4.tc16.s4"][1], npt4[0] / msl))
    # generation 13 (lean, chunk phases pipelined) against generation 11 (v4_npt4_lean), timed in the same process
    for tag, k12 in NEW_GENS:
        if lean and k12 in g:
            msl, fl = lean[0]
            ms12, f12 = g[k12]
            out[-1][tag] = {"ms": ms12, "of_copy_ceiling": f12, "lean_ms": msl, "vs_lean": msl / ms12}
            print("%s: seqlen %6d  %s %.3f ms = %4.1f%% of the copy ceiling (goal 70%%: %s)"
                  "  lean %.3f ms = %4.1f%%  -> %.3fx lean" % (
                      tag, r["seqlen"], k12.replace("cuda.scan.", ""), ms12, 100 * f12,
                      "met" if f12 >= 0.70 else "not met", msl, 100 * fl, msl / ms12))
sl = [o["lean"]["vs_v4_npt4"] for o in out if "lean" in o]
if sl:
    win = all(x > 1 for x in sl)
    print("lean: %s v4_npt4 at every length (%.3fx..%.3fx): %s" % (
        "beats" if win else "does not beat", min(sl), max(sl),
        "promotable (kProductionScan = ScanKernel::v4_npt4_lean)" if win else "keep v4_npt4"))
for tag, k12 in NEW_GENS:
    s12 = [o[tag]["vs_lean"] for o in out if tag in o]
    if s12:
        win = all(x > 1 for x in s12)
        print("%s: %s lean at every length (%.3fx..%.3fx): %s" % (
            tag, "beats" if win else "does not beat", min(s12), max(s12),
            "promotable (kProductionScan = ScanKernel::%s)" % NEW_ENUM[tag] if win else "keep v4_npt4_lean"))
    else:
        print("%s: no rows (the generation or lean missing from the bench output)" % tag)
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOF
      ;;
    decode)
      p=$(bin flashkit_ssm_bench)
      [ -n "$p" ] || { log "flashkit_ssm_bench: not built"; status=1; continue; }
      : > "$OUT/ssm_decode.jsonl"
      for size in ${MAMBA_DECODE_SIZES:-130m}; do
        M="$BUILD/mamba-$size-random"
        [ -f "$M/config.json" ] || run decode_model_$size timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" "$size"
        log "decode: $p decode $M"
        timeout 180 "$p" decode "$M" >> "$OUT/ssm_decode.jsonl" 2>> "$LOG"; rc=$?
        log "decode $size: rc=$rc"; [ $rc -ne 0 ] && status=1
      done
      cat "$OUT/ssm_decode.jsonl" >> "$LOG"
      python3 - "$OUT/ssm_decode.jsonl" <<'EOF' | tee -a "$LOG"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("decode: %d layers, hidden %d, %s weights %.1f MB: %.4f ms/token, roofline %.4f ms -> %.2fx "
          "(goal <= 1.5x: %s)"
          % (r["layers"], r["hidden"], r["weight_dtype"], r["device_weight_bytes"] / 1e6, r["ms_per_token"],
             r["weight_roofline_ms"], r["of_roofline"], "met" if r["of_roofline"] <= 1.5 else "not met"))
EOF
      ;;
    profile)
      run build_cli cmake --build "$BUILD" -j"$(nproc)" --target flashkit_cli -- -k 0
      M="$BUILD/mamba-130m-random"
      [ -f "$M/config.json" ] || run decode_model timeout 150 python3 tools/gpu/make_mamba_decode_model.py "$M"
      run profile timeout 120 "$BUILD/bin/flashkit" generate -m "$M" --device cuda --prompt-ids 1,2,3,4,5,6,7,8 \
        -n 64 --ids --profile --stats-json "$OUT/mamba_profile.json"
      grep -A40 -i "op split\|by op\|profile" "$LOG" | tail -45 ;;
    fused)
      if [ ! -f "$BUILD/build.ninja" ]; then
        run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
          -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
      fi
      run build_fused cmake --build "$BUILD" -j"$(nproc)" --target flashkit_engine_tests flashkit_ssm_bench -- -k 0
      p=$(bin flashkit_engine_tests)
      if [ -z "$p" ]; then log "flashkit_engine_tests: not built"; status=1; continue; fi
      CF='Shapes/CudaMambaStep.*:Inner/CudaMambaStepKernel.*:CudaMambaStepLauncher.*:CudaMambaFusion.*'  # CUDA ones
      run mamba_fusion_tests timeout 150 "$p" --gtest_brief=1 --gtest_filter="MambaFusionChoice.*:$CF:MambaCuda.*:Mamba.*"
      run memcheck_mamba_fusion timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$p" --gtest_brief=1 \
        --gtest_filter="$CF"
      grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
      log "regs: the fused Mamba kernels (mixer step; the one-row GEMVs that carry the conv epilogue)"
      cuobjdump -res-usage "$BUILD/lib/libflashkit.so" 2>> "$LOG" \
        | grep -A1 -E "Function .*(mamba_step_kernel|gemv_kernelILi1ELi[12]EL)" | tee -a "$LOG"
      b=$(bin flashkit_ssm_bench)
      if [ -z "$b" ]; then log "flashkit_ssm_bench: not built"; status=1; continue; fi
      M="$BUILD/mamba-130m-random"
      [ -f "$M/config.json" ] || run decode_model timeout 150 python3 tools/gpu/make_mamba_decode_model.py "$M"
      : > "$OUT/ssm_decode_fused.jsonl"
      # fusion off, then on with the mixer's width automatic and forced: "fuse:channels" (auto: mamba_step_channels)
      for cfg in 0:auto 1:auto 1:32 1:16 1:8; do
        f=${cfg%%:*} w=${cfg##*:}
        log "fused decode: FLASHKIT_CUDA_FUSE=$f FLASHKIT_CUDA_MAMBA_CHANNELS=$w $b decode $M"
        r=$(FLASHKIT_CUDA_FUSE=$f FLASHKIT_CUDA_MAMBA_CHANNELS=$w timeout 90 "$b" decode "$M" 2>> "$LOG") \
          || { log "fused decode: FLASHKIT_CUDA_FUSE=$f FLASHKIT_CUDA_MAMBA_CHANNELS=$w failed"; status=1; continue; }
        printf '%s\n' "$r" | python3 -c 'import json,sys; w=sys.argv[1]
for l in sys.stdin:
    if l.strip(): r=json.loads(l); r["mixer_channels"]=w; print(json.dumps(r))' "$w" >> "$OUT/ssm_decode_fused.jsonl"
      done
      cat "$OUT/ssm_decode_fused.jsonl" >> "$LOG"
      python3 - "$OUT/ssm_decode_fused.jsonl" <<'EOF' | tee -a "$LOG"
import json, sys
rows = {}
for r in map(json.loads, filter(str.strip, open(sys.argv[1]))):
    rows["off" if not r.get("cuda_fuse") else r.get("mixer_channels", "auto")] = r
for k in ("off", "auto", "32", "16", "8"):
    if k in rows:
        r = rows[k]
        print("fused decode: %-22s %.4f ms/token, roofline %.4f ms -> %.2fx (goal <= 1.5x: %s)"
              % ("fusion off" if k == "off" else "fusion on, mixer " + (k if k == "auto" else "w" + k),
                 r["ms_per_token"], r["weight_roofline_ms"], r["of_roofline"],
                 "met" if r["of_roofline"] <= 1.5 else "not met"))
us = lambda r: 1e3 * r["ms_per_token"] / r["layers"]
if "auto" in rows and "off" in rows:
    on, off = rows["auto"], rows["off"]
    print("fused decode: %.2fx faster with fusion (%.1f -> %.1f us per layer)"
          % (off["ms_per_token"] / on["ms_per_token"], us(off), us(on)))
if "32" in rows:
    for k in ("16", "8"):
        if k in rows:
            print("fused decode: mixer w%s vs w32: %.3fx (%.2f -> %.2f us per layer)"
                  % (k, rows["32"]["ms_per_token"] / rows[k]["ms_per_token"], us(rows["32"]), us(rows[k])))
EOF
      ;;
    mixerncu)
      b=$(bin flashkit_ssm_bench)
      if [ -z "$b" ]; then log "flashkit_ssm_bench: not built"; status=1; continue; fi
      M="$BUILD/mamba-130m-random"
      [ -f "$M/config.json" ] || run decode_model timeout 150 python3 tools/gpu/make_mamba_decode_model.py "$M"
      for w in 32 16 8; do
        FLASHKIT_CUDA_MAMBA_CHANNELS=$w run "ncu_mixer_w$w" timeout 150 ncu --clock-control none \
          -k regex:mamba_step_kernel -c 48 --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu_mixer_w$w.csv" \
          "$b" decode "$M"
      done
      python3 - "$OUT" <<'EOF' | tee -a "$LOG"
import csv, os, statistics, sys
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
for w in ("32", "16", "8"):
    p = os.path.join(sys.argv[1], "ncu_mixer_w%s.csv" % w)
    if not os.path.exists(p):
        print("mixer ncu: w%s: no csv" % w)
        continue
    lines = [l for l in open(p) if l.startswith('"')]  # the CSV rows (ncu's own ==PROF== lines skipped)
    us, shape = [], ""
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            us.append(float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", ""), 1.0))
            shape = "%s x %s" % (r.get("Grid Size", "?"), r.get("Block Size", "?"))
    if us:
        print("mixer ncu: w%-2s grid x block %s: median %.2f us (min %.2f, max %.2f) over %d launches"
              % (w, shape, statistics.median(us), min(us), max(us), len(us)))
    else:
        print("mixer ncu: w%s: no durations in %s" % (w, p))
EOF
      ;;
    layerncu)
      b=$(bin flashkit_ssm_bench)
      if [ -z "$b" ]; then log "flashkit_ssm_bench: not built"; status=1; continue; fi
      size=${MAMBA_NCU_SIZE:-2.8b}
      M="$BUILD/mamba-$size-random"
      [ -f "$M/config.json" ] || run decode_model_$size timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" "$size"
      # the decode kernels only (prefill runs GEMMs): skip the first 64 tokens' worth, then 4 layers (12 kernels)
      run "ncu_layer_$size" timeout 240 ncu --clock-control none -k 'regex:gemv_kernel|mamba_step_kernel' -s 12288 -c 12 \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
        --metrics dram__bytes_read.sum,gpu__time_duration.sum --log-file "$OUT/ncu_layer_$size.txt" "$b" decode "$M"
      grep -E "^  [a-z_ ]*[a-zA-Z_:<>, 0-9]*\(|Duration|DRAM Throughput|dram__bytes_read.sum|Grid Size|Achieved Occupancy|Registers Per" \
        "$OUT/ncu_layer_$size.txt" | sed 's/^/layer ncu: /' | tee -a "$LOG" | head -120 ;;
    mambadec)
      parts=" ${MAMBADEC_PARTS:-build test decode ncu attn} "
      if [[ $parts == *" build "* ]]; then
        if [ ! -f "$BUILD/build.ninja" ]; then
          run configure cmake -S . -B "$BUILD" -G Ninja -DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
            -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || exit 1
        fi
        run build_mambadec cmake --build "$BUILD" -j"$(nproc)" --target flashkit_engine_tests flashkit_ssm_bench \
          flashkit_engine_bench -- -k 0
      fi
      t=$(bin flashkit_engine_tests) b=$(bin flashkit_ssm_bench) e=$(bin flashkit_engine_bench)
      if [[ $parts == *" test "* ]]; then
        if [ -n "$t" ]; then
          CF='Shapes/CudaMambaStep.*:Inner/CudaMambaStepKernel.*:CudaMambaStepLauncher.*:CudaMambaFusion.*:CudaGemvPlan.*'
          run mambadec_tests timeout 150 "$t" --gtest_brief=1 \
            --gtest_filter="MambaFusionChoice.*:GemvPlan.*:$CF:MambaCuda.*:Mamba.*"
          run mambadec_memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" --gtest_brief=1 \
            --gtest_filter='Shapes/CudaMambaStep.*:Inner/CudaMambaStepKernel.*/0:CudaMambaStepLauncher.*'
          grep -E "^\[  FAILED  \]" "$LOG" | sort -u | tail -40 > "$OUT/failed.txt"
          log "regs: mixer step and the one-row GEMVs (lean ones: ..Li3EE)"
          cuobjdump -res-usage "$BUILD/lib/libflashkit.so" 2>> "$LOG" \
            | grep -A1 -E "Function .*(mamba_step_kernelILi64|gemv_kernelILi1ELi[12]ELi[458]ELb0)" | tee -a "$LOG"
        else log "flashkit_engine_tests: not built"; status=1; fi
      fi
      # A config is "name|FLASHKIT_CUDA_GEMV_PLAN|FLASHKIT_CUDA_MAMBA_CHANNELS"
      md_configs() {
        case $1 in
          2.8b) echo "base|legacy|32 gemv|auto|32 mixer|legacy|auto new|auto|auto" ;;
          *) echo "base|legacy|auto new|auto|auto" ;;
        esac
      }
      if [[ $parts == *" decode "* ]]; then
        : > "$OUT/mambadec_decode.jsonl"
        for size in ${MAMBADEC_SIZES:-130m 1.4b 2.8b}; do
          M="$BUILD/mamba-$size-random"
          [ -f "$M/config.json" ] || run decode_model_$size timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" "$size"
          [ -n "$b" ] || { log "flashkit_ssm_bench: not built"; status=1; break; }
          for cfg in $(md_configs "$size"); do
            IFS='|' read -r name plan ch <<< "$cfg"
            log "mambadec decode $size $name: FLASHKIT_CUDA_GEMV_PLAN=$plan FLASHKIT_CUDA_MAMBA_CHANNELS=$ch"
            r=$(FLASHKIT_CUDA_GEMV_PLAN=$plan FLASHKIT_CUDA_MAMBA_CHANNELS=$ch timeout 120 "$b" decode "$M" 2>> "$LOG") \
              || { log "mambadec decode $size $name: failed"; status=1; continue; }
            printf '%s\n' "$r" | python3 -c 'import json,sys
for l in sys.stdin:
    if l.strip(): r=json.loads(l); r["size"]=sys.argv[1]; r["config"]=sys.argv[2]; print(json.dumps(r))' \
              "$size" "$name" >> "$OUT/mambadec_decode.jsonl"
          done
        done
        cat "$OUT/mambadec_decode.jsonl" >> "$LOG"
        python3 - "$OUT/mambadec_decode.jsonl" <<'EOF2' | tee -a "$LOG"
import json, sys
rows = {}
for r in map(json.loads, filter(str.strip, open(sys.argv[1]))):
    rows[(r["size"], r["config"])] = r
us = lambda r: 1e3 * r["ms_per_token"] / r["layers"]
for (size, cfg), r in rows.items():
    print("mambadec decode: %-5s %-5s %.4f ms/token, roofline %.4f ms -> %.2fx (goal <= 1.5x: %s), %.1f us per layer"
          % (size, cfg, r["ms_per_token"], r["weight_roofline_ms"], r["of_roofline"],
             "met" if r["of_roofline"] <= 1.5 else "not met", us(r)))
for size in dict.fromkeys(s for s, _ in rows):
    base = rows.get((size, "base"))
    for cfg in ("gemv", "mixer", "new"):
        r = rows.get((size, cfg))
        if base and r:
            print("mambadec decode: %-5s %-5s vs base: %.3fx (%.1f -> %.1f us per layer)"
                  % (size, cfg, base["ms_per_token"] / r["ms_per_token"], us(base), us(r)))
EOF2
      fi
      if [[ $parts == *" ncu "* ]] && [ -n "$b" ]; then
        M="$BUILD/mamba-2.8b-random"
        [ -f "$M/config.json" ] || run decode_model_2.8b timeout 240 python3 tools/gpu/make_mamba_decode_model.py "$M" 2.8b
        for cfg in "base|legacy|32" "new|auto|auto"; do
          IFS='|' read -r name plan ch <<< "$cfg"
          # 4 layers (12 kernels) of a decode token after 64 tokens' worth of launches, durations and DRAM bytes only
          FLASHKIT_CUDA_GEMV_PLAN=$plan FLASHKIT_CUDA_MAMBA_CHANNELS=$ch run "mambadec_ncu_$name" timeout 150 \
            ncu --clock-control none -k 'regex:gemv_kernel|mamba_step_kernel' -s 12288 -c 12 \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,launch__block_size \
            --csv --log-file "$OUT/mambadec_ncu_$name.csv" "$b" decode "$M"
        done
        python3 - "$OUT" <<'EOF2' | tee -a "$LOG"
import csv, collections, os, re, sys
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
for name in ("base", "new"):
    p = os.path.join(sys.argv[1], "mambadec_ncu_%s.csv" % name)
    if not os.path.exists(p):
        print("mambadec ncu: %s: no csv" % name); continue
    per = collections.OrderedDict()
    for r in csv.DictReader(l for l in open(p) if l.startswith('"')):
        k = (r["ID"], re.sub(r"\(anonymous namespace\)::|unnamed>::|^void ", "", r["Kernel Name"]).split("(")[0])
        v = float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", ""), 1.0)
        per.setdefault(k, {})[r["Metric Name"]] = v
    total = 0.0
    for (i, kern), m in per.items():
        d, mb = m.get("gpu__time_duration.sum", 0), m.get("dram__bytes_read.sum", 0)
        total += d
        print("mambadec ncu: %-4s %-42s grid %5d x %3d regs %3d  %6.2f us  %6.2f MB  %5.2f TB/s" % (
            name, kern[:42], m.get("launch__grid_size", 0), m.get("launch__block_size", 0),
            m.get("launch__registers_per_thread", 0), d, mb, mb / max(d, 1e-9)))
    if per:
        print("mambadec ncu: %-4s %d kernels, %.1f us serialized = %.1f us per layer" % (
            name, len(per), total, total / max(1, len(per) // 3)))
EOF2
        tar -czf "$OUT/mambadec_ncu.tgz" -C "$OUT" $(cd "$OUT" && ls mambadec_ncu_*.csv 2>/dev/null) 2>> "$LOG" && \
          rm -f "$OUT"/mambadec_ncu_*.csv
      fi
      if [[ $parts == *" attn "* ]]; then
        if [ -n "$e" ]; then
          for plan in legacy auto balanced; do
            FLASHKIT_CUDA_GEMV_PLAN=$plan FLASHKIT_BENCH_RANDOM=1 FLASHKIT_BENCH_REPS=2 FLASHKIT_BENCH_NEW=128 \
              FLASHKIT_BENCH_PREFILL=512 FLASHKIT_BENCH_MODELS=models/configs/llama-3.2-1b.json \
              timeout 120 "$e" 2>> "$LOG" | grep "graphs_on" | sed "s/^/mambadec attn: plan $plan: /" | tee -a "$LOG"
          done
        else log "flashkit_engine_bench: not built"; status=1; fi
      fi
      ;;
    *) log "unknown stage $st"; status=1 ;;
  esac
done
exit $status
