#!/usr/bin/env bash
# Publishing a folder to a dataset: `cp -r` into a `--write` mount until every file is on the Hub,
# beside huggingface_hub's `upload_folder` of the same shape, on one local Hub.
#   bash ci/bench-publish.sh HUBFS_BIN PYTHON [SHAPE...]
#
# Shapes (NAME=SMALL_FILES,BIG_FILES,BIG_MIB; default: mixed small):
#   mixed  500 small files + 4 x 64 MiB        small  10,000 small files (20 folders)
#   huge   10 small files + 2 x 1 GiB          (or any NAME=S,B,M)
# Small files are short text rows (committed inline, as a dataset's .jsonl/.csv metadata would be);
# big files are random bytes (stored through Xet). Each run gets fresh bytes, so nothing is deduplicated
# against an earlier run. Per shape, three ways, each timed from the first byte until the Hub has
# every file:
#   upload_folder   HfApi.upload_folder (PYTHON needs huggingface_hub and hf_xet)
#   close=upload    cp -r into a default `mount --write --daemon`, then `hubfs sync`
#   close=stage     the same with `--close stage`
# Checks, per way: every file on the Hub with its bytes (sha256 of LFS files, the git blob id of the
# others, from the Hub's tree listing), and for the mount at most 8 commits (the default commit
# budget's burst, so nothing waited for a refill). upload_folder's commits are printed as it made them
# (huggingface_hub splits a large folder into several). Prints
# seconds, MB/s, commits, the Hub's API requests (api and commit classes) and the mount's peak RSS, and each way's ratio to
# upload_folder (above 1.00: faster). The Hub's request windows and commit limit are on.
# HUBFS_BENCH_LATENCY_MS=30 delays every api request by 30 ms (a distant Hub).
# HUBFS_BENCH_DIR (default /var/tmp) holds the files, the Hub, the cache and the mount's staging:
# /dev/shm takes the disk out of the figures.
# HUBFS_BENCH_RUNS=N (default 1) repeats every shape N times, each run on new repos with fresh bytes
# and its ratios against its own upload_folder, then prints each way's ratios and their median (one
# run on these machines moves by a quarter from the next).
# Ends with `bench-publish: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-publish.sh HUBFS_BIN PYTHON [SHAPE...]}"
PY="${2:?usage: ci/bench-publish.sh HUBFS_BIN PYTHON [SHAPE...]}"
shift 2
SHAPES=("$@")
[ ${#SHAPES[@]} -eq 0 ] && SHAPES=(mixed)
LATENCY="${HUBFS_BENCH_LATENCY_MS:-0}"
RUNS="${HUBFS_BENCH_RUNS:-1}"
case "$RUNS" in '' | *[!0-9]* | 0) echo "HUBFS_BENCH_RUNS must be a whole number of runs, 1 or more (got '$RUNS')" >&2; exit 2 ;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-publish "${HUBFS_BENCH_DIR:-/var/tmp}"

start_local_hub
TOKEN=hf_local_write
auth=(-H "authorization: Bearer $TOKEN")
export XDG_CACHE_HOME="$WORK/xdg" HUBFS_RUNTIME_DIR="$WORK/run" HF_HOME="$WORK/hf-home"
export HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_DISABLE_TELEMETRY=1
if [ "$LATENCY" != 0 ]; then
  curl -sf -X POST "$EP/admin/faults" "${auth[@]}" -H 'content-type: application/json' \
    -d "{\"api\":{\"latency_ms\":$LATENCY}}" >/dev/null
fi

# The Hub's API requests so far: the api class and the commit class (preupload, commit).
api_calls() {
  curl -sf "$EP/admin/stats" "${auth[@]}" | python3 -c 'import json, sys; s = json.load(sys.stdin); print(s["api"]["requests"] + s["commit"]["requests"])'
}

# Requests the Hub's windows refused so far (429 past a quota), all buckets.
refused() {
  curl -sf "$EP/admin/stats" "${auth[@]}" | python3 -c 'import json, sys; print(sum(json.load(sys.stdin)["request_windows"]["refused"].values()))'
}

# make_tree DIR SMALL BIG MIB: fresh content (small text rows in folders of 500, big random files).
make_tree() {
  local dir=$1 small=$2 big=$3 mib=$4 i
  python3 - "$dir" "$small" <<'EOF'
import os, sys, uuid
root, n = sys.argv[1], int(sys.argv[2])
salt = uuid.uuid4().hex
for i in range(n):
    d = os.path.join(root, "rows", f"part-{i // 500:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"row-{i:05d}.json"), "w") as f:
        f.write(f'{{"id": {i}, "salt": "{salt}", "text": "{"x" * (i % 300)}"}}\n')
EOF
  mkdir -p "$dir/shards"
  for ((i = 0; i < big; i++)); do
    head -c "$((mib << 20))" /dev/urandom >"$dir/shards/shard-$i.bin"
  done
  sync
}

cat >"$WORK/upload.py" <<'EOF'
import sys, time
from huggingface_hub import HfApi
ep, token, repo, folder = sys.argv[1:5]
api = HfApi(endpoint=ep, token=token)
t = time.monotonic()
api.upload_folder(folder_path=folder, repo_id=repo, repo_type="dataset")
print(f"{time.monotonic() - t:.3f}")
EOF

# Every local file on the Hub with its bytes; prints "files commits" or a reason.
cat >"$WORK/verify.py" <<'EOF'
import hashlib, os, sys
from huggingface_hub import HfApi
ep, token, repo, folder = sys.argv[1:5]
api = HfApi(endpoint=ep, token=token)
remote = {f.path: f for f in api.list_repo_tree(repo, repo_type="dataset", recursive=True) if hasattr(f, "size")}
bad = 0
for dirpath, _, names in os.walk(folder):
    for name in names:
        p = os.path.join(dirpath, name)
        rel = os.path.relpath(p, folder)
        data = open(p, "rb").read()
        r = remote.get(rel)
        if r is None or r.size != len(data):
            bad += 1
        elif r.lfs is not None:
            bad += r.lfs.sha256 != hashlib.sha256(data).hexdigest()
        else:
            bad += r.blob_id != hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
print(f"{bad} {len(api.list_repo_commits(repo, repo_type='dataset'))}")
EOF

# publish WAY SHAPE DIR REPO: one run on the new repo REPO; sets LAST="seconds api_calls rss_mib" and
# COMMITS0 (the new repo's commits before it).
publish() {
  local way=$1 shape=$2 dir=$3 repo=$4 name pid s e rss calls0 calls1 cache
  name=${repo#local/}
  curl -sf -X POST "$EP/api/repos/create" "${auth[@]}" -H 'content-type: application/json' \
    -d "{\"name\":\"$name\",\"organization\":\"local\",\"type\":\"dataset\"}" >/dev/null
  COMMITS0=$(curl -sf "$EP/api/datasets/$repo/commits/main" "${auth[@]}" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
  calls0=$(api_calls)
  if [ "$way" = upload_folder ]; then
    s=$("$PY" "$WORK/upload.py" "$EP" "$TOKEN" "$repo" "$dir") || { LAST="0 0 0"; return 1; }
    rss=0
  else
    cache="$WORK/cache-$name"
    mkdir -p "$MNT"
    local mode=()
    [ "$way" = close=stage ] && mode=(--close stage)
    "$BIN" mount --write "datasets/$repo" "$MNT" --daemon --endpoint "$EP" --token "$TOKEN" \
      --cache-dir "$cache" "${mode[@]}" >"$WORK/mount.out" 2>&1 || { cat "$WORK/mount.out"; LAST="0 0 0"; return 1; }
    pid=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$WORK/mount.out")
    calls0=$(api_calls)
    s=$(date +%s%N)
    cp -r "$dir/." "$MNT/" && "$BIN" sync "$MNT" >/dev/null
    local rc=$?
    e=$(date +%s%N)
    rss=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || echo 0)
    "$BIN" unmount "$MNT" >/dev/null 2>&1
    [ $rc -eq 0 ] || { LAST="0 0 0"; return 1; }
    s=$(python3 -c "print(f'{($e - $s) / 1e9:.3f}')")
  fi
  calls1=$(api_calls)
  LAST="$s $((calls1 - calls0)) $rss"
}

declare -A SHAPE_OF=([mixed]=500,4,64 [small]=10000,0,0 [huge]=10,2,1024)
WAYS=(upload_folder close=upload close=stage)
declare -A RATIOS=()
echo "publishing on a local Hub (api latency ${LATENCY} ms, request windows and commit limit on, $RUNS run(s))"
printf '| shape | way | seconds | MB/s | commits | api calls | mount peak RSS MiB | vs upload_folder |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for ((run = 1; run <= RUNS; run++)); do
  # Each run is measured as if in a 5-minute window of its own: back to back, three runs of the
  # small shape (and the checks' listings) would pass a free user's 1,000 API calls in one window,
  # and the next way would wait minutes for the next (as it should; but that is no figure).
  [ "$run" -gt 1 ] && curl -sf -X POST "$EP/admin/limits" "${auth[@]}" -H 'content-type: application/json' \
    -d '{"request_windows":{"reset":true}}' >/dev/null
  for spec in "${SHAPES[@]}"; do
    shape=${spec%%=*}
    dims=${SHAPE_OF[$shape]:-${spec#*=}}
    IFS=, read -r small big mib <<<"$dims"
    total_mb=$(python3 -c "print(($small * 60 + $big * ($mib << 20)) / 1e6)")
    base=""
    for way in "${WAYS[@]}"; do
      dir="$WORK/src-$shape"
      rm -rf "$dir"
      make_tree "$dir" "$small" "$big" "$mib"
      repo="local/pub-$shape-${way//=/-}"
      [ "$RUNS" -gt 1 ] && repo="$repo-$run"
      refused0=$(refused)
      publish "$way" "$shape" "$dir" "$repo"
      rc=$?
      refused1=$(refused)
      read -r secs calls rss <<<"$LAST"
      check "$shape ($small small + $big x $mib MiB) by $way" $rc
      [ $rc -eq 0 ] || continue
      read -r bad commits <<<"$("$PY" "$WORK/verify.py" "$EP" "$TOKEN" "$repo" "$dir" 2>&1 | tail -n1)"
      commits=$((${commits:-999} - COMMITS0))
      check "  every file on the Hub with its bytes ($bad wrong or missing)" "$([ "$bad" = 0 ] && echo 0 || echo 1)"
      check "  no request refused by the Hub's windows ($((refused1 - refused0)) refused)" "$([ "$refused1" = "$refused0" ] && echo 0 || echo 1)"
      [ "$way" = upload_folder ] ||
        check "  $commits commits, within the default budget's burst of 8 (no refill waited for)" "$([ "$commits" -le 8 ] 2>/dev/null && echo 0 || echo 1)"
      [ "$way" = upload_folder ] && base=$secs
      ratio=$(python3 -c "print(f'{$base / $secs:.2f}' if '$base' and $secs > 0 else '-')")
      mbs=$(python3 -c "print(f'{$total_mb / $secs:.0f}' if $secs > 0 else '-')")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$shape" "$way" "$secs" "$mbs" "$commits" "$calls" \
        "$([ "$rss" = 0 ] && echo - || echo "$rss")" "$ratio"
      [ "$way" = upload_folder ] || RATIOS[$shape $way]+="$ratio "
      rm -rf "$dir" "$WORK/cache-${repo#local/}"
    done
  done
done
if [ "$RUNS" -gt 1 ]; then
  printf '\n| shape | way | ratios to upload_folder, run by run | median |\n|---|---|---|---|\n'
  for spec in "${SHAPES[@]}"; do
    shape=${spec%%=*}
    for way in "${WAYS[@]:1}"; do
      r="${RATIOS[$shape $way]:-}"
      med=$(python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[1:] if x != '-']; print(f'{statistics.median(v):.2f}' if v else '-')" $r)
      printf '| %s | %s | %s | %s |\n' "$shape" "$way" "${r% }" "$med"
    done
  done
fi
echo "bench-publish: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
