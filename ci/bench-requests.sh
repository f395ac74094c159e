#!/usr/bin/env bash
# What common workloads cost in the Hub's request budget:
#   bash ci/bench-requests.sh HUBFS_BIN
#
# The Hub rations requests per 5-minute window in buckets: `api` (listings, paths-info, tokens,
# commits), `resolvers` (every /resolve/ download) and `pages`; the Xet CAS has its own. A free user
# gets 1,000 api calls and 5,000 resolves a window, an anonymous IP 500 and 3,000. This prints, per
# workload, the requests the local Hub answered in each bucket (and the CAS's), through a fresh
# read-only `mount --daemon` with a fresh cache each:
#   mount        `mount --daemon`, then `ls` of the root;
#   model load   every file of demo/tiny-model read whole (sha256sum), checked against the Hub's;
#   ls -lR       `ls -lR` of a dataset of 10,000 small git-stored files in one folder;
#   cat 3        `cat` of 3 of those files;
#   cat 10,000   `cat` of each of them, one after another;
#   cp -r 1,000  `cp -r` of 1,000 small files (in 2 folders) into a `--write` mount, then `hubfs sync`.
# The local Hub runs with its request windows off: these are counts, not waits (a workload past a
# window waits for it; tests/hub_windows.rs measures that). HUBFS_BENCH_REQUESTS_N overrides 10,000.
# Checks: the model's bytes; `cat 3` costs at most 10 resolves; `cat 10,000` at most 1.02 resolves a
# file, `ls -lR` one api call per page of 1,000 entries and a few more, `cp -r` at most one api call
# per 20 files. Ends with `bench-requests: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-requests.sh HUBFS_BIN}"
N="${HUBFS_BENCH_REQUESTS_N:-10000}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-requests

start_local_hub --seed-demo --request-windows off
TOKEN=hf_local_write
auth=(-H "authorization: Bearer $TOKEN")
export HF_ENDPOINT="$EP" HF_TOKEN="$TOKEN"
export XDG_CACHE_HOME="$WORK/xdg" HUBFS_RUNTIME_DIR="$WORK/run" HF_HOME="$WORK/hf-home"

# The dataset: N small text files (git-stored) in one folder, one commit.
curl -sf -X POST "$EP/api/repos/create" "${auth[@]}" -H 'content-type: application/json' \
  -d '{"name":"many","organization":"local","type":"dataset"}' >/dev/null
python3 - "$N" >"$WORK/commit.ndjson" <<'EOF'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"key": "header", "value": {"summary": "many small files"}}))
for i in range(n):
    path = f"all/f{i:05d}.txt"
    print(json.dumps({"key": "file", "value": {"path": path, "content": f"small file {i}\n", "encoding": "utf-8"}}))
EOF
curl -sf -X POST "$EP/api/datasets/local/many/commit/main" "${auth[@]}" -H 'content-type: application/x-ndjson' \
  --data-binary @"$WORK/commit.ndjson" >/dev/null
check "a dataset of $N small files in one folder committed" $?

# stats: "api resolve cas" request counts of the Hub so far (commits count as api on the Hub).
stats() {
  curl -sf "$EP/admin/stats" "${auth[@]}" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["api"]["requests"] + s["commit"]["requests"], s["resolve"]["requests"], s["cas"]["requests"])'
}

declare -A COST
# measure NAME COMMAND...: runs COMMAND and records the Hub requests it cost per bucket.
measure() {
  local name="$1"; shift
  local before after
  before=($(stats))
  "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"
  local rc=$?
  after=($(stats))
  COST[$name]="$((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2]))"
  return $rc
}

mount_fresh() { # REPO
  umount -l "$MNT" 2>/dev/null
  rm -rf "$MNT" "$WORK/cache"
  mkdir -p "$MNT"
  "$BIN" mount "$1" "$MNT" --daemon --cache-dir "$WORK/cache" >"$WORK/mount.out" 2>&1
}

unmount() { "$BIN" unmount "$MNT" >/dev/null 2>&1; }

measure "mount" bash -c "$(declare -f mount_fresh); BIN='$BIN' MNT='$MNT' WORK='$WORK' mount_fresh demo/tiny-model && ls '$MNT'"
check "mount demo/tiny-model" $?

# The model's files as the Hub serves them, then as the mount reads them.
want="$(cd "$MNT" && find . -type f | sort)"
: >"$WORK/want.sums"
for f in $want; do
  printf '%s  %s\n' "$(curl -sfL "$EP/demo/tiny-model/resolve/main/${f#./}" "${auth[@]}" | sha256sum | cut -d' ' -f1)" "$f" >>"$WORK/want.sums"
done
measure "model load" bash -c "cd '$MNT' && find . -type f | sort | xargs sha256sum"
cmp -s "$WORK/out.txt" "$WORK/want.sums"
check "model load: every file has the Hub's sha256" $?
unmount

mount_fresh datasets/local/many
measure "ls -lR" bash -c "ls -lR '$MNT' | grep -c '^-'"
[ "$(cat "$WORK/out.txt")" = "$N" ]
check "ls -lR lists $N files ($(cat "$WORK/out.txt"))" $?
unmount

mount_fresh datasets/local/many
three=("$(printf 'f%05d.txt' $((N / 3)))" f00007.txt "$(printf 'f%05d.txt' $((N - 2)))")
measure "cat 3" bash -c "cd '$MNT/all' && cat ${three[*]} | wc -l"
[ "$(cat "$WORK/out.txt")" = 3 ]
check "cat of 3 files reads them" $?
read -r _ cat3 _ <<<"${COST[cat 3]}"
[ "$cat3" -le 10 ]
check "3 files of a $N-file folder cost $cat3 resolves (at most 10)" $?
unmount

mount_fresh datasets/local/many
ls -R "$MNT" >/dev/null
measure "cat $N" bash -c "cd '$MNT/all' && for f in \$(ls); do cat \$f; done | wc -l"
[ "$(cat "$WORK/out.txt")" = "$N" ]
check "cat of $N files, one after another, reads every file" $?
unmount

# Writes: 1,000 small files copied into a writable mount, until committed.
curl -sf -X POST "$EP/api/repos/create" "${auth[@]}" -H 'content-type: application/json' \
  -d '{"name":"written","organization":"local","type":"dataset"}' >/dev/null
mkdir -p "$WORK/src/a" "$WORK/src/b"
for i in $(seq 1 500); do echo "a $i" >"$WORK/src/a/$i.txt"; echo "b $i" >"$WORK/src/b/$i.txt"; done
umount -l "$MNT" 2>/dev/null
rm -rf "$MNT" "$WORK/cache" && mkdir -p "$MNT"
"$BIN" mount --write datasets/local/written "$MNT" --daemon --cache-dir "$WORK/cache" >"$WORK/mount.out" 2>&1
measure "cp -r 1000" bash -c "cp -r '$WORK/src/a' '$WORK/src/b' '$MNT/' && '$BIN' sync '$MNT'"
check "cp -r of 1,000 files into a --write mount, synced" $?
unmount
got=$(curl -sf "$EP/api/datasets/local/written/tree/main/a" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$got" = 500 ]
check "the Hub has the copied files ($got of 500 in a/)" $?

printf '\n%-12s %8s %10s %6s\n' workload api resolvers cas
for name in "mount" "model load" "ls -lR" "cat 3" "cat $N" "cp -r 1000"; do
  read -r a r c <<<"${COST[$name]}"
  printf '%-12s %8s %10s %6s\n' "$name" "$a" "$r" "$c"
done
read -r lsapi _ _ <<<"${COST[ls -lR]}"
[ "$lsapi" -le $((N / 1000 + 4)) ]
check "ls -lR of $N files costs $lsapi api calls (a page of 1,000 entries each, and a few)" $?
read -r _ catr _ <<<"${COST[cat $N]}"
[ "$catr" -le $((N * 102 / 100)) ]
check "cat of $N files costs $catr resolves (at most 1.02 a file)" $?

read -r cpapi _ _ <<<"${COST[cp -r 1000]}"
[ "$cpapi" -le 50 ]
check "cp -r of 1,000 files costs $cpapi api calls, commits included (at most 50)" $?

echo "bench-requests: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
