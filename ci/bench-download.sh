#!/usr/bin/env bash
# One file of a model repo read through hubfs beside the stock client downloading it:
#   bash ci/bench-download.sh HUBFS_BIN PYTHON [MIB] [PASSES]
#
# A file of MIB MiB of random bytes (default 512) in a model repo on a local Hub, uploaded with the
# stock client (Xet). Per profile (loopback, then every request delayed 30 ms at 200 Mbit/s per
# connection; HUBFS_BENCH_PROFILES picks), PASSES times (default 2), alternated:
#   hf_hub_download   the whole file into a fresh cache (timed inside Python, after the import)
#   hubfs cat         the whole file through a fresh mount (fresh cache, page cache dropped)
#   hubfs tensor      one 8 MiB piece from the middle of the file (dd), as a loader taking one tensor
# Prints `| profile | way | seconds | Hub MiB | peak RSS MiB |` rows (the Hub's /admin/stats: /resolve/
# and CAS bodies; RSS of the Python process or of the mount). Checks: the downloaded and the cat'ed
# bytes equal the source's (sha256), so does the 8 MiB piece; a whole read costs <= 1.05 x the file.
# Speeds are printed, not checked. Ends with `bench-download: N passed, M failed`.
set -uo pipefail

BIN="$(realpath "${1:?usage: ci/bench-download.sh HUBFS_BIN PYTHON [MIB] [PASSES]}")"
PY="${2:?usage: ci/bench-download.sh HUBFS_BIN PYTHON [MIB] [PASSES]}"
MIB="${3:-512}"
ROUNDS="${4:-2}"
PROFILES="${HUBFS_BENCH_PROFILES:-loopback 30ms}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-download "${TMPDIR:-/var/tmp}"

mkdir -p "$MNT" "$WORK/src"
head -c "${MIB}M" /dev/urandom >"$WORK/src/model.safetensors"
WANT="$(sha256sum <"$WORK/src/model.safetensors" | cut -d' ' -f1)"
PIECE="$(dd if="$WORK/src/model.safetensors" bs=1M count=8 skip=$((MIB / 2)) status=none | sha256sum | cut -d' ' -f1)"
start_local_hub --commit-limit 0
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_PROGRESS_BARS=1
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"name":"weights","organization":"local","type":"model"}' >/dev/null
"$PY" -c "from huggingface_hub import HfApi; HfApi().upload_file(path_or_fileobj='$WORK/src/model.safetensors', path_in_repo='model.safetensors', repo_id='local/weights')" \
  >"$WORK/upload.log" 2>&1
check "uploaded with the stock client ($MIB MiB)" $? || tail -n 5 "$WORK/upload.log"

hub() { curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats${1:-}"; }
hubmib() { hub | "$PY" -c "import json,sys; d=json.load(sys.stdin); print(round((d['resolve']['bytes_out']+d['cas']['bytes_out'])/1048576,1))"; }
now() { date +%s.%N; }
row() { printf '| %s | %s | %.2f | %s | %s |\n' "$PROFILE" "$1" "$2" "$3" "$4"; }
fresh() { sync; echo 3 >/proc/sys/vm/drop_caches; hub '?reset=1' >/dev/null; }
# whole MIB: checks a whole read cost at most 1.05 x the file
whole() {
  awk -v m="$1" -v n="$MIB" 'BEGIN { exit !(m <= 1.05 * n) }'
  check "$PROFILE, $2: Hub bytes $1 MiB <= 1.05 x the file" $?
}

download() {
  local secs got mib cache="$WORK/dl-$RANDOM$RANDOM"
  fresh
  secs=$(/usr/bin/time -f %M -o "$WORK/rss" "$PY" -c "import time; from huggingface_hub import hf_hub_download; t = time.perf_counter(); p = hf_hub_download('local/weights', 'model.safetensors', cache_dir='$cache'); print(time.perf_counter() - t); print(p)" 2>"$WORK/dl.err")
  mib=$(hubmib)
  got="$(sha256sum <"$(echo "$secs" | sed -n 2p)" 2>/dev/null | cut -d' ' -f1)"
  [ "$got" = "$WANT" ]
  check "$PROFILE, hf_hub_download: the file's sha256" $? || tail -n 3 "$WORK/dl.err"
  row "hf_hub_download, whole file" "$(echo "$secs" | head -n1)" "$mib" "$(($(cat "$WORK/rss") / 1024))"
  rm -rf "$cache"
}

# mounted WAY WANT_SHA CMD...: a fresh mount, the page cache dropped, CMD (printing the bytes' sha256) timed
mounted() {
  local way="$1" want="$2" mp t0 t1 rss got mib
  shift 2
  "$BIN" mount local/weights "$MNT" --cache-dir "$WORK/cache-$RANDOM$RANDOM" >"$WORK/mount.out" 2>&1 &
  mp=$!
  PIDS+=("$mp")
  wait_line "$WORK/mount.out" "mounted " >/dev/null || { cat "$WORK/mount.out"; return 1; }
  fresh
  t0=$(now)
  got="$("$@" | sha256sum | cut -d' ' -f1)"
  t1=$(now)
  mib=$(hubmib)
  rss=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$mp/status")
  kill "$mp"
  wait "$mp" 2>/dev/null
  umount -l "$MNT" 2>/dev/null
  [ "$got" = "$want" ]
  check "$PROFILE, $way: the bytes' sha256" $?
  row "$way" "$(echo "$t1 - $t0" | bc)" "$mib" "$rss"
  LAST_MIB="$mib"
}

echo "file: $MIB MiB (Xet), build: $BIN"
printf '| profile | way | seconds | Hub MiB | peak RSS MiB |\n|---|---|---|---|---|\n'
for PROFILE in $PROFILES; do
  set_profile "$PROFILE"
  for _ in $(seq 1 "$ROUNDS"); do
    download
    mounted "hubfs, whole file (cat)" "$WANT" cat "$MNT/model.safetensors"
    whole "$LAST_MIB" "hubfs, whole file (cat)"
    mounted "hubfs, one 8 MiB tensor" "$PIECE" dd if="$MNT/model.safetensors" bs=1M count=8 skip=$((MIB / 2)) status=none
  done
done
echo "bench-download: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
