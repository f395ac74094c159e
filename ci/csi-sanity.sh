#!/usr/bin/env bash
# The CSI contract, checked by the Kubernetes project's own conformance tool:
#   bash ci/csi-sanity.sh HUBFS_BIN
# Installs csi-sanity (kubernetes-csi/csi-test v5.6.0) with `go install` if it is not there yet,
# starts `hubfs local-hub --seed-demo` and `hubfs csi-node` on a unix socket, and runs csi-sanity
# against it; then checks the YAML syntax of examples/kubernetes/ (PyYAML: the test venv's python, else
# python3's). Prints `csi-sanity: N passed, M failed`; exits non-zero on any failure.
#
# Skipped specs, each for a reason:
#   ValidateVolumeCapabilities   a Controller RPC: csi-sanity runs these specs whatever
#                                ControllerGetCapabilities says, and they need CreateVolume; the
#                                node-only plugin answers both UNIMPLEMENTED, as the spec allows.
#   should remove target path    starts with CreateVolume (UNIMPLEMENTED here: volumes are static PVs or
#                                inline) and fails there; tests/csi_node.rs checks with real mounts that
#                                unpublish removes the target directory.
# The other Node specs that publish need a volume from CreateVolume too, and csi-sanity skips them for a
# plugin without the controller capability: real publishing is tested by tests/csi_node.rs.
set -uo pipefail

BIN="${1:?usage: ci/csi-sanity.sh HUBFS_BIN}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-csi-sanity.XXXXXX")"
# The plugin's state dir on a tmpfs when there is one: its token files then stay inside it (and go
# with it) instead of in a directory of their own elsewhere.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then STATE="$(mktemp -d /dev/shm/hubfs-csi-sanity.XXXXXX)"; else STATE="$WORK/state"; fi
PIDS=()
cleanup() {
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK" "$STATE"
}
trap cleanup EXIT

# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CSI_SANITY_VERSION=v5.6.0
GOBIN_DIR="${CSI_SANITY_BIN_DIR:-${HOME:-/root}/.cache/hubfs/go-bin}"
SANITY="$GOBIN_DIR/csi-sanity"
if [ ! -x "$SANITY" ] || [ "$(cat "$GOBIN_DIR/csi-sanity.version" 2>/dev/null)" != "$CSI_SANITY_VERSION" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "csi-sanity: go is not installed (apt-get install golang-go, or https://go.dev/dl)"
    echo "csi-sanity: 0 passed, 1 failed"
    exit 1
  fi
  echo "csi-sanity: installing csi-sanity $CSI_SANITY_VERSION with go install"
  mkdir -p "$GOBIN_DIR"
  if ! GOBIN="$GOBIN_DIR" go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_SANITY_VERSION"; then
    echo "csi-sanity: 0 passed, 1 failed"
    exit 1
  fi
  echo "$CSI_SANITY_VERSION" >"$GOBIN_DIR/csi-sanity.version"
fi

start_local_hub --seed-demo
SOCK="$WORK/plugin/csi.sock"
"$BIN" csi-node --endpoint "unix://$SOCK" --node-id sanity-node --state-dir "$STATE" \
  --hub-endpoint "$EP" >"$WORK/plugin.out" 2>"$WORK/plugin.err" &
PIDS+=($!)
wait_line "$WORK/plugin.out" "listening on " >/dev/null || { echo "csi-node did not start"; cat "$WORK/plugin.err"; exit 1; }

# csi-sanity needs the parent of its mount and staging dirs to exist.
mkdir -p "$WORK/sanity"
"$SANITY" -csi.endpoint "unix://$SOCK" -csi.mountdir "$WORK/sanity/mnt" -csi.stagingdir "$WORK/sanity/stage" \
  -ginkgo.skip 'ValidateVolumeCapabilities|should remove target path' -ginkgo.no-color \
  >"$WORK/sanity.out" 2>&1
rc=$?
tail -n 40 "$WORK/sanity.out"
# Ginkgo's summary line: "Ran N of M Specs … SUCCESS! -- P Passed | F Failed | …"
sp="$(sed -n 's/.* \([0-9]\+\) Passed | \([0-9]\+\) Failed.*/\1/p' "$WORK/sanity.out" | tail -n1)"
sf="$(sed -n 's/.* \([0-9]\+\) Passed | \([0-9]\+\) Failed.*/\2/p' "$WORK/sanity.out" | tail -n1)"
sp=${sp:-0}
sf=${sf:-0}
if [ "$rc" -ne 0 ] && [ "$sf" -eq 0 ]; then sf=1; fi
if [ "$sf" -ne 0 ]; then echo "--- plugin log"; tail -n 40 "$WORK/plugin.err"; fi
PASSED=$((PASSED + sp))
FAILED=$((FAILED + sf))

# The manifests parse (no cluster here to apply them: syntax only). Every document must be a mapping
# with apiVersion and kind.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=""
for cand in "${HUBFS_VENV:-${HOME:-/root}/.cache/hubfs/venv}/bin/python" python3; do
  if "$cand" -c 'import yaml' 2>/dev/null; then PY="$cand"; break; fi
done
if [ -z "$PY" ]; then
  echo "  skip  YAML check: no python with PyYAML (pip install pyyaml)"
else
  for f in "$ROOT"/examples/kubernetes/*.yaml; do
    "$PY" - "$f" <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]
assert docs, "no document"
for d in docs:
    assert isinstance(d, dict) and "apiVersion" in d and "kind" in d, f"not a Kubernetes object: {d!r:.80}"
PYEOF
    check "examples/kubernetes/$(basename "$f") parses" $?
  done
fi
echo "csi-sanity: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
