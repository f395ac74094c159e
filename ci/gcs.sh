#!/usr/bin/env bash
# fake-gcs-server as a real Google Cloud Storage emulator for the shared-cache tests.
#   ci/gcs.sh build          build /var/cache/hubfs-fakegcs/fake-gcs-server once (idempotent, 1-2 min on 2 cores, 48 MB)
#   ci/gcs.sh start DATADIR  serve plain http on 127.0.0.1:4443, filesystem backend under DATADIR/data,
#                            bucket hubfs-shared, wait until it answers; log to DATADIR.log
#   ci/gcs.sh stop DATADIR   stop that instance (matched by its -filesystem-root=DATADIR/data)
# object_store's GCS client writes objects with the XML API (PUT /BUCKET/OBJECT, a create-only
# one with `x-goog-if-generation-match: 0`), which fake-gcs-server does not serve
# (fsouza/fake-gcs-server#331: it answers 400 "invalid uploadType"). So a small wrapper module
# runs fake-gcs-server's own server (its fakestorage package) and hands each such PUT to that
# server's JSON media upload, ifGenerationMatch included: the precondition is decided by
# fake-gcs-server under its backend lock, and a failed one answers 412 as GCS does.
# Everything else (GET/HEAD/DELETE /BUCKET/OBJECT, the XML list GET /BUCKET?list-type=2, the
# JSON API) is fake-gcs-server's as it is. Not served: XML copy (x-goog-copy-source) and XML
# multipart uploads; the XML list ignores start-after/max-keys and never pages.
# The Rust side points object_store at it with a service-account key that turns OAuth off:
#   GOOGLE_SERVICE_ACCOUNT_KEY='{"gcs_base_url":"http://127.0.0.1:4443","disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}'
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
GCS_DIR=${GCS_DIR:-/var/cache/hubfs-fakegcs}
GCS_BIN=$GCS_DIR/fake-gcs-server
GCS_VERSION=v1.56.1
GCS_PORT=${GCS_PORT:-4443}

build() {
  if [ -x "$GCS_BIN" ]; then return 0; fi
  command -v go >/dev/null || { echo "gcs.sh: go is required to build fake-gcs-server" >&2; exit 1; }
  mkdir -p "$GCS_DIR/wrap"
  cd "$GCS_DIR/wrap"
  printf 'module example.com/fakegcswrap\n\ngo 1.26\n\nrequire github.com/fsouza/fake-gcs-server %s\n' "$GCS_VERSION" > go.mod
  cat > main.go <<'EOF'
// fake-gcs-server's server plus the XML API object PUT that it lacks (see ci/gcs.sh).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func main() {
	root := flag.String("filesystem-root", "", "filesystem backend root (empty: memory backend)")
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Uint("port", 4443, "port to listen on")
	publicHost := flag.String("public-host", "", "host:port clients use (default host:port)")
	bucket := flag.String("bucket", "", "bucket to create at start")
	accessLog := flag.Bool("access-log", false, "log every request to stderr")
	flag.Parse()
	if *publicHost == "" {
		*publicHost = fmt.Sprintf("%s:%d", *host, *port)
	}
	opts := fakestorage.Options{
		StorageRoot: *root, Scheme: "http", Host: *host, Port: uint16(*port),
		PublicHost: *publicHost, ExternalURL: "http://" + *publicHost, NoListener: true,
	}
	if *accessLog {
		opts.Writer = os.Stderr
	}
	srv, err := fakestorage.NewServerWithOptions(opts)
	if err != nil {
		log.Fatal(err)
	}
	if *bucket != "" {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: *bucket})
	}
	addr := fmt.Sprintf("%s:%d", *host, *port)
	log.Printf("fake-gcs-server (with XML PUT) on http://%s", addr)
	log.Fatal(http.ListenAndServe(addr, xmlPut(srv.HTTPHandler())))
}

// xmlPut answers PUT /BUCKET/OBJECT (XML API upload) with the server's JSON media upload.
func xmlPut(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.EscapedPath(), "/")
		bucket, object, ok := strings.Cut(path, "/")
		q := r.URL.Query()
		if r.Method != http.MethodPut || !ok || object == "" || q.Has("uploadType") || q.Has("upload_id") ||
			q.Has("uploadId") || q.Has("X-Goog-Algorithm") || r.Header.Get("X-Goog-Copy-Source") != "" {
			next.ServeHTTP(w, r)
			return
		}
		switch bucket {
		case "storage", "upload", "download", "batch", "_internal":
			next.ServeHTTP(w, r)
			return
		}
		bucketName, err1 := url.PathUnescape(bucket)
		name, err2 := url.PathUnescape(object)
		if err1 != nil || err2 != nil {
			http.Error(w, "bad object path", http.StatusBadRequest)
			return
		}
		up := url.Values{"uploadType": {"media"}, "name": {name}}
		if g := r.Header.Get("X-Goog-If-Generation-Match"); g != "" {
			up.Set("ifGenerationMatch", g)
		}
		r2 := r.Clone(r.Context())
		r2.Method = http.MethodPost
		r2.URL = &url.URL{Path: "/upload/storage/v1/b/" + url.PathEscape(bucketName) + "/o", RawQuery: up.Encode()}
		r2.URL.RawPath = r2.URL.Path
		r2.RequestURI = r2.URL.RequestURI()
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r2)
		if rec.Code != http.StatusOK {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		var obj struct {
			Etag       string `json:"etag"`
			Generation string `json:"generation"`
			Md5Hash    string `json:"md5Hash"`
			Crc32c     string `json:"crc32c"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			http.Error(w, "upload answered: "+rec.Body.String(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("ETag", `"`+obj.Etag+`"`)
		w.Header().Set("X-Goog-Generation", obj.Generation)
		w.Header().Set("X-Goog-Metageneration", "1")
		w.Header().Set("X-Goog-Hash", "crc32c="+obj.Crc32c+",md5="+obj.Md5Hash)
		w.WriteHeader(http.StatusOK)
	})
}
EOF
  GOFLAGS=-mod=mod nice go mod tidy
  GOFLAGS=-mod=mod nice go build -o "$GCS_BIN.tmp" .
  mv "$GCS_BIN.tmp" "$GCS_BIN"
}

start() {
  local data=$1 url="http://127.0.0.1:$GCS_PORT"
  mkdir -p "$data/data"
  if ! pgrep -f -- "-filesystem-root=$data/data( |$)" >/dev/null; then
    nohup "$GCS_BIN" -filesystem-root="$data/data" -host=127.0.0.1 -port="$GCS_PORT" \
      -public-host="127.0.0.1:$GCS_PORT" -bucket=hubfs-shared >"$data.log" 2>&1 &
  fi
  for _ in $(seq 1 120); do
    if curl -sf -o /dev/null "$url/storage/v1/b/hubfs-shared"; then return 0; fi
    sleep 0.5
  done
  echo "gcs.sh: fake-gcs-server did not answer on $GCS_PORT; log:" >&2
  tail -20 "$data.log" >&2
  exit 1
}

stop() {
  stop_matching "-filesystem-root=$1/data( |$)"
}

case ${1:-} in
  build) build ;;
  start) start "$2" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 build|start DATADIR|stop DATADIR" >&2; exit 2 ;;
esac
