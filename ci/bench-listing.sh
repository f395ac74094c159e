#!/usr/bin/env bash
# Small files read one after another, the way `cat *`, `tar c` or a data loader reads a directory:
#   bash ci/bench-listing.sh HUBFS_BIN PYTHON [--full]
#
# A dataset with N files of 4 KiB in one directory (200, or 1,000 with --full) on the local Hub, every
# request delayed 30 ms (a distant Hub). Read-only mounts of it, each with a fresh cache, read every file
# with `cat` by one reader:
#   listing order, --prefetch-files 16 (default) and 0 (off), alternated twice;
#   a shuffled order with 16 and with 0.
# Prints files/s and the Hub's download requests per file for each run, and the ratios measured in this
# run. Checks: listing order with the prefetch at least 5x the files/s without it (issue 18's target);
# the shuffled order makes no more download requests with it than without it; every file's sha256 is the
# source's. Ends with `bench-listing: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-listing.sh HUBFS_BIN PYTHON [--full]}"
PY="${2:?usage: ci/bench-listing.sh HUBFS_BIN PYTHON [--full]}"
N=200
[ "${3:-}" = "--full" ] && N=1000
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-bench-listing.XXXXXX")"
MNT="$WORK/mnt"
PIDS=()
cleanup() {
  umount -l "$MNT" 2>/dev/null
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"

mkdir -p "$MNT" "$WORK/src/d"
for i in $(seq -w 1 "$N"); do head -c 4096 /dev/urandom >"$WORK/src/d/sample-$i.bin"; done
(cd "$WORK/src/d" && sha256sum -- *) >"$WORK/want.sums"

start_local_hub --commit-limit 0
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_PROGRESS_BARS=1
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"name":"shards","organization":"local","type":"dataset"}' >/dev/null
"$PY" -c "from huggingface_hub import HfApi; HfApi().upload_folder(repo_id='local/shards', repo_type='dataset', folder_path='$WORK/src')" \
  >"$WORK/upload.log" 2>&1
check "$N files of 4 KiB uploaded with the stock client" $? || tail -n 5 "$WORK/upload.log"
curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"api":{"latency_ms":30},"resolve":{"latency_ms":30},"cas":{"latency_ms":30}}' >/dev/null
check "every Hub request delayed 30 ms" $?

downloads() { # resolve + CAS requests so far
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats" |
    "$PY" -c 'import json, sys; s = json.load(sys.stdin); print(s["resolve"]["requests"] + s["cas"]["requests"])'
}

# run PREFETCH ORDER: mounts with a fresh cache, reads every file with cat in ORDER (listing | shuffled);
# sets RATE (files/s) and REQS (download requests per file); checks the bytes.
run() {
  local prefetch="$1" order="$2" t0 t1 d0 d1
  "$BIN" mount datasets/local/shards "$MNT" --cache-dir "$WORK/cache-$RANDOM$RANDOM" --prefetch-files "$prefetch" \
    >"$WORK/mount.out" 2>&1 &
  local mp=$!
  PIDS+=("$mp")
  wait_line "$WORK/mount.out" "mounted " >/dev/null || { cat "$WORK/mount.out"; RATE=0; REQS=0; return 1; }
  (cd "$MNT/d" && ls) >"$WORK/names"
  [ "$order" = shuffled ] && shuf --random-source=<(yes) "$WORK/names" -o "$WORK/names"
  d0=$(downloads)
  t0=$(date +%s%N)
  (cd "$MNT/d" && while read -r f; do printf '%s  %s\n' "$(cat -- "$f" | sha256sum | cut -d' ' -f1)" "$f"; done <"$WORK/names") \
    >"$WORK/got.sums"
  t1=$(date +%s%N)
  d1=$(downloads)
  kill "$mp"; wait "$mp" 2>/dev/null
  sort -k2 "$WORK/got.sums" | diff -q - <(sort -k2 "$WORK/want.sums") >/dev/null
  check "prefetch $prefetch, $order order: every file has the source's sha256" $?
  RATE=$(awk -v n="$N" -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", n / (ns / 1e9) }')
  REQS=$(awk -v n="$N" -v r=$((d1 - d0)) 'BEGIN { printf "%.2f", r / n }')
  echo "  figure: prefetch $prefetch, $order order: $RATE files/s, $REQS download requests per file"
}

declare -A R Q
for pass in 1 2; do
  for p in 16 0; do run "$p" listing; R[$p.$pass]=$RATE; Q[$p.$pass]=$REQS; done
done
run 16 shuffled; R[16.s]=$RATE; Q[16.s]=$REQS
run 0 shuffled; R[0.s]=$RATE; Q[0.s]=$REQS

ratio=$(awk -v a="${R[16.1]}" -v b="${R[16.2]}" -v c="${R[0.1]}" -v d="${R[0.2]}" \
  'BEGIN { on = (a + b) / 2; off = (c + d) / 2; printf "%.1f", (off > 0 ? on / off : 0) }')
echo "  figure: listing order, $N files of 4 KiB, 30 ms per request: ${R[16.1]} and ${R[16.2]} files/s with the prefetch, ${R[0.1]} and ${R[0.2]} without: ${ratio}x"
awk -v r="$ratio" 'BEGIN { exit !(r >= 5) }'
check "listing order with the prefetch at least 5x the files/s without it (${ratio}x)" $?
awk -v a="${Q[16.s]}" -v b="${Q[0.s]}" 'BEGIN { exit !(a <= b) }'
check "shuffled order: no more download requests per file with the prefetch (${Q[16.s]}) than without (${Q[0.s]})" $?

echo "bench-listing: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
