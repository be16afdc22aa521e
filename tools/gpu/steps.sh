# Sourced by tools/gpu/*.sh: the step helpers of a GPU job. The script sets LOG (its log file) and status=0 first;
#   log MESSAGE       "== MESSAGE" to stdout and the log
#   run NAME CMD...   runs CMD with its output appended to the log, logs "NAME: rc=N (S s)"; a failure sets status=1
#   wait_port PORT PID  waits up to 120 s for a server (process PID) to accept connections on 127.0.0.1:PORT
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
wait_port() {
  local i
  for i in $(seq 1 240); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && { log "server pid $2 up after ~$((i / 2)) s"; return 0; }
    kill -0 "$2" 2>/dev/null || break
    sleep 0.5
  done
  log "server pid $2 not listening on port $1"; status=1; return 1
}
