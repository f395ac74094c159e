#!/usr/bin/env bash
# Small files read by the programs people copy and load datasets with:
#   bash ci/bench-listing.sh HUBFS_BIN PYTHON [--full]
#
# One dataset on the local Hub, uploaded with the stock client's upload_folder in one commit: `d/` holds N
# random 4 KiB files (binary: stored in Xet), `t/` N text files of 4 KiB (stored in git). N is 200, or 2,000
# with --full. Every run is a fresh read-only mount with a fresh cache, one reader:
#   cat        `cat` of every file in listing order (the reader of issue 18);
#   cat-shuf   `cat` of every file in a shuffled order;
#   cp         `cp -r DIR OUT` (GNU cp reads a folder in inode order);
#   tar        `tar -cf - DIR | tar -xf -` (readdir order);
#   rsync      `rsync -a DIR/ OUT/` (name order);
#   py-shuf    a Python reader opening the files in a shuffled order.
# Profiles: loopback, and every Hub request delayed 30 ms (a distant Hub). The Xet folder gets every reader
# on both; the git folder gets them on loopback (and on the 30 ms profile with --full: one round trip per
# file makes those runs long). `cat` in listing order also runs with --prefetch-files 0 at 30 ms, twice,
# alternated with the default, for issue 18's ratio.
# Prints files/s, the Hub's content requests (resolve + CAS) per file and the mount's peak RSS for each
# run. Checks: every file read has the source's sha256; listing order with the prefetch at least 5x the
# files/s without it; the shuffled order makes no more requests with the prefetch than without it; every
# reader of the Xet folder makes at most 0.1 Hub requests per file (issue 30). Ends with `bench-listing: N passed, M failed`.
# HUBFS_BENCH_LISTING_PARTS (default "baseline xet git") picks parts: `baseline` is issue 18's prefetch
# on/off runs, `xet` and `git` the readers over each folder; HUBFS_BENCH_LISTING_N overrides N. With
# HUBFS_BENCH_PEER=PATH to hf-mount-fuse (built by ../shared/tools/build-peer.sh; not in CI), part `peer`
# runs `cp -r` of the Xet folder through hf-mount on loopback, twice, alternated with hubfs, and prints
# the ratio (issue 30: hubfs >= 3x).
set -uo pipefail

BIN="${1:?usage: ci/bench-listing.sh HUBFS_BIN PYTHON [--full]}"
PY="${2:?usage: ci/bench-listing.sh HUBFS_BIN PYTHON [--full]}"
N=200
FULL=0
[ "${3:-}" = "--full" ] && { N=2000; FULL=1; }
N="${HUBFS_BENCH_LISTING_N:-$N}"
PARTS=" ${HUBFS_BENCH_LISTING_PARTS:-baseline xet git} "
has() { [[ "$PARTS" == *" $1 "* ]]; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-listing

mkdir -p "$MNT" "$WORK/src/d" "$WORK/src/t"
for i in $(seq -w 1 "$N"); do
  head -c 4096 /dev/urandom >"$WORK/src/d/sample-$i.bin"
  head -c 3072 /dev/urandom | base64 -w 0 >"$WORK/src/t/sample-$i.txt"
done
for dir in d t; do (cd "$WORK/src/$dir" && sha256sum -- *) >"$WORK/want-$dir.sums"; done

start_local_hub --commit-limit 0 --dir-entry-limit 100000
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_PROGRESS_BARS=1
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"name":"shards","organization":"local","type":"dataset"}' >/dev/null
"$PY" -c "from huggingface_hub import HfApi; HfApi().upload_folder(repo_id='local/shards', repo_type='dataset', folder_path='$WORK/src')" \
  >"$WORK/upload.log" 2>&1
check "$N binary and $N text files of 4 KiB uploaded in one commit with the stock client" $? || tail -n 5 "$WORK/upload.log"
stored=$(curl -sf "$EP/api/datasets/local/shards/tree/main/d" | "$PY" -c \
  'import json, sys; e = json.load(sys.stdin); print(len(e) > 0 and all("xetHash" in x for x in e))')
[ "$stored" = True ]
check "the binary files are stored in Xet ($stored)" $?

profile() { # profile MS: every Hub request delayed MS ms
  curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
    -d "{\"api\":{\"latency_ms\":$1},\"resolve\":{\"latency_ms\":$1},\"cas\":{\"latency_ms\":$1}}" >/dev/null
}

requests() { # resolve + CAS requests so far
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats" |
    "$PY" -c 'import json, sys; s = json.load(sys.stdin); print(s["resolve"]["requests"] + s["cas"]["requests"])'
}

# read_all READER DIR: reads every file of $MNT/DIR as READER does; writes "sha256  name" lines to got.sums.
read_all() {
  local reader="$1" dir="$2" out="$WORK/out"
  rm -rf "$out"; mkdir -p "$out"
  case "$reader" in
    cat | cat-shuf)
      (cd "$MNT/$dir" && ls) >"$WORK/names"
      [ "$reader" = cat-shuf ] && shuf --random-source=<(yes) "$WORK/names" -o "$WORK/names"
      (cd "$MNT/$dir" && while read -r f; do printf '%s  %s\n' "$(cat -- "$f" | sha256sum | cut -d' ' -f1)" "$f"; done \
        <"$WORK/names") >"$WORK/got.sums"
      return ;;
    cp) cp -r "$MNT/$dir" "$out/$dir" ;;
    tar) tar -C "$MNT" -cf - "$dir" | tar -C "$out" -xf - ;;
    rsync) rsync -a "$MNT/$dir/" "$out/$dir/" ;;
    py-shuf)
      "$PY" - "$MNT/$dir" >"$WORK/got.sums" <<'EOF'
import hashlib, os, random, sys
d = sys.argv[1]
names = os.listdir(d)
random.Random(30).shuffle(names)
for n in names:
    with open(os.path.join(d, n), "rb") as f:
        print(f"{hashlib.sha256(f.read()).hexdigest()}  {n}")
EOF
      return ;;
  esac
  (cd "$out/$dir" && sha256sum -- *) >"$WORK/got.sums"
}

# run READER DIR PROFILE_MS PREFETCH: a fresh mount and cache, READER over DIR; sets RATE (files/s) and REQS
# (Hub content requests per file) and RSS (the mount's peak, MiB); checks the bytes.
run() {
  local reader="$1" dir="$2" ms="$3" prefetch="$4" t0 t1 d0 d1
  profile "$ms"
  "$BIN" mount datasets/local/shards "$MNT" --cache-dir "$WORK/cache-$RANDOM$RANDOM" --prefetch-files "$prefetch" \
    >"$WORK/mount.out" 2>&1 &
  local mp=$!
  PIDS+=("$mp")
  wait_line "$WORK/mount.out" "mounted " >/dev/null || { cat "$WORK/mount.out"; RATE=0; REQS=9; return 1; }
  d0=$(requests)
  t0=$(date +%s%N)
  read_all "$reader" "$dir"
  t1=$(date +%s%N)
  d1=$(requests)
  RSS=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$mp/status")
  kill "$mp"; wait "$mp" 2>/dev/null
  sort -k2 "$WORK/got.sums" | diff -q - <(sort -k2 "$WORK/want-$dir.sums") >/dev/null
  check "$reader, $dir/, ${ms} ms, prefetch $prefetch: every file has the source's sha256" $?
  RATE=$(awk -v n="$N" -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", n / (ns / 1e9) }')
  REQS=$(awk -v n="$N" -v r=$((d1 - d0)) 'BEGIN { printf "%.3f", r / n }')
  echo "  figure: $reader, $dir/ ($([ "$dir" = d ] && echo Xet || echo git)), ${ms} ms, prefetch $prefetch: $RATE files/s, $REQS Hub requests per file, mount peak RSS $RSS MiB"
}

declare -A R Q
if has baseline; then
  # Issue 18's ratio: cat in listing order at 30 ms, prefetch on and off, alternated twice.
  for pass in 1 2; do
    for p in 16 0; do run cat d 30 "$p"; R[$p.$pass]=$RATE; Q[$p.$pass]=$REQS; done
  done
  run cat-shuf d 30 0; Q[0.s]=$REQS
fi

# Issue 30's readers.
for ms in 0 30; do
  if has xet; then
    for reader in cat cat-shuf cp tar rsync py-shuf; do
      run "$reader" d "$ms" 16; R[$reader.d.$ms]=$RATE; Q[$reader.d.$ms]=$REQS
      awk -v q="$REQS" 'BEGIN { exit !(q <= 0.1) }'
      check "$reader, Xet files, ${ms} ms: at most 0.1 Hub requests per file ($REQS; $RATE files/s)" $?
    done
  fi
  if has git && { [ "$ms" = 0 ] || [ "$FULL" = 1 ]; }; then
    for reader in cat cat-shuf cp tar rsync py-shuf; do run "$reader" t "$ms" 16; done
  fi
done

# cp -r through the closest peer, alternated with hubfs (loopback).
if has peer && [ -n "${HUBFS_BENCH_PEER:-}" ]; then
  PMNT="$WORK/peer-mnt"
  mkdir -p "$PMNT"
  declare -A P=()
  for pass in 1 2; do
    profile 0
    "$HUBFS_BENCH_PEER" --hub-endpoint "$EP" --hf-token "$HF_TOKEN" --cache-dir "$WORK/peer-cache-$pass" \
      repo datasets/local/shards "$PMNT" >"$WORK/peer.log" 2>&1 &
    pp=$!
    PIDS+=("$pp")
    for _ in $(seq 100); do mountpoint -q "$PMNT" && break; sleep 0.1; done
    d0=$(requests); t0=$(date +%s%N)
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"
    cp -r "$PMNT/d" "$WORK/out/d"
    t1=$(date +%s%N); d1=$(requests)
    prss=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$pp/status")
    umount -l "$PMNT"; kill "$pp"; wait "$pp" 2>/dev/null
    (cd "$WORK/out/d" && sha256sum -- *) | sort -k2 | diff -q - <(sort -k2 "$WORK/want-d.sums") >/dev/null
    check "hf-mount cp -r, d/, pass $pass: every file has the source's sha256" $?
    P[peer.$pass]=$(awk -v n="$N" -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", n / (ns / 1e9) }')
    echo "  figure: hf-mount cp -r, d/ (Xet), 0 ms: ${P[peer.$pass]} files/s, $(awk -v n="$N" -v r=$((d1 - d0)) 'BEGIN { printf "%.3f", r / n }') Hub requests per file, peak RSS $prss MiB"
    run cp d 0 16; P[hubfs.$pass]=$RATE
  done
  pr=$(awk -v a="${P[hubfs.1]}" -v b="${P[hubfs.2]}" -v c="${P[peer.1]}" -v d="${P[peer.2]}" 'BEGIN { printf "%.1f", (a + b) / (c + d) }')
  echo "  figure: cp -r of $N Xet files on loopback: hubfs ${P[hubfs.1]} and ${P[hubfs.2]} files/s, hf-mount ${P[peer.1]} and ${P[peer.2]}: ${pr}x"
  awk -v r="$pr" 'BEGIN { exit !(r >= 3) }'
  check "cp -r on loopback: hubfs at least 3x hf-mount (${pr}x)" $?
fi

if has baseline; then
  ratio=$(awk -v a="${R[16.1]}" -v b="${R[16.2]}" -v c="${R[0.1]}" -v d="${R[0.2]}" \
    'BEGIN { on = (a + b) / 2; off = (c + d) / 2; printf "%.1f", (off > 0 ? on / off : 0) }')
  echo "  figure: listing order, $N files of 4 KiB, 30 ms per request: ${R[16.1]} and ${R[16.2]} files/s with the prefetch, ${R[0.1]} and ${R[0.2]} without: ${ratio}x"
  awk -v r="$ratio" 'BEGIN { exit !(r >= 5) }'
  check "listing order with the prefetch at least 5x the files/s without it (${ratio}x)" $?
  if has xet; then
    awk -v a="${Q[cat-shuf.d.30]}" -v b="${Q[0.s]}" 'BEGIN { exit !(a <= b) }'
    check "shuffled order: no more Hub requests per file with the prefetch (${Q[cat-shuf.d.30]}) than without (${Q[0.s]})" $?
  fi
fi

echo "bench-listing: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
