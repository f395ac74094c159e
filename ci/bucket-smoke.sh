#!/usr/bin/env bash
# Bucket mounts as README.md shows them, checked with the stock Python client:
#   bash ci/bucket-smoke.sh HUBFS_BIN PYTHON
# Starts `hubfs local-hub`, creates a bucket with huggingface_hub, mounts it with `hubfs mount --daemon`
# from a shell that exits, writes through the kernel with shell tools (0 B, 1 B, 1 MiB, 64 MiB, append,
# overwrite, rename, delete, a directory rename, `rsync -a` of a tree with old mtimes), then checks from
# the Hub's side with huggingface_hub: the tree, every file's sha256 (download_bucket_files), and the
# mtimes rsync set. A second `rsync -a` changes nothing on the Hub. A file added by the stock client
# appears in the mount after --metadata-ttl. Then the crash case: the CAS stalls mid-upload, the mount
# is killed with -9, the next mount of the same bucket and cache dir lands the file.
# Prints `bucket-smoke: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bucket-smoke.sh HUBFS_BIN PYTHON}"
PY="${2:?usage: ci/bucket-smoke.sh HUBFS_BIN PYTHON}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-bucket-smoke.XXXXXX")"
MNT="$WORK/mnt"
PIDS=()
MOUNT_PID=""
cleanup() {
  [ -n "$MOUNT_PID" ] && kill -TERM "$MOUNT_PID" 2>/dev/null
  umount -l "$MNT" 2>/dev/null
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v rsync >/dev/null || { apt-get install -y -q rsync >/dev/null 2>&1 || true; }

start_local_hub
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HUB_DISABLE_TELEMETRY=1 HF_HOME="$WORK/hf-home"
export HUBFS_RUNTIME_DIR="$WORK/run"
"$PY" -c 'from huggingface_hub import HfApi; HfApi().create_bucket("local/smoke")' >"$WORK/create.out" 2>&1
check "huggingface_hub create_bucket" $? || cat "$WORK/create.out"

mkdir -p "$MNT"
# mount_daemon: `hubfs mount --daemon` from a shell that exits at once, as a user's would.
mount_daemon() {
  setsid bash -c "'$BIN' mount --daemon buckets/local/smoke '$MNT' --cache-dir '$WORK/cache' --metadata-ttl 2s" \
    >"$WORK/mount.out" 2>&1 </dev/null
  local rc=$?
  MOUNT_PID="$(sed -n 's/^mounted .* (pid \([0-9]*\))$/\1/p' "$WORK/mount.out" | tail -n1)"
  [ "$rc" -eq 0 ] && [ -n "$MOUNT_PID" ]
}
mount_daemon
check "hubfs mount --daemon buckets/local/smoke (writable by default)" $? || { cat "$WORK/mount.out"; exit 1; }

# Writes through the kernel with ordinary tools.
mkdir -p "$MNT/data/deep"
: >"$MNT/empty.txt"
printf x >"$MNT/one.txt"
head -c 1048576 /dev/urandom >"$WORK/one_mib"; cp "$WORK/one_mib" "$MNT/data/one_mib.bin"
head -c 67108864 /dev/urandom >"$WORK/big"; cp "$WORK/big" "$MNT/data/deep/big.bin"
check "64 MiB copy closed without error" $?
printf 'line one\n' >"$MNT/log.txt"; printf 'line two\n' >>"$MNT/log.txt"
printf 'v1' >"$MNT/over.txt"; printf 'version two' >"$MNT/over.txt"
printf 'tmp' >"$MNT/tmp.txt"; mv "$MNT/tmp.txt" "$MNT/data/renamed.txt"
printf 'bye' >"$MNT/doomed.txt"; rm "$MNT/doomed.txt"
mkdir -p "$MNT/olddir/sub"; printf 'in a dir' >"$MNT/olddir/sub/f.txt"; mv "$MNT/olddir" "$MNT/newdir"
# A tree with old mtimes, copied with rsync -a.
mkdir -p "$WORK/src/a/b"
for i in 1 2 3 4 5; do head -c $((i * 1000)) /dev/urandom >"$WORK/src/a/f$i.bin"; done
printf 'deep' >"$WORK/src/a/b/deep.txt"
touch -d '2021-03-04 05:06:07.250' "$WORK/src/a/f1.bin" "$WORK/src/a/b/deep.txt"
touch -d '2019-12-31 23:59:59' "$WORK/src/a/f2.bin"
rsync -a "$WORK/src/" "$MNT/tree/" 2>"$WORK/rsync.err"
check "rsync -a into the bucket mount" $? || cat "$WORK/rsync.err"
"$BIN" sync "$MNT" >"$WORK/sync.out" 2>&1
check "hubfs sync (everything on the Hub)" $? || cat "$WORK/sync.out"

sha() { sha256sum "$1" | cut -d' ' -f1; }
{
  printf 'empty.txt %s\n' "$(printf '' | sha256sum | cut -d' ' -f1)"
  printf 'one.txt %s\n' "$(printf x | sha256sum | cut -d' ' -f1)"
  printf 'data/one_mib.bin %s\n' "$(sha "$WORK/one_mib")"
  printf 'data/deep/big.bin %s\n' "$(sha "$WORK/big")"
  printf 'log.txt %s\n' "$(printf 'line one\nline two\n' | sha256sum | cut -d' ' -f1)"
  printf 'over.txt %s\n' "$(printf 'version two' | sha256sum | cut -d' ' -f1)"
  printf 'data/renamed.txt %s\n' "$(printf tmp | sha256sum | cut -d' ' -f1)"
  printf 'newdir/sub/f.txt %s\n' "$(printf 'in a dir' | sha256sum | cut -d' ' -f1)"
  (cd "$WORK/src" && find . -type f | sed 's|^\./||' | while read -r f; do printf 'tree/%s %s %s\n' "$f" "$(sha "$f")" "$(stat -c %Y "$f")"; done)
} >"$WORK/want.txt"

cat >"$WORK/verify.py" <<'EOF'
import hashlib, os, sys, tempfile
from huggingface_hub import HfApi
want, bucket = {}, sys.argv[2]
for line in open(sys.argv[1]):
    parts = line.split()
    want[parts[0]] = (parts[1], int(parts[2]) if len(parts) > 2 else None)
api = HfApi()
files = {f.path: f for f in api.list_bucket_tree(bucket, recursive=True) if f.type == "file"}
ok = True
if sorted(files) != sorted(want):
    print(f"tree differs: hub {sorted(files)} vs mount {sorted(want)}"); ok = False
with tempfile.TemporaryDirectory() as d:
    pairs = [(files[p], os.path.join(d, p.replace("/", "__"))) for p in want if p in files]
    api.download_bucket_files(bucket, pairs)
    for f, local in pairs:
        got = hashlib.sha256(open(local, "rb").read()).hexdigest()
        sha, mtime = want[f.path]
        if got != sha:
            print(f"{f.path}: sha256 {got} != {sha}"); ok = False
        if mtime is not None and (f.mtime is None or int(f.mtime.timestamp()) != mtime):
            print(f"{f.path}: mtime {f.mtime} != {mtime} (rsync -a set it)"); ok = False
sys.exit(0 if ok else 1)
EOF
timeout 300 "$PY" "$WORK/verify.py" "$WORK/want.txt" local/smoke
check "huggingface_hub: the bucket's tree, every file's sha256, rsync's mtimes" $?

# A second rsync -a finds nothing to do, and the bucket does not change.
stamp() { "$PY" -c 'from huggingface_hub import HfApi; i = HfApi().bucket_info("local/smoke"); print(getattr(i, "updated_at", None), i.size, i.total_files)'; }
before="$(stamp)"
rsync -a -i "$WORK/src/" "$MNT/tree/" >"$WORK/rsync2.out" 2>&1
[ ! -s "$WORK/rsync2.out" ]
check "a second rsync -a transfers nothing" $? || head "$WORK/rsync2.out"
"$BIN" sync "$MNT" >/dev/null 2>&1
[ "$before" = "$(stamp)" ]
check "and changes nothing in the bucket" $?

# A change made by someone else shows up once the metadata TTL (2 s) passed.
printf 'from elsewhere' >"$WORK/ext.txt"
"$PY" -c "from huggingface_hub import HfApi; HfApi().batch_bucket_files('local/smoke', add=[('$WORK/ext.txt', 'ext.txt')])" >"$WORK/ext.out" 2>&1
check "huggingface_hub batch_bucket_files adds ext.txt" $? || cat "$WORK/ext.out"
seen=1
for i in $(seq 1 50); do
  if [ "$(cat "$MNT/ext.txt" 2>/dev/null)" = "from elsewhere" ]; then seen=0; break; fi
  sleep 0.2
done
check "the mount shows the other client's file within the metadata TTL" $seen

# Crash mid-upload: the CAS accepts and never answers, the mount is killed with -9 while close() waits.
ADMIN() { curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' -d "$1" >/dev/null; }
ADMIN '{"cas":{"stall_rate":1.0}}'
head -c 20971520 /dev/urandom >"$WORK/crash"
(cp "$WORK/crash" "$MNT/crash.bin" 2>/dev/null) &
CP_PID=$!
sleep 3
in_bucket() { "$PY" -c "import sys; from huggingface_hub import HfApi; sys.exit(0 if list(HfApi().get_bucket_paths_info('local/smoke', ['$1'])) else 1)" 2>/dev/null; }
in_bucket crash.bin
check "the upload is stuck (not in the bucket) when the mount is killed" $(( $? == 0 ))
kill -9 "$MOUNT_PID"
wait "$CP_PID" 2>/dev/null
umount -l "$MNT" 2>/dev/null
ADMIN '{"cas":{"stall_rate":0.0}}'
mount_daemon
check "mount after kill -9 is up" $?
landed=1
for i in $(seq 1 120); do
  if in_bucket crash.bin; then landed=0; break; fi
  sleep 0.5
done
check "the file closed before kill -9 landed after the restart" $landed
curl -sfL -H "authorization: Bearer $HF_TOKEN" "$EP/buckets/local/smoke/resolve/crash.bin" -o "$WORK/crash.hub"
cmp -s "$WORK/crash" "$WORK/crash.hub"
check "its bytes are exactly what was written" $?
"$BIN" unmount "$MNT" >"$WORK/unmount.out" 2>&1
check "hubfs unmount" $? || cat "$WORK/unmount.out"
MOUNT_PID=""

# NFS: a --serve-only bucket server (writable by default), files copied in with libnfs's nfs-cp, checked
# with huggingface_hub after the server drained.
if command -v nfs-cp >/dev/null; then
  "$PY" -c 'from huggingface_hub import HfApi; HfApi().create_bucket("local/smoke-nfs")' >/dev/null 2>&1
  mkdir -p "$WORK/nfs"
  setsid bash -c "'$BIN' mount --daemon --nfs --serve-only buckets/local/smoke-nfs '$WORK/nfs' --cache-dir '$WORK/nfs-cache' --nfs-addr 127.0.0.1:0" \
    >"$WORK/nfs.out" 2>&1 </dev/null
  check "hubfs mount --nfs --serve-only of a bucket" $? || cat "$WORK/nfs.out"
  port="$(sed -n 's|^mounted .* at nfs://[0-9.]*:\([0-9]*\)/ .*|\1|p' "$WORK/nfs.out")"
  q="?nfsport=$port&mountport=$port"
  head -c 3000000 /dev/urandom >"$WORK/nfs-big"; printf 'over nfs' >"$WORK/nfs-small"
  timeout 60 nfs-cp "$WORK/nfs-big" "nfs://127.0.0.1//big.bin$q" >/dev/null 2>&1 &&
    timeout 60 nfs-cp "$WORK/nfs-small" "nfs://127.0.0.1//small.txt$q" >/dev/null 2>&1
  check "nfs-cp of two files into the bucket server" $?
  "$BIN" unmount "$WORK/nfs" >/dev/null 2>&1
  check "hubfs unmount drains the NFS server" $?
  printf 'big.bin %s\nsmall.txt %s\n' "$(sha "$WORK/nfs-big")" "$(sha "$WORK/nfs-small")" >"$WORK/want-nfs.txt"
  timeout 120 "$PY" "$WORK/verify.py" "$WORK/want-nfs.txt" local/smoke-nfs
  check "huggingface_hub: the NFS-written bucket's tree and sha256" $?
else
  check "nfs-cp (libnfs-utils) is installed" 1
fi

echo "bucket-smoke: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
