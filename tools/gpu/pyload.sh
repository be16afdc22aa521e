#!/usr/bin/env bash
# The Python package's loading on the GPU machine (issue 22): its own python3 (torch 2.11, numpy wheels that bundle
# scipy_openblas64 + libgfortran, torch's own libgomp) imports flashkit in every order with numpy and torch, in a
# fresh interpreter per order (tests/python/import_order_check.py: attention vs a reference, flashkit.torch when torch
# is loaded, then models/target generating text). Then: attention without PCRE2/ICU on the loader path, and a
# `pip install --target` of the repository imported from another directory.
#   tools/gpu/pyload.sh            CPU build of the two libraries into build-pyload (about a minute on 16 cores)
#   CUDA=1 tools/gpu/pyload.sh     CUDA build (sm_90a) instead, slower; BUILD=DIR reuses a build that has lib/
# Run with carry=[".fkdeps.tar.xz"] (tools/gpu/carried_deps.sh pack): the tokenizer's PCRE2/ICU.
# Prints one line per order, "order A,B,C: ok '<text>'" or "order A,B,C: FAIL rc=N <last line>" (rc < 0: killed
# by that signal; a failing order is rerun with FLASHKIT_DLOPEN=deepbind and under gdb, both in the log), then
# "no-icu: ...", "pip: ..." and "pyload: N/M orders ok". Logs in $OUT/pyload.tar.gz. Exit status 1 if anything failed.
set -u
cd "$(dirname "$0")/../.."
. tools/gpu/carried_deps.sh; fk_use_deps
. tools/gpu/steps.sh
OUT=${OUT:-$PWD/build-pyload-out}; mkdir -p "$OUT/logs"
LOG="$OUT/logs/pyload.log"
status=0
PY=${PYTHON:-python3}
{ "$PY" -c "import sys; print(sys.version)"; "$PY" -c "import numpy, numpy.version as v; print('numpy', v.version); numpy.show_config()" 2>&1 | head -40
  "$PY" -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } >> "$LOG" 2>&1
if [ -n "${BUILD:-}" ] && [ -f "$BUILD/lib/libflashkit_core.so" ]; then
  log "reusing $BUILD/lib"
else
  BUILD=build-pyload
  if [ "${CUDA:-0}" = 1 ]; then CUDA_ARGS=(-DFLASHKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real); else CUDA_ARGS=(-DFLASHKIT_CUDA=OFF); fi
  run configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHKIT_BUILD_TESTS=OFF "${CUDA_ARGS[@]}" || exit 1
  run build cmake --build "$BUILD" --target flashkit_core flashkit -j"$(nproc)" || exit 1
fi
LIB=$PWD/$BUILD/lib; [ -f "$LIB/libflashkit.so" ] || LIB=$BUILD/lib
readelf -d "$LIB/libflashkit_core.so" "$LIB/libflashkit.so" | grep -E "NEEDED|RUNPATH|File" >> "$LOG" 2>&1
export PYTHONPATH=$PWD/python FLASHKIT_LIBRARY=$LIB/libflashkit.so OMP_NUM_THREADS=4
# MODEL: the shipped model to generate with (models/draft when the 45 MB target is left out of a run's tree).
MODEL=${MODEL:-models/target}
CHECK="tests/python/import_order_check.py --model $MODEL"
ORDERS=("flashkit" "flashkit numpy" "numpy flashkit" "flashkit.torch" "flashkit.torch numpy" "flashkit numpy torch"
        "flashkit torch numpy" "numpy flashkit torch" "numpy torch flashkit" "torch flashkit" "torch numpy flashkit")
ok=0
for o in "${ORDERS[@]}"; do
  name=${o// /,}
  out=$(timeout 120 "$PY" $CHECK $o 2>>"$LOG"); rc=$?
  [ $rc -gt 128 ] && [ $rc -ne 124 ] && rc=-$((rc - 128))
  echo "order $name: rc=$rc $out" >> "$LOG"
  if [ $rc -eq 0 ]; then
    ok=$((ok + 1)); echo "order $name: ok ${out#ok $name: }"
  else
    status=1; echo "order $name: FAIL rc=$rc $(echo "$out" | tail -1)"
    d=$(FLASHKIT_DLOPEN=deepbind timeout 120 "$PY" $CHECK $o 2>>"$LOG"); echo "order $name with deepbind: rc=$? $d" >> "$LOG"
    command -v gdb >/dev/null && timeout 180 gdb -q -batch -ex run -ex bt --args "$PY" $CHECK $o >> "$LOG" 2>&1
  fi
done
# Attention where the tokenizer's libraries are missing: only libflashkit_core.so loads; a Model is an ImportError.
out=$(LD_LIBRARY_PATH= "$PY" -c "
import numpy as np, flashkit
q = np.random.default_rng(0).standard_normal((1, 9, 2, 16)).astype(np.float32)
o, _ = flashkit.attention(q, q, q, causal=True)
try:
    flashkit.Model('$MODEL'); print('no-icu: ok attention, and the model loaded (PCRE2/ICU are installed here)')
except ImportError as e:
    print('no-icu: ok attention; Model: ImportError:', str(e)[:160])
" 2>>"$LOG") || { status=1; out="no-icu: FAIL $out"; }
echo "$out"
# The package: pip install --target, then import from another directory without FLASHKIT_LIBRARY.
rm -rf "$OUT/site"
if FLASHKIT_LIBRARY_DIR=$LIB PIP_NO_INDEX=1 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
   "$PY" -m pip install -q --no-build-isolation --no-deps --target "$OUT/site" . >> "$LOG" 2>&1; then
  root=$PWD; out=$(cd /tmp && env -u FLASHKIT_LIBRARY PYTHONPATH="$OUT/site" "$PY" -c "
import flashkit
m = flashkit.Model('$root/$MODEL')
print('pip: ok', flashkit.library_path(), repr(m.generate('Once upon a time', max_new_tokens=6, temperature=0)))" 2>>"$LOG") \
    || { status=1; out="pip: FAIL import of the installed package (log)"; }
else
  status=1; out="pip: FAIL pip install (log; Ubuntu may need python3-pip / python3-setuptools)"
fi
echo "$out"; rm -rf "$OUT/site"
echo "pyload: $ok/${#ORDERS[@]} orders ok"
echo "pyload: $ok/${#ORDERS[@]} orders ok" >> "$LOG"
tar czf "$OUT/pyload.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
exit $status
