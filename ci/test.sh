#!/usr/bin/env bash
# The project's single test command:  bash ci/test.sh [--quick | --long]
#
#   1. system packages (fuse3, python3-venv, pkg-config, libnfs-utils, curl) if missing
#   2. rustfmt / clippy components if missing
#   3. CARGO_TARGET_DIR outside the clone (default /var/cache/hubfs-target), reused between runs
#   4. cargo fmt --check, cargo clippy -D warnings, cargo build, SeaweedFS, fake-gcs-server and
#      Azurite installed once (ci/weed.sh, ci/gcs.sh, ci/azurite.sh, for the shared cache tests),
#      kube-apiserver and etcd built once (ci/kube.sh, for the CSI mount-pod test),
#      cargo test (unit and integration tests, the VirtualFs model test, the fault matrix and the
#      stress test in their short profiles, the module layering check), then the benches' smoke
#      runs (micro with a short measurement, one large file's reads with the disk tier and
#      passthrough, writes, cp -r into a FUSE sink, many readers)
#   5. ci/nfs-smoke.sh (libnfs's nfs-ls / nfs-cat against `hubfs serve-nfs`)
#      ci/csi-sanity.sh (kubernetes-csi's csi-sanity against `hubfs csi-node`)
#      tests/conformance/run.sh (stock huggingface_hub against `hubfs local-hub`, xet and noxet modes)
#      ci/write-smoke.sh (a writable mount driven by shell tools, checked with huggingface_hub; kill -9)
#      ci/python.sh (the wheel built with maturin, installed alone in a fresh venv: quickstart, tests/python)
#      ci/commit-plan.sh (copies and steady writers into writable mounts against the Hub's commit limit)
#      tests/workflows/run.sh (`mount --daemon` from shells that exit, then Python loaders, datasets,
#        pyarrow, sqlite, git, tar, unzip, libnfs on the mounts; `status`, `unmount`; checked on the Hub)
#      ci/posix.sh (pjdfstest and fsx on a writable mount, then on a bucket mount and, at the same
#      time, on an overlay mount of a model repo made with a read token; installs both with cargo install)
#      ci/bucket-smoke.sh (a bucket mounted with --daemon, shell tools and rsync -a, checked with huggingface_hub)
#      ci/bench.sh --smoke (the fio suite's smoke profile over FUSE and NFS; builds fio's nfs engine)
#      ci/bench-mmap.sh (a safetensors file loaded through a mount with mmap, beside dd)
#      ci/bench-shards-py.sh (8 safetensors shards loaded by a Python thread pool and by one thread; Hub bytes, RSS)
#      ci/bench-listing.sh (200 small files: listing order over a 30 ms Hub, prefetch on and off; cp -r, tar,
#      rsync and shuffled readers, loopback and 30 ms, at most 0.1 Hub requests per Xet file)
#      ci/bench-metrics.sh (what --metrics-addr costs: an idle mount scraped every second, a cold read scraped)
#      ci/bench-requests.sh (the Hub requests per bucket of a mount, a model load, ls -lR and small files)
#      ci/bench-metadata.sh (find, ls -lR, du, os.walk, os.scandir, stat over 10,000 files: one listing per folder)
#      ci/bench-publish.sh (cp -r of 500 small + 4 x 64 MiB into a --write mount beside upload_folder)
#      ci/bench-parquet.sh (DuckDB, pyarrow and random preads over parquet shards: Hub bytes against needed)
#      ci/bench-download.sh (one file of a model repo through a mount beside hf_hub_download)
#      ci/bench-charts.py (a PNG per workload from those benches' output, in CARGO_TARGET_DIR/bench-charts)
#   6. final line `N passed, M failed` (cargo tests + the scripts' checks; a failed fmt/clippy/build step
#      counts as one failure); exit status non-zero if any step failed.
#
#   --quick   skip the conformance suite and the steps that need its venv or take minutes (step 5 but NFS and csi-sanity)
#   --long    the long profiles: fsx 1,000,000 operations with msync, a longer model test and stress run,
#             a 10-minute mixed-read soak in the workflow suite
set -uo pipefail

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --long) export POSIX_LONG=1 HUBFS_MODEL_CASES="${HUBFS_MODEL_CASES:-256}" HUBFS_MODEL_SEED="${HUBFS_MODEL_SEED:-random}" HUBFS_STRESS_SECS="${HUBFS_STRESS_SECS:-300}" WORKFLOW_SOAK_SECS="${WORKFLOW_SOAK_SECS:-600}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "ci/test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
export CARGO_TERM_COLOR=never
export DEBIAN_FRONTEND=noninteractive

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-ci.XXXXXX")"
trap 'rm -rf "$LOGDIR"' EXIT

PASSED=0
FAILED=0
STEP_FAILURES=()
STEPS=()

say() { echo "==> $*"; }
STEP_START=$(date +%s)
# Each step's line ends with the seconds since the previous step ended (so a slow step stands out).
TOOK=""
took() { local now; now=$(date +%s); TOOK="$((now - STEP_START)) s"; STEP_START=$now; }
step_ok() { took; STEPS+=("ok      $1 [$TOOK]"); }
step_fail() { took; STEPS+=("FAILED  $1 [$TOOK]"); STEP_FAILURES+=("$1"); }
step_skip() { STEPS+=("skipped $1"); }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else return 1
  fi
}

# ---------------------------------------------------------------------------------------------------------
# 1. system packages
# ---------------------------------------------------------------------------------------------------------
say "system packages"
missing=()
for pkg in fuse3 python3-venv pkg-config libnfs-utils curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  step_ok "apt packages (already installed)"
elif as_root apt-get update -qq && as_root apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}"; then
  step_ok "apt install ${missing[*]}"
else
  step_fail "apt install ${missing[*]}"
fi

# ---------------------------------------------------------------------------------------------------------
# 2. Rust toolchain components
# ---------------------------------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found on PATH" >&2
  step_fail "cargo toolchain"
  for s in "${STEPS[@]}"; do echo "  $s"; done
  echo "0 passed, 1 failed"
  exit 1
fi
say "rust components"
if command -v rustup >/dev/null 2>&1; then
  installed="$(rustup component list --installed 2>/dev/null || true)"
  for comp in rustfmt clippy; do
    if ! grep -q "^$comp" <<<"$installed"; then
      if rustup component add "$comp"; then step_ok "rustup component add $comp"; else step_fail "rustup component add $comp"; fi
    fi
  done
fi

# ---------------------------------------------------------------------------------------------------------
# 3. target dir outside the clone
# ---------------------------------------------------------------------------------------------------------
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  CARGO_TARGET_DIR=/var/cache/hubfs-target
  if ! mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null || ! [ -w "$CARGO_TARGET_DIR" ]; then
    CARGO_TARGET_DIR="$HOME/.cache/hubfs-target"
  fi
fi
case "$CARGO_TARGET_DIR" in /*) ;; *) CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR" ;; esac
mkdir -p "$CARGO_TARGET_DIR"
export CARGO_TARGET_DIR
say "CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

# ---------------------------------------------------------------------------------------------------------
# 4. cargo fmt / clippy / build / test
# ---------------------------------------------------------------------------------------------------------
run_step() { # name, command...
  local name="$1"; shift
  say "$name"
  if "$@"; then step_ok "$name"; return 0; else step_fail "$name"; return 1; fi
}
# logged_step PREFIX NAME COMMAND...: run_step that also saves the output to $LOGDIR/PREFIX.log (for
# ci/bench-charts.py), keeping the command's exit status
logged_step() {
  local prefix="$1" name="$2" rc; shift 2
  say "$name"
  "$@" 2>&1 | tee "$LOGDIR/$prefix.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then step_ok "$name"; return 0; else step_fail "$name"; return 1; fi
}

run_step "cargo fmt --check" cargo fmt --all -- --check
run_step "cargo clippy" cargo clippy --all-targets -- -D warnings
BUILD_OK=0
run_step "cargo build" cargo build && BUILD_OK=1

# SeaweedFS (`weed mini`), the real S3-compatible server tests/shared_cache.rs starts for the shared
# cache tier (issue 32): built once from the Go module proxy into /var/cache/hubfs-weed (about 5 minutes
# on 2 cores the first time, nothing after). The test then runs inside `cargo test` at 64 MiB (about
# 40 s): 4 nodes one after another and at once, the store killed mid-read, a corrupted object.
# tests/shared_fleet.rs (about 25 s) mounts demo/tiny-model on 32 nodes at once and counts the Hub's
# requests, and checks a node finding everything in the tier asks the Hub only for its revision.
run_step "SeaweedFS for the shared-cache test (ci/weed.sh build)" bash ci/weed.sh build
# The same tier on Google Cloud Storage and Azure Blob, against their emulators: fake-gcs-server built
# from the Go module proxy (about 1-2 minutes the first time) and Azurite from the npm registry
# (about 40 s the first time). HUBFS_REQUIRE_STORES makes the tests fail instead of skip if one is missing.
run_step "fake-gcs-server for the shared-cache test (ci/gcs.sh build)" bash ci/gcs.sh build
run_step "Azurite for the shared-cache test (ci/azurite.sh build)" bash ci/azurite.sh build
export HUBFS_REQUIRE_STORES=1
# A real Kubernetes API server for tests/csi_kube_api.rs (the CSI plugin's mount pods with the
# example RBAC): kube-apiserver and etcd built once from the Go module proxy into /var/cache/hubfs-kube
# (about 5 minutes on 2 cores the first time). HUBFS_REQUIRE_KUBE makes the test fail, not skip,
# without them.
run_step "kube-apiserver and etcd for the mount-pod test (ci/kube.sh build)" bash ci/kube.sh build
export HUBFS_REQUIRE_KUBE=1
# tests/shared_cache.rs appends each store's speeds and Hub bytes here, for the fleet's chart
export HUBFS_SHARED_FIGURES="$LOGDIR/bench-fleet.log"

say "cargo test"
cargo test 2>&1 | tee "$LOGDIR/cargo-test.log"
test_rc=${PIPESTATUS[0]}
read -r ct_passed ct_failed ct_results < <(
  sed -n 's/^test result: [A-Za-z]*\. \([0-9]\+\) passed; \([0-9]\+\) failed;.*/\1 \2/p' "$LOGDIR/cargo-test.log" |
    awk '{p += $1; f += $2; n++} END {print p + 0, f + 0, n + 0}'
)
PASSED=$((PASSED + ct_passed))
FAILED=$((FAILED + ct_failed))
if [ "$test_rc" -eq 0 ]; then
  step_ok "cargo test ($ct_passed passed, $ct_failed failed)"
else
  step_fail "cargo test ($ct_passed passed, $ct_failed failed, exit $test_rc)"
  # a compile error or crash leaves no failed test behind: count it once
  [ "$ct_failed" -eq 0 ] && FAILED=$((FAILED + 1))
fi

# Every criterion micro-benchmark in the dev profile with a short measurement (about 20 s; 3 s of it
# the checks each runs first): proves they build and their checks hold, and prints the medians for
# the micro-benchmarks' chart (criterion's files go to the log dir, not beside release runs').
logged_step bench-micro "micro-benchmarks, short measurement (cargo test --bench micro -- --bench)" \
  env CRITERION_HOME="$LOGDIR/criterion" cargo test --bench micro -- --bench \
  --warm-up-time 0.05 --measurement-time 0.2 --sample-size 10 --nresamples 1000 --noplot
# One 64 MiB file's reads (ceiling, cold and warm sequential, random 4 KiB, cold at 30 ms), then the
# disk tier's and passthrough's, once each (about 15 s, dev profile): the tier's and passthrough's
# checks hold (the tier keeps the file, a re-read needs no download, its files take no page cache;
# a second mount passes through exactly when asked to); the figures feed two charts, not the tables.
logged_step bench-fuse-read "bench smoke: one large file, disk tier, passthrough (cargo test --bench fuse_read)" \
  env HUBFS_BENCH_MIB=64 HUBFS_BENCH_RUNS=1 HUBFS_BENCH_ONLY=ceiling,seq,random,slow,disk,passthrough \
  cargo test --bench fuse_read
# Writes into a writable mount at a tenth of the bench's sizes (about 20 s): staging against a plain
# file, close against the hf-hub crate's upload, an identical rewrite, cp -r of 1,000 and 100 small
# files, peak RSS writing 409 MiB. Prints figures, checks nothing; they feed the writes' chart.
logged_step bench-fuse-write "bench smoke: writes (cargo test --bench fuse_write)" \
  env HUBFS_BENCH_QUICK=1 cargo test --bench fuse_write
# The FUSE ceiling for a cp -r of small files (1,000 files into tmpfs and into a sink that drops
# the bytes, a few seconds): the sink got every file and byte. The release figures are in BENCHMARKS.
logged_step bench-write-ceiling "bench smoke: cp -r into a FUSE sink (cargo test --bench write_ceiling)" \
  env HUBFS_BENCH_FILES=1000 cargo test --bench write_ceiling
# Several readers at once (issue 29), about 30 s: 4 readers of 4 files of 48 MiB, on loopback and on a
# 30 ms Hub, with an 8 MiB memory tier so their prefetch windows contend for it. Asserts the Hub served
# at most 1.02 × the bytes read: no block is fetched twice while a reader wants it (the build before
# the fix: 1.389). Readers of one file are left out until their seeks never fetch twice (BENCHMARKS.md).
logged_step bench-many-readers "bench smoke: many readers fetch each block once (cargo test --bench many_readers)" \
  env HUBFS_BENCH_MIB=48 HUBFS_BENCH_READERS=4 HUBFS_BENCH_MODES=files HUBFS_BENCH_CHECK=1 \
  HUBFS_BENCH_VARIANTS=tier8M:--memory-cache-size=8M cargo test --bench many_readers
# The same readers under --memory-limit 128M, on loopback and at 30 ms: peak RSS within 1.25 × the limit
# and Hub bytes ≤ 1.02 × as without a budget (issue 29). The debug build measured 117–126 MiB (without a
# budget they take 186+) and 1.007–1.009 in three runs of both profiles (2026-11-27).
logged_step bench-many-readers-budget "bench smoke: many readers within a memory budget (cargo test --bench many_readers)" \
  env HUBFS_BENCH_MIB=48 HUBFS_BENCH_READERS=4 HUBFS_BENCH_MODES=files HUBFS_BENCH_CHECK=1 \
  HUBFS_BENCH_PROFILES=loopback,30ms HUBFS_BENCH_RSS_FACTOR=1.25 "HUBFS_BENCH_VARIANTS=limit128:--memory-limit=128M" \
  cargo test --bench many_readers

# ---------------------------------------------------------------------------------------------------------
# 5. scripts that drive the real binary: each ends with `PREFIX: N passed, M failed`
# ---------------------------------------------------------------------------------------------------------
# script_step NAME PREFIX NEEDS_FULL COMMAND...: runs COMMAND after the build, adds its counts; a non-zero
# exit with no failure counted counts as one failure. NEEDS_FULL=1 steps are skipped by --quick.
script_step() {
  local name="$1" prefix="$2" full="$3"; shift 3
  if [ "$full" = 1 ] && [ "$QUICK" = 1 ]; then step_skip "$name (--quick)"; return; fi
  if [ "$BUILD_OK" != 1 ]; then step_fail "$name (not run: cargo build failed)"; return; fi
  say "$name"
  local log="$LOGDIR/$prefix.log" rc sp sf
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  read -r sp sf < <(sed -n "s/^$prefix: \([0-9]\+\) passed, \([0-9]\+\) failed.*/\1 \2/p" "$log" | tail -n1)
  sp=${sp:-0}
  sf=${sf:-0}
  if [ "$rc" -ne 0 ] && [ "$sf" -eq 0 ]; then sf=1; fi
  PASSED=$((PASSED + sp))
  FAILED=$((FAILED + sf))
  if [ "$rc" -eq 0 ]; then step_ok "$name ($sp passed, $sf failed)"
  else step_fail "$name ($sp passed, $sf failed, exit $rc)"; fi
}

HUBFS_BIN="$CARGO_TARGET_DIR/debug/hubfs"
VENV_PY="${HUBFS_VENV:-${HOME:-/root}/.cache/hubfs/venv}/bin/python"
script_step "nfs smoke (libnfs)" nfs-smoke 0 bash ci/nfs-smoke.sh "$HUBFS_BIN"
# The CSI node plugin against kubernetes-csi's csi-sanity (installs it with `go install` once; seconds)
script_step "csi-sanity (hubfs csi-node)" csi-sanity 0 bash ci/csi-sanity.sh "$HUBFS_BIN"
script_step "conformance" conformance 1 env HUBFS_BIN="$HUBFS_BIN" bash tests/conformance/run.sh
# needs the conformance venv, hence skipped by --quick too
script_step "write smoke (shell tools + huggingface_hub)" write-smoke 1 bash ci/write-smoke.sh "$HUBFS_BIN" "$VENV_PY"
# The Python package as users get it (about 2 minutes): the wheel (maturin, packing the debug build), a
# fresh venv with only it and the test deps, README's quickstart and tests/python from that venv
script_step "python wheel (maturin, fresh venv, tests/python, quickstart)" python 1 bash ci/python.sh "$ROOT" python3
script_step "bucket smoke (mount --daemon, rsync -a, huggingface_hub buckets, kill -9)" bucket-smoke 1 bash ci/bucket-smoke.sh "$HUBFS_BIN" "$VENV_PY"
# Commit planning against the local Hub's default commit limit (about 2 minutes; needs the venv's python)
script_step "commit planning (budget, 429, close latency)" commit-plan 1 bash ci/commit-plan.sh "$HUBFS_BIN" "$VENV_PY"
# needs the conformance venv (numpy, safetensors, pyarrow, pandas, datasets pinned there)
script_step "workflows (daemon mounts + real programs)" workflows 1 bash tests/workflows/run.sh "$HUBFS_BIN" "$VENV_PY"
script_step "posix (pjdfstest + fsx)" posix 1 bash ci/posix.sh "$HUBFS_BIN" ${POSIX_LONG:+--long}
# The overlay's POSIX run goes beside the bucket's: both mostly wait on the kernel and on
# pjdfstest's sleeps, so together they take little more than one (about 5 minutes off the run).
# It starts once the first run has installed pjdfstest and fsx.
POSIX_OVERLAY_BG="$LOGDIR/posix-overlay.bg"
if [ "$QUICK" != 1 ] && [ "$BUILD_OK" = 1 ]; then
  { bash ci/posix.sh "$HUBFS_BIN" --overlay ${POSIX_LONG:+--long} >"$POSIX_OVERLAY_BG" 2>&1
    echo "rc=$?" >>"$POSIX_OVERLAY_BG"; } &
fi
# await_log LOG: waits until a background step's LOG ends with `rc=N`, prints it, returns N.
await_log() {
  while ! grep -q '^rc=[0-9]*$' "$1" 2>/dev/null; do sleep 2; done
  grep -v '^rc=[0-9]*$' "$1"
  return "$(sed -n 's/^rc=\([0-9]*\)$/\1/p' "$1" | tail -n1)"
}
script_step "posix on a bucket mount (pjdfstest + fsx)" posix-bucket 1 bash ci/posix.sh "$HUBFS_BIN" --bucket ${POSIX_LONG:+--long}
script_step "posix on an overlay mount (pjdfstest + fsx on a copied-up Hub file; run beside the bucket's)" \
  posix-overlay 1 await_log "$POSIX_OVERLAY_BG"
# The fio suite's smoke profile over FUSE and NFS (about 2 minutes): proves the benchmark harness end
# to end; its figures are not benchmark figures (debug build, small files, shared machine).
script_step "bench smoke (fio over FUSE and NFS)" bench 1 bash ci/bench.sh --smoke
# safetensors loaded through a read-only mount (mmap, in order and shuffled) beside dd, 128 MiB (about
# a minute; every tensor's sha256 checked; the ratio is printed, checked only by --full's release run)
script_step "bench: safetensors through mmap" bench-mmap 1 bash ci/bench-mmap.sh "$HUBFS_BIN" "$VENV_PY"
# A sharded model (8 safetensors shards of 32 MiB) loaded by a Python thread pool, one worker per shard,
# beside one thread, on loopback and 30 ms (about 2 minutes): every tensor's sha256, Hub bytes <= 1.02 x,
# mount peak RSS within the budget are checked; speeds are printed
script_step "bench: sharded safetensors from a Python thread pool" bench-shards-py 1 bash ci/bench-shards-py.sh "$HUBFS_BIN" "$VENV_PY"
# Small files read in listing order over a 30 ms Hub, with and without the listing-order prefetch, then by
# cp -r, tar, rsync and shuffled readers (about 2.5 min; the ratio is checked against issue 18's target and
# Hub requests per Xet file against issue 30's; needs the venv's python to upload)
script_step "bench: small files (listing order, cp -r, tar, rsync, shuffled)" bench-listing 1 bash ci/bench-listing.sh "$HUBFS_BIN" "$VENV_PY"
# --metrics-addr at idle and during a cold read (about 1 minute); checks under 1% of a core at idle
script_step "bench: metrics scrape cost" bench-metrics 1 bash ci/bench-metrics.sh "$HUBFS_BIN" 20
# The Hub requests per bucket (api, resolvers, CAS) of a mount, a model load, ls -lR, 3 and 10,000 small
# files (about 2 minutes); checks few resolves for 3 files and one per file for 10,000
script_step "bench: Hub requests per workload" bench-requests 1 bash ci/bench-requests.sh "$HUBFS_BIN"
# Tree walks (find, ls -lR, du, os.walk, os.scandir with stat, stat of every file) over 10,000 small files
# in 20 folders under the Hub's request windows (under a minute): every walk sees every file and costs one
# listing per folder; figures beside hf-mount's when ~/.cache/peers has it
script_step "bench: metadata walks" bench-metadata 1 bash ci/bench-metadata.sh "$HUBFS_BIN" 20 500
# Publishing 500 small files + 4 x 64 MiB by cp -r into a --write mount (default close and --close stage,
# then hubfs sync) beside upload_folder (about a minute): every file's bytes on the Hub, at most 8 commits
script_step "bench: publishing a folder" bench-publish 1 bash ci/bench-publish.sh "$HUBFS_BIN" "$VENV_PY" mixed
# Sparse reads: DuckDB and pyarrow queries (one column, two, a filtered scan, a full scan) and random
# preads over 2 parquet shards of 47 MiB on a dataset mount, loopback only (about a minute): every answer
# checked against the source, Hub bytes against what each query needs
script_step "bench: sparse parquet reads" bench-parquet 1 env HUBFS_BENCH_PROFILES=loopback bash ci/bench-parquet.sh "$HUBFS_BIN" "$VENV_PY"
# One file of a model repo read through a mount (whole, and one 8 MiB piece) beside hf_hub_download, 64 MiB,
# loopback and 30 ms (under a minute): every byte's sha256, a whole read <= 1.05 x the file
script_step "bench: one file beside hf_hub_download" bench-download 1 bash ci/bench-download.sh "$HUBFS_BIN" "$VENV_PY" 64 2
# Charts of this run's bench figures (PNG, one per workload; a missing log skips its chart)
if [ "$QUICK" != 1 ] && [ -x "$VENV_PY" ]; then
  CHARTS="${HUBFS_BENCH_CHARTS:-$CARGO_TARGET_DIR/bench-charts}"
  "$VENV_PY" ci/bench-charts.py "$LOGDIR" "$CHARTS" && echo "bench charts: $CHARTS"
fi

# ---------------------------------------------------------------------------------------------------------
# 6. summary
# ---------------------------------------------------------------------------------------------------------
# fmt / clippy / build / apt / rustup failures are not test failures of their own: count each once.
for s in "${STEP_FAILURES[@]+"${STEP_FAILURES[@]}"}"; do
  case "$s" in *" ("[0-9]*" passed, "*) ;; *) FAILED=$((FAILED + 1)) ;; esac
done

echo
echo "ci summary:"
for s in "${STEPS[@]}"; do echo "  $s"; done
echo
echo "$PASSED passed, $FAILED failed"
[ ${#STEP_FAILURES[@]} -eq 0 ] && [ "$FAILED" -eq 0 ]
