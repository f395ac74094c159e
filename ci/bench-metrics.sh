#!/usr/bin/env bash
# What `--metrics-addr` costs (issue 31):  bash ci/bench-metrics.sh HUBFS_BIN [IDLE_SECS]
#
# A read-only mount of the local Hub's demo/tiny-model (`mount --daemon --metrics-addr`):
#   idle: the mount's CPU time (utime+stime from /proc/PID/stat) over IDLE_SECS (default 30) without
#         scrapes, then over IDLE_SECS scraped every second; printed as % of one core;
#   cold read: model.safetensors (64 MiB) read cold by a fresh mount (new cache dir) with no scrapes
#         and with a scrape every 100 ms, alternated, 3 runs each; medians printed with their ratio.
# Checks: scraping every second costs under 1% of a core. Ends with `bench-metrics: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-metrics.sh HUBFS_BIN [IDLE_SECS]}"
IDLE="${2:-30}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-metrics
PASSED=0
FAILED=0
mkdir -p "$MNT"
start_local_hub --seed-demo
export HF_ENDPOINT="$EP" HOME="$WORK/home" XDG_CACHE_HOME="$WORK/xdg" HUBFS_RUNTIME_DIR="$WORK/run"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# mount_fresh CACHE: a new mount on a new cache dir; sets MPID.
mount_fresh() {
  local out
  out=$("$BIN" mount demo/tiny-model "$MNT" --daemon --cache-dir "$1" --metrics-addr "127.0.0.1:$PORT" 2>&1) ||
    { echo "mount failed: $out"; exit 1; }
  MPID=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' <<<"$out")
}
unmount_it() { "$BIN" unmount "$MNT" >/dev/null 2>&1; while kill -0 "$MPID" 2>/dev/null; do sleep 0.05; done; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

mount_fresh "$WORK/c0"
ls "$MNT" >/dev/null
t0=$(ticks "$MPID"); sleep "$IDLE"; t1=$(ticks "$MPID")
for _ in $(seq "$IDLE"); do curl -sf "127.0.0.1:$PORT/metrics" >/dev/null; sleep 1; done
t2=$(ticks "$MPID")
idle_pct=$(awk -v a="$((t1 - t0))" -v s="$IDLE" -v hz="$HZ" 'BEGIN {printf "%.2f", 100 * a / hz / s}')
scraped_pct=$(awk -v a="$((t2 - t1))" -v s="$IDLE" -v hz="$HZ" 'BEGIN {printf "%.2f", 100 * a / hz / s}')
echo "idle mount: ${idle_pct}% of a core unscraped, ${scraped_pct}% scraped every second (${IDLE} s each)"
if awk -v p="$scraped_pct" 'BEGIN {exit !(p < 1.0)}'; then PASSED=$((PASSED + 1)); else
  echo "FAIL: scraping every second costs ${scraped_pct}% of a core"; FAILED=$((FAILED + 1)); fi
unmount_it

# cold_read MODE N: seconds to read model.safetensors on a fresh mount, scraped every 100 ms or not.
cold_read() {
  mount_fresh "$WORK/c-$1-$2"
  local scraper=""
  if [ "$1" = scraped ]; then
    (while true; do curl -sf "127.0.0.1:$PORT/metrics" >/dev/null; sleep 0.1; done) &
    scraper=$!
  fi
  local s e
  s=$(date +%s.%N); cat "$MNT/model.safetensors" >/dev/null; e=$(date +%s.%N)
  [ -n "$scraper" ] && kill "$scraper" && wait "$scraper" 2>/dev/null
  unmount_it
  awk -v s="$s" -v e="$e" 'BEGIN {printf "%.3f\n", e - s}'
}
plain=(); scraped=()
for i in 1 2 3; do plain+=("$(cold_read plain "$i")"); scraped+=("$(cold_read scraped "$i")"); done
median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
mp=$(median "${plain[@]}"); ms=$(median "${scraped[@]}")
echo "cold read of 64 MiB: ${plain[*]} s without scrapes, ${scraped[*]} s scraped every 100 ms;" \
  "medians $mp / $ms s (ratio $(awk -v a="$ms" -v b="$mp" 'BEGIN {printf "%.2f", a / b}'))"
echo "bench-metrics: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
