#!/usr/bin/env bash
# The project's single test command:  bash ci/test.sh [--quick]
#
#   1. system packages (fuse3, python3-venv, pkg-config, libnfs-utils, curl) if missing
#   2. rustfmt / clippy components if missing
#   3. CARGO_TARGET_DIR outside the clone (default /var/cache/hubfs-target), reused between runs
#   4. cargo fmt --check, cargo clippy -D warnings, cargo build, cargo test
#   5. ci/nfs-smoke.sh (libnfs's nfs-ls / nfs-cat against `hubfs serve-nfs`)
#      tests/conformance/run.sh (stock huggingface_hub against `hubfs local-hub`, xet and noxet modes)
#      ci/write-smoke.sh (a writable mount driven by shell tools, checked with huggingface_hub; kill -9)
#   6. final line `N passed, M failed` (cargo tests + conformance tests; a failed fmt/clippy/build step
#      counts as one failure); exit status non-zero if any step failed.
#
#   --quick   skip the conformance suite (step 5)
set -uo pipefail

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
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
step_ok() { STEPS+=("ok      $1"); }
step_fail() { STEPS+=("FAILED  $1"); STEP_FAILURES+=("$1"); }
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

run_step "cargo fmt --check" cargo fmt --all -- --check
run_step "cargo clippy" cargo clippy --all-targets -- -D warnings
BUILD_OK=0
run_step "cargo build" cargo build && BUILD_OK=1

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

# ---------------------------------------------------------------------------------------------------------
# 5. NFS smoke test with the libnfs tools, then conformance
# ---------------------------------------------------------------------------------------------------------
if [ "$BUILD_OK" != 1 ]; then
  step_fail "nfs smoke (not run: cargo build failed)"
else
  say "nfs smoke (libnfs)"
  bash ci/nfs-smoke.sh "$CARGO_TARGET_DIR/debug/hubfs" 2>&1 | tee "$LOGDIR/nfs-smoke.log"
  nfs_rc=${PIPESTATUS[0]}
  read -r nf_passed nf_failed < <(
    sed -n 's/^nfs-smoke: \([0-9]\+\) passed, \([0-9]\+\) failed.*/\1 \2/p' "$LOGDIR/nfs-smoke.log" | tail -n1
  )
  nf_passed=${nf_passed:-0}
  nf_failed=${nf_failed:-0}
  if [ "$nfs_rc" -ne 0 ] && [ "$nf_failed" -eq 0 ]; then nf_failed=1; fi
  PASSED=$((PASSED + nf_passed))
  FAILED=$((FAILED + nf_failed))
  if [ "$nfs_rc" -eq 0 ]; then
    step_ok "nfs smoke ($nf_passed passed, $nf_failed failed)"
  else
    step_fail "nfs smoke ($nf_passed passed, $nf_failed failed, exit $nfs_rc)"
  fi
fi

if [ "$QUICK" = 1 ]; then
  step_skip "conformance (--quick)"
elif [ "$BUILD_OK" != 1 ]; then
  step_fail "conformance (not run: cargo build failed)"
else
  say "conformance suite"
  HUBFS_BIN="$CARGO_TARGET_DIR/debug/hubfs" bash tests/conformance/run.sh 2>&1 | tee "$LOGDIR/conformance.log"
  conf_rc=${PIPESTATUS[0]}
  read -r cf_passed cf_failed < <(
    sed -n 's/^conformance: \([0-9]\+\) passed, \([0-9]\+\) failed.*/\1 \2/p' "$LOGDIR/conformance.log" | tail -n1
  )
  cf_passed=${cf_passed:-0}
  cf_failed=${cf_failed:-0}
  if [ "$conf_rc" -ne 0 ] && [ "$cf_failed" -eq 0 ]; then cf_failed=1; fi
  PASSED=$((PASSED + cf_passed))
  FAILED=$((FAILED + cf_failed))
  if [ "$conf_rc" -eq 0 ]; then
    step_ok "conformance ($cf_passed passed, $cf_failed failed)"
  else
    step_fail "conformance ($cf_passed passed, $cf_failed failed, exit $conf_rc)"
  fi
fi

if [ "$QUICK" = 1 ]; then
  step_skip "write smoke (--quick: needs the conformance venv)"
elif [ "$BUILD_OK" != 1 ]; then
  step_fail "write smoke (not run: cargo build failed)"
else
  say "write smoke (shell tools + huggingface_hub)"
  VENV_PY="${HUBFS_VENV:-${HOME:-/root}/.cache/hubfs/venv}/bin/python"
  bash ci/write-smoke.sh "$CARGO_TARGET_DIR/debug/hubfs" "$VENV_PY" 2>&1 | tee "$LOGDIR/write-smoke.log"
  ws_rc=${PIPESTATUS[0]}
  read -r ws_passed ws_failed < <(
    sed -n 's/^write-smoke: \([0-9]\+\) passed, \([0-9]\+\) failed.*/\1 \2/p' "$LOGDIR/write-smoke.log" | tail -n1
  )
  ws_passed=${ws_passed:-0}
  ws_failed=${ws_failed:-0}
  if [ "$ws_rc" -ne 0 ] && [ "$ws_failed" -eq 0 ]; then ws_failed=1; fi
  PASSED=$((PASSED + ws_passed))
  FAILED=$((FAILED + ws_failed))
  if [ "$ws_rc" -eq 0 ]; then
    step_ok "write smoke ($ws_passed passed, $ws_failed failed)"
  else
    step_fail "write smoke ($ws_passed passed, $ws_failed failed, exit $ws_rc)"
  fi
fi

# ---------------------------------------------------------------------------------------------------------
# 6. summary
# ---------------------------------------------------------------------------------------------------------
# fmt / clippy / build / apt / rustup failures are not test failures of their own: count each once.
for s in "${STEP_FAILURES[@]+"${STEP_FAILURES[@]}"}"; do
  case "$s" in "cargo test"*|"conformance ("[0-9]*|"nfs smoke ("[0-9]*|"write smoke ("[0-9]*) ;; *) FAILED=$((FAILED + 1)) ;; esac
done

echo
echo "ci summary:"
for s in "${STEPS[@]}"; do echo "  $s"; done
echo
echo "$PASSED passed, $FAILED failed"
[ ${#STEP_FAILURES[@]} -eq 0 ] && [ "$FAILED" -eq 0 ]
