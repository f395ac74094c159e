#!/usr/bin/env bash
# Writable-mount smoke test with the real binary and stock clients:
#   bash ci/write-smoke.sh HUBFS_BIN PYTHON
# Starts `hubfs local-hub`, mounts a dataset with `hubfs mount --write`, writes through the kernel
# with shell tools (0 B, 1 B, 1 MiB, 300 MiB, random writes, append, rename, delete), and checks
# the result from the Hub's side with the stock Python client (huggingface_hub, PYTHON must have it).
# Then the crash case: the CAS stalls mid-upload, hubfs is killed with -9, the next mount of the
# same repo and cache dir commits the file. Prints `write-smoke: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/write-smoke.sh HUBFS_BIN PYTHON}"
PY="${2:?usage: ci/write-smoke.sh HUBFS_BIN PYTHON}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-write-smoke.XXXXXX")"
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
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_local_hub
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HUB_DISABLE_TELEMETRY=1 HF_HOME="$WORK/hf-home"
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" \
  -H 'content-type: application/json' -d '{"name":"smoke","organization":"local","type":"dataset"}' >/dev/null
check "dataset created" $?

mkdir -p "$MNT"
start_mount() { # extra args...
  "$BIN" mount --write datasets/local/smoke "$MNT" --cache-dir "$WORK/cache" "$@" \
    >"$WORK/mount.out" 2>"$WORK/mount.err" &
  MOUNT_PID=$!
  PIDS+=($MOUNT_PID)
  wait_line "$WORK/mount.out" "mounted " >/dev/null
}
start_mount
check "hubfs mount --write is up" $?

# Writes through the kernel with ordinary tools.
mkdir -p "$MNT/data/deep"
: >"$MNT/empty.txt"
printf x >"$MNT/one.txt"
head -c 1048576 /dev/urandom >"$WORK/one_mib"; cp "$WORK/one_mib" "$MNT/data/one_mib.bin"
head -c 314572800 /dev/urandom >"$WORK/big"; cp "$WORK/big" "$MNT/data/deep/big.bin"
check "300 MiB copy closed without error" $?
printf 'line one\n' >"$MNT/log.txt"; printf 'line two\n' >>"$MNT/log.txt"
# Random writes into the committed 1 MiB file.
printf 'PATCH' | dd of="$MNT/data/one_mib.bin" bs=1 seek=500000 conv=notrunc status=none
printf 'PATCH' | dd of="$WORK/one_mib" bs=1 seek=500000 conv=notrunc status=none
printf 'tmp' >"$MNT/tmp.txt"; mv "$MNT/tmp.txt" "$MNT/data/renamed.txt"
printf 'bye' >"$MNT/doomed.txt"; rm "$MNT/doomed.txt"

# status shows the mount; then unmount drains pending renames and deletes.
"$BIN" status --cache-dir "$WORK/cache" >"$WORK/status.out" 2>&1
grep -q "datasets/local/smoke@main at $MNT" "$WORK/status.out"
check "hubfs status lists the mount" $?
kill -TERM "$MOUNT_PID"; wait "$MOUNT_PID" 2>/dev/null
check "SIGTERM unmounts after draining" $?

cat >"$WORK/verify.py" <<'EOF'
import hashlib, json, os, sys
from huggingface_hub import HfApi, hf_hub_download
want = json.loads(sys.argv[1])
api = HfApi()
files = sorted(f for f in api.list_repo_files("local/smoke", repo_type="dataset") if f != ".gitattributes")
ok = True
if files != sorted(want):
    print(f"tree differs: hub {files} vs mount {sorted(want)}"); ok = False
for path, sha in want.items():
    p = hf_hub_download("local/smoke", path, repo_type="dataset", cache_dir=os.environ["HF_HOME"] + "/dl")
    got = hashlib.sha256(open(p, "rb").read()).hexdigest()
    if got != sha:
        print(f"{path}: sha256 {got} != {sha}"); ok = False
sys.exit(0 if ok else 1)
EOF
sha() { sha256sum "$1" | cut -d' ' -f1; }
WANT=$(printf '{"empty.txt":"%s","one.txt":"%s","data/one_mib.bin":"%s","data/deep/big.bin":"%s","log.txt":"%s","data/renamed.txt":"%s"}' \
  "$(printf '' | sha256sum | cut -d' ' -f1)" "$(printf x | sha256sum | cut -d' ' -f1)" "$(sha "$WORK/one_mib")" \
  "$(sha "$WORK/big")" "$(printf 'line one\nline two\n' | sha256sum | cut -d' ' -f1)" "$(printf tmp | sha256sum | cut -d' ' -f1)")
timeout 300 "$PY" "$WORK/verify.py" "$WANT"
check "huggingface_hub sees the tree and the sha256 of every file" $?

# Crash mid-upload: the CAS accepts and never answers, hubfs is killed with -9 while close() waits.
start_mount
check "remount is up" $?
ADMIN='{"cas":{"stall_rate":1.0}}'
curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' -d "$ADMIN" >/dev/null
head -c 20971520 /dev/urandom >"$WORK/crash"
(cp "$WORK/crash" "$MNT/crash.bin" 2>/dev/null) &
CP_PID=$!
sleep 3
curl -sf "$EP/api/datasets/local/smoke/paths-info/main" -H 'content-type: application/json' \
  -d '{"paths":["crash.bin"]}' | grep -q crash.bin
check "the upload is stuck (not on the Hub) when hubfs is killed" $(( $? == 0 ))
kill -9 "$MOUNT_PID"; wait "$MOUNT_PID" 2>/dev/null
wait "$CP_PID" 2>/dev/null
umount -l "$MNT" 2>/dev/null
curl -sf -X POST "$EP/admin/faults" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"cas":{"stall_rate":0.0}}' >/dev/null
start_mount
check "mount after kill -9 is up" $?
landed=1
for i in $(seq 1 120); do
  if curl -sf "$EP/api/datasets/local/smoke/paths-info/main" -H 'content-type: application/json' \
       -d '{"paths":["crash.bin"]}' | grep -q crash.bin; then landed=0; break; fi
  sleep 0.5
done
check "the file closed before kill -9 landed after the restart" $landed
curl -sfL "$EP/datasets/local/smoke/resolve/main/crash.bin" -o "$WORK/crash.hub"
cmp -s "$WORK/crash" "$WORK/crash.hub"
check "its bytes are exactly what was written" $?
kill -TERM "$MOUNT_PID"; wait "$MOUNT_PID" 2>/dev/null

echo "write-smoke: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
