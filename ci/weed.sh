#!/usr/bin/env bash
# SeaweedFS (`weed mini`) as a real S3-compatible server for the shared-cache tests.
#   ci/weed.sh build          build /var/cache/hubfs-weed/weed once (idempotent, ~5 min on 2 cores)
#   ci/weed.sh start DATADIR  start `weed mini` on port 8333 with bucket hubfs-shared, wait until it answers
#   ci/weed.sh stop DATADIR   stop the processes of that instance (it re-executes a child: match -dir=)
# `go install` refuses the module because of its replace directive, so a small wrapper module requires it
# and repeats that replace line.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
WEED_DIR=${WEED_DIR:-/var/cache/hubfs-weed}
WEED_BIN=$WEED_DIR/weed
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6

build() {
  if [ -x "$WEED_BIN" ]; then return 0; fi
  command -v go >/dev/null || { echo "weed.sh: go is required to build SeaweedFS" >&2; exit 1; }
  mkdir -p "$WEED_DIR/wrap"
  cd "$WEED_DIR/wrap"
  printf 'module example.com/weedwrap\n\ngo 1.26.6\n\nrequire github.com/seaweedfs/seaweedfs %s\n\nreplace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0\n' "$WEED_VERSION" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/seaweedfs/seaweedfs/weed"\n' > tools.go
  GOFLAGS=-mod=mod nice go mod tidy
  GOFLAGS=-mod=mod nice go build -o "$WEED_BIN.tmp" github.com/seaweedfs/seaweedfs/weed
  mv "$WEED_BIN.tmp" "$WEED_BIN"
}

start() {
  local data=$1
  mkdir -p "$data"
  AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-hubfs} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-hubfs-secret} \
    nohup "$WEED_BIN" mini -dir="$data" -bucket=hubfs-shared -admin.ui=false >"$data.log" 2>&1 &
  for _ in $(seq 1 120); do
    if curl -s -o /dev/null "http://127.0.0.1:8333/"; then return 0; fi
    sleep 0.5
  done
  echo "weed.sh: weed mini did not answer on 8333; log:" >&2
  tail -20 "$data.log" >&2
  exit 1
}

stop() {
  stop_matching "-dir=$1( |$)"
}

case ${1:-} in
  build) build ;;
  start) start "$2" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 build|start DATADIR|stop DATADIR" >&2; exit 2 ;;
esac
