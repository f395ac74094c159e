#!/usr/bin/env bash
# Azurite (blob service only) as a real Azure Blob Storage emulator for the shared-cache tests.
#   ci/azurite.sh build          npm-install azurite once into /var/cache/hubfs-azurite (idempotent, ~40 s, 186 MB)
#   ci/azurite.sh start DATADIR  serve blob on 127.0.0.1:10000, data under DATADIR, create container
#                                hubfs-shared of account devstoreaccount1, wait until it answers; log to DATADIR.log
#   ci/azurite.sh stop DATADIR   stop that instance (matched by its --location DATADIR)
# The Rust side (object_store) reaches it with AZURE_STORAGE_USE_EMULATOR=true (account devstoreaccount1
# and its well-known key are then the defaults; AZURITE_BLOB_STORAGE_URL defaults to http://127.0.0.1:10000).
# Azurite 3.36+ wants node >= 21; 3.35.0 runs on the machine's node 20.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
AZURITE_DIR=${AZURITE_DIR:-/var/cache/hubfs-azurite}
AZURITE_BIN=$AZURITE_DIR/node_modules/.bin/azurite-blob
AZURITE_VERSION=3.35.0
AZURITE_PORT=${AZURITE_PORT:-10000}
ACCOUNT=devstoreaccount1
ACCOUNT_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

build() {
  if [ -x "$AZURITE_BIN" ]; then return 0; fi
  command -v npm >/dev/null || { echo "azurite.sh: npm is required to install azurite" >&2; exit 1; }
  mkdir -p "$AZURITE_DIR"
  cd "$AZURITE_DIR"
  [ -f package.json ] || printf '{"name":"hubfs-azurite","private":true}\n' > package.json
  nice npm install --no-audit --no-fund --omit=dev --save-exact "azurite@$AZURITE_VERSION"
}

# Create a container with a SharedKey-signed PUT; prints the HTTP status.
create_container() {
  python3 - "http://127.0.0.1:$AZURITE_PORT/$ACCOUNT/$1?restype=container" "$ACCOUNT" "$ACCOUNT_KEY" <<'EOF'
import base64, hashlib, hmac, sys, urllib.error, urllib.parse, urllib.request
from email.utils import formatdate
url, account, key = sys.argv[1:4]
u = urllib.parse.urlsplit(url)
h = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
# VERB, Content-Encoding/-Language/-Length(0 is empty)/-MD5, Content-Type, Date, If-*(4), Range
fields = ["PUT", "", "", "", "", "application/octet-stream"] + [""] * 6
canon_q = "".join(f"\n{k.lower()}:{v}" for k, v in sorted(urllib.parse.parse_qsl(u.query)))
sts = "\n".join(fields) + "\n" + "".join(f"{k}:{h[k]}\n" for k in sorted(h)) + f"/{account}{u.path}{canon_q}"
sig = base64.b64encode(hmac.new(base64.b64decode(key), sts.encode(), hashlib.sha256).digest()).decode()
h.update({"Content-Type": fields[5], "Authorization": f"SharedKey {account}:{sig}"})
try:
    print(urllib.request.urlopen(urllib.request.Request(url, method="PUT", data=b"", headers=h)).status)
except urllib.error.HTTPError as e:
    print(e.code)
EOF
}

start() {
  local data=$1
  mkdir -p "$data"
  if ! pgrep -f -- "--location $data( |$)" >/dev/null; then
    nohup "$AZURITE_BIN" --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" --skipApiVersionCheck --loose \
      --disableTelemetry --location "$data" >"$data.log" 2>&1 &
  fi
  for _ in $(seq 1 120); do
    if curl -s -o /dev/null "http://127.0.0.1:$AZURITE_PORT/$ACCOUNT?comp=list"; then
      # 201 when created, 409 when it already exists (restart on the same DATADIR)
      local code
      code=$(create_container hubfs-shared)
      case $code in 201|409) return 0 ;; esac
      echo "azurite.sh: creating container hubfs-shared answered HTTP $code" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "azurite.sh: azurite-blob did not answer on $AZURITE_PORT; log:" >&2
  tail -20 "$data.log" >&2
  exit 1
}

stop() {
  stop_matching "--location $1( |$)"
}

case ${1:-} in
  build) build ;;
  start) start "$2" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 build|start DATADIR|stop DATADIR" >&2; exit 2 ;;
esac
