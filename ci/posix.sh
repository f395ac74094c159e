#!/usr/bin/env bash
# POSIX suites nobody here wrote, run on a writable FUSE mount of a local-Hub dataset (or, with
# --bucket, of a local-Hub bucket; with --overlay, on an overlay mount of a local-Hub model repo
# made with a read token, whose fsx file is a Hub file, copied up by fsx's first open):
#   bash ci/posix.sh HUBFS_BIN [--long] [--bucket | --overlay]
#
#   pjdfstest 0.2.2  every test except those in ci/pjdfstest-skip.txt (none left: hard links work),
#                    with the feature set tmpfs passes here. Prints
#                    `pjdfstest: N passed, M failed, K skipped` and fails when M > 0 or N is below the
#                    floor recorded in ci/pjdfstest-skip.txt.
#   fsx 0.3.2        100,000 operations (1,000,000 with --long) on one file in the mount, ending
#                    "A-OK"; the file is a hard link of a second name made first (fsx has no link
#                    operation). Then unmount (which drains the commits), remount, and compare both
#                    names, in the mount and on the Hub, with fsx's final image (the same seeded run
#                    on local disk); the names must still be one inode with st_nlink 2.
# With --overlay, the remount compares the layer (nothing reached the Hub), then `hubfs overlay
# commit` publishes it with a write token and the Hub's files are compared.
# Both tools are installed with `cargo install --locked` if missing. Ends with `posix: N passed, M failed`
# (`posix-bucket: …` with --bucket, `posix-overlay: …` with --overlay).
set -uo pipefail

BIN="${1:?usage: ci/posix.sh HUBFS_BIN [--long] [--bucket | --overlay]}"
LONG=0
BUCKET=0
OVERLAY=0
for a in "${@:2}"; do
  case "$a" in
    --long) LONG=1 ;;
    --bucket) BUCKET=1 ;;
    --overlay) OVERLAY=1 ;;
    *) echo "unknown option $a"; exit 2 ;;
  esac
done
SUMMARY=posix # the last line's prefix, which ci/test.sh counts
[ "$BUCKET" = 1 ] && SUMMARY=posix-bucket
[ "$OVERLAY" = 1 ] && SUMMARY=posix-overlay
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-posix.XXXXXX")"
# pjdfstest runs some cases as other users (nobody, daemon): they must reach the mount point.
chmod 755 "$WORK"
MNT="$WORK/mnt"
OTHER_FS="$WORK/other" # pjdfstest's second file system (EXDEV cases): any local directory
PIDS=()
MOUNT_PID=""
cleanup() {
  umount -l "$MNT" 2>/dev/null
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
finish() {
  echo "$SUMMARY: $PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
  exit $?
}

# --- tools ---------------------------------------------------------------------------------------------
install_tool() { # binary, crate, version
  if command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -q "$3"; then return 0; fi
  [ -x "$HOME/.cargo/bin/$1" ] && "$HOME/.cargo/bin/$1" --version 2>/dev/null | grep -q "$3" && return 0
  echo "installing $2 $3 (cargo install --locked)"
  cargo install --quiet --locked "$2" --version "$3"
}
export PATH="$HOME/.cargo/bin:$PATH"
install_tool pjdfstest pjdfstest 0.2.2
check "pjdfstest 0.2.2 installed" $?
install_tool fsx fsx 0.3.2
check "fsx 0.3.2 installed" $?
id nobody >/dev/null 2>&1 && getent group nogroup >/dev/null && id daemon >/dev/null 2>&1
check "users nobody/nogroup and daemon exist (pjdfstest's dummy_auth)" $?

# --- local Hub and a writable mount -------------------------------------------------------------------
start_local_hub
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home"
if [ "$BUCKET" = 1 ]; then
  SOURCE=buckets/local/posix WRITE_ARGS=() # a bucket mounts writable by default
  DOWNLOAD="$EP/buckets/local/posix/resolve/fsx"
  curl -sf -X POST "$EP/api/buckets/local/posix" -H "authorization: Bearer $HF_TOKEN" \
    -H 'content-type: application/json' -d '{}' >/dev/null
  check "bucket local/posix created" $?
elif [ "$OVERLAY" = 1 ]; then
  SOURCE=local/posix WRITE_ARGS=(--overlay) MOUNT_TOKEN=hf_local_read
  DOWNLOAD="$EP/local/posix/resolve/main/fsx"
  curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" \
    -H 'content-type: application/json' -d '{"name":"posix","organization":"local","type":"model"}' >/dev/null &&
    head -c 262144 /dev/urandom | base64 -w0 >"$WORK/seed.b64" &&
    { printf '{"key":"header","value":{"summary":"seed"}}\n{"key":"file","value":{"path":"fsx/fsx.bin","encoding":"base64","content":"'
      cat "$WORK/seed.b64"; printf '"}}\n'; } >"$WORK/seed.ndjson" &&
    curl -sf -X POST "$EP/api/models/local/posix/commit/main" -H "authorization: Bearer $HF_TOKEN" \
      -H 'content-type: application/x-ndjson' --data-binary @"$WORK/seed.ndjson" >/dev/null
  check "model repo local/posix created with a 256 KiB fsx/fsx.bin" $?
else
  SOURCE=datasets/local/posix WRITE_ARGS=(--write)
  DOWNLOAD="$EP/datasets/local/posix/resolve/main/fsx"
  curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" \
    -H 'content-type: application/json' -d '{"name":"posix","organization":"local","type":"dataset"}' >/dev/null
  check "dataset local/posix created" $?
fi

mkdir -p "$MNT" "$OTHER_FS"
start_mount() { # extra args...
  # --allow-other: pjdfstest switches to other users (nobody, daemon) to check permissions.
  HF_TOKEN="${MOUNT_TOKEN:-$HF_TOKEN}" "$BIN" mount "${WRITE_ARGS[@]}" "$SOURCE" "$MNT" --cache-dir "$WORK/cache" \
    --allow-other "$@" >"$WORK/mount.out" 2>>"$WORK/mount.err" &
  MOUNT_PID=$!
  PIDS+=($MOUNT_PID)
  wait_line "$WORK/mount.out" "mounted " >/dev/null
}
stop_mount() {
  kill -TERM "$MOUNT_PID" 2>/dev/null
  wait "$MOUNT_PID" 2>/dev/null
}

start_mount
check "hubfs mount of $SOURCE (writable) is up" $? || finish

# --- pjdfstest -------------------------------------------------------------------------------------------
SKIP_FILE="$ROOT/ci/pjdfstest-skip.txt"
FLOOR="$(sed -n 's/^# floor: *\([0-9]\+\).*/\1/p' "$SKIP_FILE" | head -n1)"
FLOOR="${FLOOR:-0}"
cat >"$WORK/pjdfstest.toml" <<'EOF'
[features]
utimensat = {}
utime_now = {}
posix_fallocate = {}
rename_ctime = {}

[settings]
# 0.001 gives spurious timestamp failures on this kernel (shared/test-tools.md)
naptime = 0.02

[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
EOF
# Every test name, from a verbose run on a scratch directory (a second or two), minus the skip list.
mkdir -p "$WORK/scratch"
pjdfstest -c "$WORK/pjdfstest.toml" -p "$WORK/scratch" -v >"$WORK/pjd-names.log" 2>&1
grep -oE '^[a-z_0-9]+::[A-Za-z_0-9:]+' "$WORK/pjd-names.log" | sort -u >"$WORK/all-tests.txt"
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$SKIP_FILE" | awk '{print $1}' | sort -u >"$WORK/skip.txt"
comm -23 "$WORK/all-tests.txt" "$WORK/skip.txt" >"$WORK/run-tests.txt"
EXCLUDED=$(comm -12 "$WORK/all-tests.txt" "$WORK/skip.txt" | wc -l)
echo "pjdfstest: $(wc -l <"$WORK/all-tests.txt") tests, $EXCLUDED excluded by ci/pjdfstest-skip.txt"
# Exact matching compares against the full test path, before pjdfstest trims its module prefix.
mapfile -t RUN < <(sed 's/^/pjdfstest::tests::/' "$WORK/run-tests.txt")
(cd "$MNT" && timeout 900 pjdfstest -c "$WORK/pjdfstest.toml" -p "$MNT" -s "$OTHER_FS" -e "${RUN[@]}") \
  >"$WORK/pjdfstest.log" 2>&1
pjd_rc=$?
summary="$(grep -E '^Summary: ' "$WORK/pjdfstest.log" | tail -n1 | sed 's/\x1b\[[0-9;]*m//g')"
p_failed=$(sed -n 's/.* \([0-9]\+\) failed.*/\1/p' <<<"$summary")
p_skipped=$(sed -n 's/.* \([0-9]\+\) skipped.*/\1/p' <<<"$summary")
p_passed=$(sed -n 's/.* \([0-9]\+\) passed.*/\1/p' <<<"$summary")
if [ -z "$summary" ]; then
  echo "pjdfstest printed no summary (exit $pjd_rc); its last lines:"
  tail -n 30 "$WORK/pjdfstest.log"
  p_failed=1 p_skipped=0 p_passed=0
fi
sed 's/\x1b\[[0-9;]*m//g' "$WORK/pjdfstest.log" | grep -E 'FAILED|panicked' | head -n 40
echo "pjdfstest: $p_passed passed, $p_failed failed, $((p_skipped + EXCLUDED)) skipped (floor $FLOOR passed)"
[ "$p_failed" -eq 0 ] && [ "$p_passed" -ge "$FLOOR" ]
check "pjdfstest: no failure, at least $FLOOR passed" $?

# --- fsx -----------------------------------------------------------------------------------------------
OPS=100000
[ "$LONG" = 1 ] && OPS=1000000
# Every operation the mount supports. fsync, fdatasync and msync commit to the Hub (a commit takes
# tens of milliseconds), and close commits too: those are rarer than the rest, and the CI profile
# writes through mmap without msync (the kernel writes the pages back at munmap/close).
MSYNC_OFF=true
[ "$LONG" = 1 ] && MSYNC_OFF=false
cat >"$WORK/fsx.toml" <<EOF
flen = 262144
nomsyncafterwrite = $MSYNC_OFF
[weights]
close_open = 0.2
read = 10
write = 10
mapread = 4
mapwrite = 4
invalidate = 0.2
truncate = 2
fsync = 0.02
fdatasync = 0.02
posix_fallocate = 0
punch_hole = 0
copy_file_range = 0
sendfile = 1
EOF
mkdir -p "$WORK/fsx-artifacts" "$MNT/fsx"
# fsx opens its file with O_CREAT|O_TRUNC (the inode stays): a second name made now must follow
# every operation. (On the overlay, fsx.bin is a Hub file until then.)
if [ "$OVERLAY" = 1 ]; then
  [ "$(stat -c %s "$MNT/fsx/fsx.bin")" = 262144 ]
  check "overlay: fsx/fsx.bin is the Hub's 256 KiB file" $?
else
  : >"$MNT/fsx/fsx.bin"
fi
ln "$MNT/fsx/fsx.bin" "$MNT/fsx/fsx-link.bin" &&
  [ "$(stat -c %h "$MNT/fsx/fsx-link.bin")" = 2 ]
check "fsx.bin has a hard link, fsx-link.bin (st_nlink 2)" $?
start=$(date +%s)
fsx -f "$WORK/fsx.toml" -N "$OPS" -S 7 -P "$WORK/fsx-artifacts" "$MNT/fsx/fsx.bin" >"$WORK/fsx.log" 2>&1
fsx_rc=$?
echo "fsx: $OPS operations in $(( $(date +%s) - start )) s, exit $fsx_rc: $(tail -n1 "$WORK/fsx.log")"
grep -q "All operations completed A-OK" "$WORK/fsx.log" && [ "$fsx_rc" -eq 0 ]
check "fsx: $OPS operations end A-OK" $? || tail -n 30 "$WORK/fsx.log"

# fsx keeps its final image only in memory (it writes it out only on failure), and its operations
# depend on nothing but the seed and the config: the same run on local disk gives the image the file
# must end with.
mkdir -p "$WORK/ref"
fsx -f "$WORK/fsx.toml" -N "$OPS" -S 7 -P "$WORK/ref" "$WORK/ref/fsx.bin" >"$WORK/fsx-ref.log" 2>&1 &&
  grep -q "A-OK" "$WORK/fsx-ref.log"
check "fsx reference run on local disk" $?
good="$WORK/ref/fsx.bin"
[ -f "$good" ] && cmp "$good" "$MNT/fsx/fsx-link.bin"
check "the hard link fsx-link.bin equals fsx's final image" $?

# Unmount (drains every pending commit; an overlay keeps its layer), mount again, and compare with
# fsx's final image.
stop_mount
check "unmount drains the commits" $?
if [ "$OVERLAY" = 1 ]; then
  start_mount
  check "remount of the overlay" $?
  [ -f "$good" ] && cmp "$good" "$MNT/fsx/fsx.bin" && cmp "$good" "$MNT/fsx/fsx-link.bin"
  check "after a remount the layer's fsx.bin and fsx-link.bin equal fsx's final image" $?
  curl -sfL -H "authorization: Bearer $HF_TOKEN" "$DOWNLOAD/fsx.bin" -o "$WORK/hub-before.bin" &&
    [ "$(stat -c %s "$WORK/hub-before.bin")" = 262144 ] && ! cmp -s "$good" "$WORK/hub-before.bin"
  check "nothing of the layer reached the Hub before it was published" $?
  HF_TOKEN=hf_local_write timeout 300 "$BIN" overlay commit "$MNT" -m "fsx" >"$WORK/publish.out" 2>&1
  check "hubfs overlay commit publishes the layer: $(head -c 200 "$WORK/publish.out")" $?
  stop_mount
fi
start_mount
check "remount" $?
[ -f "$good" ] && cmp "$good" "$MNT/fsx/fsx.bin" && cmp "$good" "$MNT/fsx/fsx-link.bin"
check "after a remount the Hub's fsx.bin and fsx-link.bin equal fsx's final image ($(stat -c %s "$good" 2>/dev/null) bytes)" $?
[ "$(stat -c %h:%i "$MNT/fsx/fsx.bin")" = "$(stat -c %h:%i "$MNT/fsx/fsx-link.bin")" ] &&
  [ "$(stat -c %h "$MNT/fsx/fsx.bin")" = 2 ]
check "after a remount both names are one inode with st_nlink 2" $?
curl -sfL -H "authorization: Bearer $HF_TOKEN" "$DOWNLOAD/fsx.bin" -o "$WORK/from-hub.bin" && cmp "$good" "$WORK/from-hub.bin" &&
  curl -sfL -H "authorization: Bearer $HF_TOKEN" "$DOWNLOAD/fsx-link.bin" -o "$WORK/from-hub-link.bin" &&
  cmp "$good" "$WORK/from-hub-link.bin"
check "both names downloaded from the Hub equal fsx's final image" $?
stop_mount

finish
