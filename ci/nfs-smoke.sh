#!/usr/bin/env bash
# NFS smoke test with the libnfs tools (a client nobody here wrote):
#   bash ci/nfs-smoke.sh HUBFS_BIN
# Starts `hubfs local-hub --seed-demo`, serves demo/tiny-model with `hubfs serve-nfs`, then checks
# that nfs-ls lists the repo's files and that nfs-cat returns the bytes the Hub serves.
# Prints `nfs-smoke: N passed, M failed`; exits non-zero on any failure.
set -uo pipefail

BIN="${1:?usage: ci/nfs-smoke.sh HUBFS_BIN}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-nfs-smoke.XXXXXX")"
PIDS=()
cleanup() {
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_local_hub --seed-demo

HF_ENDPOINT="$EP" HF_TOKEN=hf_local_read "$BIN" serve-nfs demo/tiny-model --nfs-addr 127.0.0.1:0 \
  --cache-dir "$WORK/cache" >"$WORK/nfs.out" 2>"$WORK/nfs.err" &
PIDS+=($!)
ADDR="$(wait_line "$WORK/nfs.out" "nfs: ")" || { echo "serve-nfs did not start"; cat "$WORK/nfs.err"; exit 1; }
PORT="${ADDR##*:}"
URL_Q="?nfsport=$PORT&mountport=$PORT"
echo "nfs-smoke: local Hub $EP, NFS server $ADDR"

# nfs-ls lists the repo root.
timeout 60 nfs-ls "nfs://127.0.0.1/$URL_Q" >"$WORK/ls.out" 2>&1
ls_rc=$?
for f in config.json model.safetensors tokenizer.json README.md; do
  grep -q " $f\$" "$WORK/ls.out"
  check "nfs-ls shows $f" $(( ls_rc != 0 || $? != 0 ))
done

# nfs-cat returns exactly the Hub's bytes (a regular file and the Xet-stored weights).
for f in config.json model.safetensors; do
  timeout 120 nfs-cat "nfs://127.0.0.1//$f$URL_Q" >"$WORK/$f.nfs" 2>"$WORK/cat.err"
  cat_rc=$?
  curl -sfL "$EP/demo/tiny-model/resolve/main/$f" -o "$WORK/$f.hub"
  curl_rc=$?
  a="$(sha256sum <"$WORK/$f.nfs" | cut -d' ' -f1)"
  b="$(sha256sum <"$WORK/$f.hub" | cut -d' ' -f1)"
  check "nfs-cat $f and the Hub download both succeed ($(stat -c %s "$WORK/$f.nfs") bytes)" \
    $(( cat_rc != 0 || curl_rc != 0 || ${#a} != 64 || ${#b} != 64 ))
  [ "$a" = "$b" ]
  check "nfs-cat $f equals the Hub's bytes (sha256 $a)" $?
done

# A missing file is an error, not empty output.
timeout 30 nfs-cat "nfs://127.0.0.1//no-such-file$URL_Q" >/dev/null 2>&1
check "nfs-cat of a missing file fails" $(( $? == 0 ))

echo "nfs-smoke: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
