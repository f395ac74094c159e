# Helpers shared by the CI scripts that drive the real binary (sourced, not run).
# Callers set WORK (a scratch dir), BIN (the hubfs binary) and a PIDS array that their cleanup kills
# (or call scratch_dir, which sets all three but BIN and installs that cleanup).

# scratch_dir NAME [BASE]: a fresh WORK under BASE (default $TMPDIR or /tmp) with MNT=$WORK/mnt and an
# empty PIDS; on exit MNT is unmounted, every PID killed and WORK removed.
scratch_dir() {
  WORK="$(mktemp -d "${2:-${TMPDIR:-/tmp}}/hubfs-$1.XXXXXX")"
  MNT="$WORK/mnt"
  PIDS=()
  trap scratch_cleanup EXIT
}
scratch_cleanup() {
  umount -l "$MNT" 2>/dev/null
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}

PASSED=0
FAILED=0
# check NAME STATUS: counts a check (STATUS 0 = ok) and prints it.
check() {
  if [ "$2" -eq 0 ]; then PASSED=$((PASSED + 1)); echo "  ok    $1"
  else FAILED=$((FAILED + 1)); echo "  FAIL  $1"; fi
}

# wait_line FILE PREFIX: waits up to 60 s for a line starting with PREFIX; prints the rest of it.
wait_line() {
  local i
  for i in $(seq 1 600); do
    if grep -q "^$2" "$1" 2>/dev/null; then sed -n "s/^$2//p" "$1" | head -n1; return 0; fi
    sleep 0.1
  done
  return 1
}

# start_local_hub [ARGS...]: starts `hubfs local-hub` on a fresh data dir under WORK and sets EP to its
# endpoint; exits the script if it does not come up.
start_local_hub() {
  "$BIN" local-hub --data-dir "$WORK/hub" "$@" >"$WORK/hub.out" 2>"$WORK/hub.err" &
  PIDS+=($!)
  EP="$(wait_line "$WORK/hub.out" "endpoint: ")" || { echo "local hub did not start"; cat "$WORK/hub.err"; exit 1; }
}

# stop_matching PATTERN: stops the processes whose command line matches PATTERN (an extended regex,
# as pkill -f takes it), then kills those still there after 10 s.
stop_matching() {
  pkill -f -- "$1" || true
  for _ in $(seq 1 40); do
    pgrep -f -- "$1" >/dev/null || return 0
    sleep 0.25
  done
  pkill -9 -f -- "$1" || true
}

# set_profile PROFILE: the local Hub at $EP (token $HF_TOKEN) answers as on `loopback` (no delay) or on
# `30ms` (every request delayed 30 ms, 200 Mbit/s per connection for resolves and CAS); exits 2 on any
# other name.
set_profile() {
  local body
  case "$1" in
    loopback) body='{"api":{},"resolve":{},"cas":{}}' ;;
    30ms) body='{"api":{"latency_ms":30},"resolve":{"latency_ms":30,"bandwidth_mbps":200},"cas":{"latency_ms":30,"bandwidth_mbps":200}}' ;;
    *) echo "unknown profile $1"; exit 2 ;;
  esac
  curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
    -d "$body" >/dev/null
}
