# Sourced by tools/gpu/*.sh: the step helpers of a GPU job. The script sets LOG (its log file) and status=0 first;
#   log MESSAGE       "== MESSAGE" to stdout and the log
#   run NAME CMD...   runs CMD with its output appended to the log, logs "NAME: rc=N (S s)"; a failure sets status=1
log() { echo "== $*" | tee -a "$LOG"; }
run() {
  local name=$1; shift
  log "$name: $*"
  local t0=$(date +%s)
  "$@" >> "$LOG" 2>&1
  local rc=$?
  log "$name: rc=$rc ($(( $(date +%s) - t0 )) s)"
  [ $rc -ne 0 ] && status=1
  return $rc
}
