#!/usr/bin/env bash
# The fio benchmark suite: hubfs over FUSE and NFS, each figure beside its ceiling measured in the same
# run, on loopback and on a realistic network (local Hub at 30 ms, 200 Mbit/s per connection).
#
#   bash ci/bench.sh --smoke   # a few minutes: small files, one pass, debug build; proves the harness
#                              # end to end (its figures are not benchmark figures); exit 1 if a job fails
#   bash ci/bench.sh --full    # the real run (release build, 100 MiB / 1 GiB files, 10,000-file writes):
#                              # writes its table into docs/BENCHMARKS.md and its chart to docs/bench/suite.png
#
# Needs root (FUSE mounts, dropping the page cache). Installs what is missing: fuse3 and the DejaVu font
# (the chart's text) from apt, and fio with its nfs engine (ci/fio-nfs.sh, cached in /var/cache/hubfs-fio).
# The orchestration is examples/bench_suite (Rust); this script only installs, builds and calls it.
# Environment: CARGO_TARGET_DIR (default /var/cache/hubfs-target), HUBFS_BENCH_DIR (scratch space,
# default /var/tmp), HUBFS_FIO_NFS (a fio binary with the nfs engine, instead of building one).
set -euo pipefail

MODE=""
for arg in "$@"; do
  case "$arg" in
    --smoke) MODE=smoke ;;
    --full) MODE=full ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "ci/bench.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
if [ -z "$MODE" ]; then
  echo "usage: bash ci/bench.sh --smoke|--full" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "ci/bench.sh: needs root (FUSE mounts, dropping the page cache)" >&2
  exit 1
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export DEBIAN_FRONTEND=noninteractive
export CARGO_TERM_COLOR=never
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/hubfs-target}"
START=$(date +%s)

echo "==> system packages"
missing=()
for pkg in fuse3 fonts-dejavu-core; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}"
fi

echo "==> fio with the nfs engine"
FIO="${HUBFS_FIO_NFS:-$(bash "$ROOT/ci/fio-nfs.sh" | tail -n 1)}"
"$FIO" --enghelp 2>/dev/null | grep -qw nfs || { echo "ci/bench.sh: $FIO has no nfs engine" >&2; exit 1; }

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

# What was measured: the commit, and whether the working tree had changes on top of it.
REV="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! git diff --quiet HEAD -- src Cargo.toml 2>/dev/null; then
  REV="$REV with uncommitted changes in src/"
fi

if [ "$MODE" = smoke ]; then
  # The debug build CI already has (cargo test builds examples too): no second full build.
  echo "==> cargo build (debug) --bin hubfs --example bench_suite"
  cargo build --bin hubfs --example bench_suite
  BIN="$CARGO_TARGET_DIR/debug"
  OUT="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-bench.XXXXXX")"
  trap 'rm -rf "$OUT"' EXIT
  EXTRA=(--smoke --build "debug, $REV" --chart "$OUT/suite.png")
else
  echo "==> cargo build --release --bin hubfs --example bench_suite"
  cargo build --release --bin hubfs --example bench_suite
  BIN="$CARGO_TARGET_DIR/release"
  mkdir -p "$ROOT/docs/bench"
  EXTRA=(--full --build "release, $REV" --doc "$ROOT/docs/BENCHMARKS.md" --chart "$ROOT/docs/bench/suite.png"
    --chart-link bench/suite.png)
fi

echo "==> bench_suite ${EXTRA[*]}"
set +e
"$BIN/examples/bench_suite" --hubfs "$BIN/hubfs" --fio "$FIO" --work "${HUBFS_BENCH_DIR:-/var/tmp}" "${EXTRA[@]}"
RC=$?
set -e
echo "==> ci/bench.sh --$MODE: exit $RC after $(( $(date +%s) - START )) s"
exit $RC
