#!/usr/bin/env bash
# A real Kubernetes API server (kube-apiserver and etcd) for tests/csi_kube_api.rs, which runs the CSI
# plugin's mount-pod mode against it with the RBAC of examples/kubernetes/rbac.yaml.
#   ci/kube.sh build     build /var/cache/hubfs-kube/{kube-apiserver,etcd} once (idempotent; about 5
#                        minutes on 2 cores the first time, from the Go module proxy)
# k8s.io/kubernetes is not made to be required as a module: its go.mod points its staging modules
# (k8s.io/api, k8s.io/client-go, ...) at ./staging, so a small wrapper module requires it and pins
# each of them to the release's own version. etcd's server comes at the version kubernetes requires.
set -euo pipefail
KUBE_DIR=${HUBFS_KUBE_DIR:-/var/cache/hubfs-kube}
KUBE_VERSION=1.34.0
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
pod-security-admission sample-apiserver sample-cli-plugin sample-controller"

build() {
  if [ -x "$KUBE_DIR/kube-apiserver" ] && [ -x "$KUBE_DIR/etcd" ]; then return 0; fi
  command -v go >/dev/null || { echo "kube.sh: go is required to build kube-apiserver and etcd" >&2; exit 1; }
  mkdir -p "$KUBE_DIR/wrap/apiserver" "$KUBE_DIR/wrap/etcd"
  cd "$KUBE_DIR/wrap"
  {
    printf 'module example.com/kubewrap\n\ngo 1.24\n\nrequire k8s.io/kubernetes v%s\n\n' "$KUBE_VERSION"
    for m in $STAGING; do printf 'replace k8s.io/%s => k8s.io/%s v0.%s\n' "$m" "$m" "${KUBE_VERSION#1.}"; done
  } > go.mod
  cat > apiserver/main.go <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
GO
  cat > etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
GO
  GOFLAGS=-mod=mod nice go mod tidy
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -o "$KUBE_DIR/kube-apiserver.tmp" ./apiserver
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -o "$KUBE_DIR/etcd.tmp" ./etcd
  mv "$KUBE_DIR/kube-apiserver.tmp" "$KUBE_DIR/kube-apiserver"
  mv "$KUBE_DIR/etcd.tmp" "$KUBE_DIR/etcd"
}

case "${1:-}" in
  build) build ;;
  *) echo "usage: ci/kube.sh build" >&2; exit 2 ;;
esac
