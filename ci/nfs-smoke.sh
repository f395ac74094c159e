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

PASSED=0
FAILED=0
check() { # name, condition result (0 = ok)
  if [ "$2" -eq 0 ]; then PASSED=$((PASSED + 1)); echo "  ok    $1"
  else FAILED=$((FAILED + 1)); echo "  FAIL  $1"; fi
}

# Waits up to 60 s for a line starting with $2 in file $1; prints the rest of that line.
wait_line() {
  local i
  for i in $(seq 1 600); do
    if grep -q "^$2" "$1" 2>/dev/null; then sed -n "s/^$2//p" "$1" | head -n1; return 0; fi
    sleep 0.1
  done
  return 1
}

"$BIN" local-hub --data-dir "$WORK/hub" --seed-demo >"$WORK/hub.out" 2>"$WORK/hub.err" &
PIDS+=($!)
EP="$(wait_line "$WORK/hub.out" "endpoint: ")" || { echo "local hub did not start"; cat "$WORK/hub.err"; exit 1; }

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
