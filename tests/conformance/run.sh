#!/usr/bin/env bash
# Conformance suite: stock huggingface_hub (+ hf_xet) against `hubfs local-hub`.
#
#   bash tests/conformance/run.sh [xet] [noxet] [-- extra pytest args]
#
# For each mode (default: xet then noxet) it starts a fresh server on a fresh data dir, runs pytest against it
# and stops it. Prints `conformance[MODE]: N passed, M failed` per mode and a total line
# `conformance: N passed, M failed`; exits non-zero if anything failed.
#
# Environment:
#   HUBFS_BIN                 hubfs binary (default: ${CARGO_TARGET_DIR:-<repo>/target}/debug/hubfs)
#   HUBFS_VENV                venv location (default: $HOME/.cache/hubfs/venv)
#   HUBFS_CONFORMANCE_TIMEOUT seconds for one mode's pytest run (default 1500)
#   HUBFS_TEST_TIMEOUT        seconds per test (pytest-timeout, default 300)
#   HUBFS_START_TIMEOUT       seconds to wait for the server's endpoint line (default 120)
#   HUBFS_KEEP_TMP=1          keep data dirs and logs
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${HUBFS_VENV:-${HOME:-/root}/.cache/hubfs/venv}"
RUN_TIMEOUT="${HUBFS_CONFORMANCE_TIMEOUT:-1500}"
TEST_TIMEOUT="${HUBFS_TEST_TIMEOUT:-300}"
START_TIMEOUT="${HUBFS_START_TIMEOUT:-120}"

MODES=()
PYTEST_EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    xet|noxet) MODES+=("$1") ;;
    --) shift; PYTEST_EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (modes: xet noxet; pytest args after --)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#MODES[@]} -eq 0 ] && MODES=(xet noxet)

log() { echo "[conformance] $*" >&2; }

# ---------------------------------------------------------------------------------------------------------
# venv (idempotent: reinstalls only when requirements.txt changed or the venv is broken)
# ---------------------------------------------------------------------------------------------------------
setup_venv() {
  local req="$HERE/requirements.txt" stamp="$VENV/.hubfs-requirements.sha256" want
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' 2>/dev/null \
     && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    log "creating venv at $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV" || { log "python3 -m venv failed (on Debian: apt-get install -y python3-venv)"; return 1; }
  fi
  log "installing $(tr '\n' ' ' < "$req" | sed 's/#[^ ]*//g')"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$req" || return 1
  echo "$want" > "$stamp"
}

if ! setup_venv; then
  for m in "${MODES[@]}"; do echo "conformance[$m]: 0 passed, 1 failed"; done
  echo "conformance: 0 passed, ${#MODES[@]} failed"
  exit 1
fi
PY="$VENV/bin/python"
log "$("$PY" -c 'from importlib.metadata import version as v; print("huggingface_hub", v("huggingface_hub"), "hf_xet", v("hf_xet"), "pytest", v("pytest"))')"

# ---------------------------------------------------------------------------------------------------------
# server binary
# ---------------------------------------------------------------------------------------------------------
BIN="${HUBFS_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/hubfs}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
if ! [ -x "$BIN" ]; then
  log "hubfs binary not found at $BIN (build with cargo build, or set HUBFS_BIN)"
  for m in "${MODES[@]}"; do echo "conformance[$m]: 0 passed, 1 failed"; done
  echo "conformance: 0 passed, ${#MODES[@]} failed"
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-conformance.XXXXXX")"
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      log "server $SERVER_PID ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$SERVER_PID" 2>/dev/null
    fi
    wait "$SERVER_PID" 2>/dev/null
  fi
  SERVER_PID=""
}

cleanup() {
  stop_server
  if [ "${HUBFS_KEEP_TMP:-0}" = "1" ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server MODE_DIR -> sets SERVER_PID and ENDPOINT
start_server() {
  local dir="$1"
  mkdir -p "$dir/data"
  "$BIN" local-hub --data-dir "$dir/data" --addr 127.0.0.1:0 --seed-demo \
    --token local:hf_local_write:write \
    --token local:hf_local_read:read \
    --token alice:hf_alice:write \
    --token bob:hf_bob:write \
    > "$dir/server.out" 2> "$dir/server.err" < /dev/null &
  SERVER_PID=$!
  ENDPOINT=""
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    ENDPOINT="$(sed -n 's/^endpoint: \(http:\/\/[^[:space:]]*\)[[:space:]]*$/\1/p' "$dir/server.out" | head -n1)"
    [ -n "$ENDPOINT" ] && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null
      log "server exited early with status $?"
      SERVER_PID=""
      return 1
    fi
    sleep 0.2
  done
  log "server printed no 'endpoint: http://…' line within ${START_TIMEOUT}s"
  return 1
}

show_server_log() {
  local dir="$1"
  log "---- last lines of the server's stderr ($dir/server.err) ----"
  tail -n 40 "$dir/server.err" >&2 2>/dev/null || true
  log "----"
}

# junit XML -> "passed failed skipped"
count_junit() {
  "$PY" - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("0 1 0"); sys.exit(0)
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = f = e = s = 0
for su in suites:
    t += int(su.get("tests", 0)); f += int(su.get("failures", 0)); e += int(su.get("errors", 0)); s += int(su.get("skipped", 0))
print(t - f - e - s, f + e, s)
EOF
}

TOTAL_PASSED=0
TOTAL_FAILED=0
TOTAL_SKIPPED=0
SUMMARY=()

for mode in "${MODES[@]}"; do
  dir="$WORK/$mode"
  mkdir -p "$dir/hfhome" "$dir/tmp"
  log "=== mode $mode ==="
  passed=0; failed=0; skipped=0
  if ! start_server "$dir"; then
    show_server_log "$dir"
    stop_server
    failed=1
  else
    log "server pid $SERVER_PID at $ENDPOINT"
    env_args=(
      -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE -u HF_HUB_DISABLE_XET
      HF_ENDPOINT="$ENDPOINT"
      HF_HOME="$dir/hfhome"
      HF_HUB_DISABLE_TELEMETRY=1
      HF_HUB_DISABLE_PROGRESS_BARS=1
      HF_HUB_DISABLE_UPDATE_CHECK=1
      HF_XET_CHUNK_CACHE_SIZE_BYTES=0
      HUBFS_CONFORMANCE_MODE="$mode"
      HUBFS_DATA_DIR="$dir/data"
      TMPDIR="$dir/tmp"
      PYTHONDONTWRITEBYTECODE=1
    )
    [ "$mode" = noxet ] && env_args+=(HF_HUB_DISABLE_XET=1)
    (
      cd "$HERE" && env "${env_args[@]}" timeout -k 30 "$RUN_TIMEOUT" "$PY" -m pytest "$HERE" \
        -p no:cacheprovider -q -rfE --tb=short --color=no \
        --timeout="$TEST_TIMEOUT" \
        --junitxml="$dir/junit.xml" -o junit_suite_name="conformance-$mode" -o junit_family=xunit2 \
        ${PYTEST_EXTRA[@]+"${PYTEST_EXTRA[@]}"}
    )
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      log "pytest for mode $mode hit the ${RUN_TIMEOUT}s limit"
    fi
    if [ -s "$dir/junit.xml" ]; then
      read -r passed failed skipped < <(count_junit "$dir/junit.xml")
    else
      log "no junit report for mode $mode (pytest crashed or was killed)"
      passed=0; failed=1; skipped=0
    fi
    if [ $rc -ne 0 ] && [ "$failed" -eq 0 ]; then
      # exited non-zero without recording a failure (e.g. collection error, no tests collected)
      log "pytest exited with status $rc but recorded no failure: counting one"
      failed=1
    fi
    if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
      log "no test ran in mode $mode: counting one failure"
      failed=1
    fi
    if [ "$failed" -gt 0 ]; then show_server_log "$dir"; fi
    stop_server
  fi
  line="conformance[$mode]: $passed passed, $failed failed"
  [ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
  echo "$line"
  SUMMARY+=("$line")
  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  TOTAL_SKIPPED=$((TOTAL_SKIPPED + skipped))
done

echo
for line in "${SUMMARY[@]}"; do echo "$line"; done
total="conformance: $TOTAL_PASSED passed, $TOTAL_FAILED failed"
[ "$TOTAL_SKIPPED" -gt 0 ] && total="$total, $TOTAL_SKIPPED skipped"
echo "$total"
[ "$TOTAL_FAILED" -eq 0 ]
