#!/usr/bin/env bash
# Metadata at scale: tree walks over a dataset of many small files, hubfs beside hf-mount when built.
#   bash ci/bench-metadata.sh HUBFS_BIN [DIRS [FILES_PER_DIR]]
#
# Seeds a dataset of DIRS folders of FILES_PER_DIR small git-stored files (default 100 x 1,000:
# 100,000 files; 1000 x 1000 is the million) in commits of at most 100,000 files (the Hub allows
# 10,000 entries per folder). Then each walk runs on a fresh read-only `mount --daemon` with a fresh
# cache, and prints its wall time, the mount's CPU time, the Hub's api requests and the mount's peak
# RSS:
#   find       find MNT | wc -l
#   ls -lR     ls -lR MNT
#   du -s      du -s MNT
#   os.walk    Python's os.walk, names only
#   scandir    os.scandir recursion with each entry's stat (what pathlib's rglob and tools do)
#   stat       os.walk, then os.stat of every file
# When hf-mount's FUSE binary is there (HUBFS_PEER, default ~/.cache/peers/hf-mount-fuse, built by
# ../shared/tools/build-peer.sh), each walk runs on it too, alternated, and the ratio is printed.
# HUBFS_BENCH_LATENCY_MS=30 delays every api request by 30 ms (a distant Hub). A peer's walk is
# stopped after HUBFS_BENCH_PEER_TIMEOUT seconds (default 300; its figure then reads as that).
#
# The local Hub enforces the Hub's request windows unless there are more folders than a free user's
# window allows api calls (1,000 per 5 minutes): a walk lists each folder once, so a million files in
# 1,000 folders spends a whole window; those runs turn the windows off and say so.
# Checks: every walk sees every file; each costs at most DIRS + 3 api calls (one listing per folder
# of up to 1,000 entries, the root's, the revision). Ends with `bench-metadata: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-metadata.sh HUBFS_BIN [DIRS [FILES_PER_DIR]]}"
DIRS="${2:-100}"
PER="${3:-1000}"
FILES=$((DIRS * PER))
PEER="${HUBFS_PEER:-$HOME/.cache/peers/hf-mount-fuse}"
LATENCY="${HUBFS_BENCH_LATENCY_MS:-0}"
PEER_TIMEOUT="${HUBFS_BENCH_PEER_TIMEOUT:-300}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-metadata /var/tmp

windows=on
[ "$DIRS" -gt 990 ] && windows=off
start_local_hub --request-windows "$windows"
TOKEN=hf_local_write
auth=(-H "authorization: Bearer $TOKEN")
export XDG_CACHE_HOME="$WORK/xdg" HUBFS_RUNTIME_DIR="$WORK/run" HF_HOME="$WORK/hf-home"

curl -sf -X POST "$EP/api/repos/create" "${auth[@]}" -H 'content-type: application/json' \
  -d '{"name":"tree","organization":"local","type":"dataset"}' >/dev/null
seeded=0
for ((first = 0; first < DIRS; first += 100000 / PER > 0 ? 100000 / PER : 1)); do
  python3 - "$first" "$DIRS" "$PER" >"$WORK/commit.ndjson" <<'EOF'
import json, sys
first, dirs, per = (int(a) for a in sys.argv[1:])
step = max(1, 100000 // per)
print(json.dumps({"key": "header", "value": {"summary": f"folders {first} and on"}}))
for d in range(first, min(dirs, first + step)):
    for f in range(per):
        path = f"part-{d:04d}/item-{f:05d}.txt"
        print(json.dumps({"key": "file", "value": {"path": path, "content": f"row {d}/{f}\n", "encoding": "utf-8"}}))
EOF
  curl -sf -X POST "$EP/api/datasets/local/tree/commit/main" "${auth[@]}" -H 'content-type: application/x-ndjson' \
    --data-binary @"$WORK/commit.ndjson" >/dev/null || { seeded=1; break; }
done
rm -f "$WORK/commit.ndjson"
check "a dataset of $FILES files in $DIRS folders committed (request windows $windows)" $seeded
# Files at the root besides the folders (the .gitattributes a new repo gets).
ROOT_FILES=$(curl -sf "$EP/api/datasets/local/tree/tree/main" "${auth[@]}" |
  python3 -c 'import json, sys; print(sum(e["type"] == "file" for e in json.load(sys.stdin)))')
if [ "$LATENCY" != 0 ]; then
  curl -sf -X POST "$EP/admin/faults" "${auth[@]}" -H 'content-type: application/json' \
    -d "{\"api\":{\"latency_ms\":$LATENCY}}" >/dev/null
fi

cat >"$WORK/walk.py" <<'EOF'
import os, sys
mode, root = sys.argv[1], sys.argv[2]
n = 0
if mode == "walk":
    for _, _, files in os.walk(root):
        n += len(files)
elif mode == "scandir":
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                e.stat(follow_symlinks=False)
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    n += 1
elif mode == "stat":
    for r, _, files in os.walk(root):
        for f in files:
            os.stat(os.path.join(r, f))
            n += 1
print(n)
EOF

api_calls() {
  curl -sf "$EP/admin/stats" "${auth[@]}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["api"]["requests"])'
}
cpu_ms() { awk '{print ($14 + $15) * 10}' "/proc/$1/stat"; }

# run WHO NAME COMMAND: one walk on a fresh mount; sets LAST="wall_ms cpu_ms api rss_mib files".
run() {
  local who="$1" name="$2" cmd="$3" pid cache="$WORK/cache-$1"
  umount -l "$MNT" 2>/dev/null
  rm -rf "$cache" && mkdir -p "$MNT"
  if [ "$who" = hubfs ]; then
    "$BIN" mount datasets/local/tree "$MNT" --daemon --endpoint "$EP" --token hf_local_read \
      --cache-dir "$cache" >"$WORK/mount.out" 2>&1 || { cat "$WORK/mount.out"; LAST="0 0 0 0 0"; return 1; }
    pid=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$WORK/mount.out")
  else
    "$PEER" --hub-endpoint "$EP" --hf-token hf_local_read --cache-dir "$cache" repo datasets/local/tree "$MNT" \
      >"$WORK/peer.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do mountpoint -q "$MNT" && break; sleep 0.05; done
  fi
  sleep 0.3
  local a0 c0 s e n
  a0=$(api_calls); c0=$(cpu_ms "$pid"); s=$(date +%s%N)
  if [ "$who" = hubfs ]; then
    n=$(bash -c "$cmd" 2>/dev/null | tail -n1)
  else
    n=$(timeout "$PEER_TIMEOUT" bash -c "$cmd" 2>/dev/null | tail -n1)
  fi
  e=$(date +%s%N)
  LAST="$(((e - s) / 1000000)) $(($(cpu_ms "$pid") - c0)) $(($(api_calls) - a0)) $(($(awk '/VmHWM/ {print $2}' "/proc/$pid/status") / 1024)) ${n:-0}"
  if [ "$who" = hubfs ]; then "$BIN" unmount "$MNT" >/dev/null 2>&1; else umount "$MNT"; wait "$pid" 2>/dev/null; fi
  rm -rf "$cache"
}

declare -A WALKS=(
  [find]="find '$MNT' -type f | wc -l"
  [ls -lR]="ls -lRA '$MNT' | grep -c '^-'"
  [du -s]="du -s --inodes '$MNT' | cut -f1"
  [os.walk]="python3 '$WORK/walk.py' walk '$MNT'"
  [scandir]="python3 '$WORK/walk.py' scandir '$MNT'"
  [stat]="python3 '$WORK/walk.py' stat '$MNT'"
)
ORDER=(find "ls -lR" "du -s" os.walk scandir stat)
have_peer=0
[ -x "$PEER" ] && have_peer=1

echo "bench-metadata: $FILES files in $DIRS folders, api latency ${LATENCY} ms, peer: $([ $have_peer = 1 ] && echo "$PEER" || echo none)"
printf '| walk | hubfs s | mount CPU s | api calls | peak RSS MiB |%s\n' "$([ $have_peer = 1 ] && echo ' hf-mount s | CPU s | api | RSS MiB | ratio |')"
printf '|---|---|---|---|---|%s\n' "$([ $have_peer = 1 ] && echo '---|---|---|---|---|')"
for name in "${ORDER[@]}"; do
  cmd="${WALKS[$name]}"
  want=$((FILES + ROOT_FILES))
  # du --inodes counts the folders and the root too.
  [ "$name" = "du -s" ] && want=$((FILES + ROOT_FILES + DIRS + 1))
  run hubfs "$name" "$cmd"
  read -r w c a r n <<<"$LAST"
  row="| $name | $(awk -v x="$w" 'BEGIN {printf "%.2f", x / 1000}') | $(awk -v x="$c" 'BEGIN {printf "%.2f", x / 1000}') | $a | $r |"
  [ "$n" = "$want" ]
  check "hubfs $name sees every file ($n of $want)" $?
  [ "$a" -le $((DIRS + 3)) ]
  check "hubfs $name costs $a api calls (at most $((DIRS + 3)): a listing per folder)" $?
  if [ $have_peer = 1 ]; then
    run peer "$name" "$cmd"
    read -r pw pc pa pr pn <<<"$LAST"
    row="$row $(awk -v x="$pw" 'BEGIN {printf "%.2f", x / 1000}') | $(awk -v x="$pc" 'BEGIN {printf "%.2f", x / 1000}') | $pa | $pr | $(awk -v a="$pw" -v b="$w" 'BEGIN {printf "%.2fx", a / (b > 0 ? b : 1)}') |"
    [ "$pn" = "$want" ] || echo "  note: hf-mount's $name saw $pn of $want"
  fi
  echo "$row"
done

echo "bench-metadata: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
