#!/usr/bin/env bash
# The Python wheel as a user gets it:  bash ci/python.sh HUBFS_SRC_ROOT PYTHON
#
#   1. builds the wheel with maturin (pinned, in a throwaway venv) in the dev profile, in the CI's
#      CARGO_TARGET_DIR (default /var/cache/hubfs-target, as ci/test.sh): after ci/test.sh's
#      `cargo build` it only packs the debug binary (`--strip false` keeps cargo's fingerprint, so
#      neither build redoes the other's work); the wheel to publish is `pip wheel .` (release)
#   2. a FRESH venv made with PYTHON, with only that wheel and the test deps pinned as in
#      tests/conformance/requirements.txt (pytest, huggingface_hub, safetensors, datasets, ...)
#   3. (a) README's quickstart with that venv's `hubfs`: `demo --exit`, `local-hub` in the background,
#          `mount --daemon`, a read checked against the Hub, `status`, `unmount`
#      (b) tests/python with that venv's python and HUBFS_BIN unset (the wheel's binary is used)
#      (c) the acceptance one-liner: python -c "import hubfs; m = hubfs.mount('demo/tiny-model', …)"
# Prints `  ok    …` / `  FAIL  …` and ends with `python: N passed, M failed`. About 1-2 minutes after
# the build (pip installs from its cache after the first run). Needs root and FUSE, as the other
# scripts. HUBFS_MATURIN overrides the maturin requirement (default maturin==1.16.0).
set -uo pipefail

SRC="${1:?usage: ci/python.sh HUBFS_SRC_ROOT PYTHON}"
PY="${2:?usage: ci/python.sh HUBFS_SRC_ROOT PYTHON}"
SRC="$(cd "$SRC" && pwd)" || exit 2
MATURIN_REQ="${HUBFS_MATURIN:-maturin==1.16.0}"
REQS="$SRC/tests/conformance/requirements.txt"
T0=$(date +%s)

# shellcheck source=ci/lib.sh
. "$SRC/ci/lib.sh"
scratch_dir python
python_cleanup() {
  # Mounts left by a failed step: everything using this run's cache dirs, then the scratch dir.
  if [ -n "${BIN:-}" ] && [ -x "$BIN" ]; then
    for c in "$WORK/cache" "$WORK/xdg/hubfs"; do
      "$BIN" status --json --cache-dir "$c" 2>/dev/null | sed -n 's/^ *"mountpoint": "\(.*\)",$/\1/p' |
        while read -r m; do timeout 60 "$BIN" unmount "$m" >/dev/null 2>&1; done
    done
  fi
  scratch_cleanup
}
trap python_cleanup EXIT
# chk NAME STATUS [FILE...]: check, and on failure the tail of each FILE (indented).
chk() {
  local name="$1" st="$2" f
  shift 2
  check "$name" "$st"
  if [ "$st" -ne 0 ]; then for f in "$@"; do tail -n 40 "$f" 2>/dev/null | sed 's/^/    /'; done; fi
  return 0
}

if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  CARGO_TARGET_DIR=/var/cache/hubfs-target
  if ! mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null || ! [ -w "$CARGO_TARGET_DIR" ]; then
    CARGO_TARGET_DIR="$HOME/.cache/hubfs-target"
  fi
fi
export CARGO_TARGET_DIR PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

# ---------------------------------------------------------------------------------------------------
# 1. the wheel
# ---------------------------------------------------------------------------------------------------
echo "# building the wheel (maturin, dev profile, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
"$PY" -m venv "$WORK/build-venv" && "$WORK/build-venv/bin/pip" install -q "$MATURIN_REQ" >"$WORK/maturin-install.log" 2>&1
chk "$MATURIN_REQ installed in a throwaway venv" $? "$WORK/maturin-install.log"
(cd "$SRC" && "$WORK/build-venv/bin/maturin" build --profile dev --strip false -o "$WORK/dist") >"$WORK/build.log" 2>&1
rc=$?
WHEEL="$(ls "$WORK"/dist/hubfs-*.whl 2>/dev/null | head -n1)"
[ "$rc" -eq 0 ] && [ -n "$WHEEL" ]
chk "maturin build --profile dev: $(basename "${WHEEL:-no wheel}")" $? "$WORK/build.log"
if [ -z "$WHEEL" ]; then echo "python: $PASSED passed, $FAILED failed"; exit 1; fi
T_BUILT=$(date +%s)

# The wheel holds the binary as a script and the typed package, and nothing of the build.
"$PY" - "$WHEEL" >"$WORK/wheel-list.txt" 2>&1 <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join(names))
need = {"hubfs/__init__.py", "hubfs/py.typed", "hubfs/mount.py", "hubfs/errors.py"}
ok = need <= set(names) and any(n.endswith(".data/scripts/hubfs") for n in names)
bad = [n for n in names if n.startswith(("target/", "dist/", "build/")) or "__pycache__" in n or n.endswith(".pyc")]
sys.exit(0 if ok and not bad else 1)
EOF
chk "the wheel holds scripts/hubfs, the package and py.typed, and no build output" $? "$WORK/wheel-list.txt"

# ---------------------------------------------------------------------------------------------------
# 2. a fresh venv with only the wheel and the test deps
# ---------------------------------------------------------------------------------------------------
pins=()
for p in pytest pytest-timeout huggingface_hub hf_xet numpy safetensors pyarrow pandas datasets; do
  line="$(grep -i "^$p==" "$REQS" | head -n1)"
  pins+=("${line:-$p}")
done
V="$WORK/venv"
"$PY" -m venv "$V" && "$V/bin/pip" install -q "$WHEEL" "${pins[@]}" >"$WORK/pip.log" 2>&1
chk "fresh venv: pip install $(basename "$WHEEL") ${pins[*]}" $? "$WORK/pip.log"
BIN="$V/bin/hubfs"
[ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1
check "the wheel installed an executable hubfs in the venv's bin ($("$BIN" --version 2>&1))" $?
(cd "$WORK" && env -u HUBFS_BIN "$V/bin/python" -c '
import hubfs, os, sys
assert hubfs.find_binary() == os.path.join(os.path.dirname(sys.executable), "hubfs"), hubfs.find_binary()
assert hubfs.__file__.startswith(sys.prefix), hubfs.__file__
print(hubfs.__version__)') >"$WORK/import.out" 2>&1
chk "import hubfs comes from the venv and finds the wheel's binary (version $(tail -n1 "$WORK/import.out"))" $? \
  "$WORK/import.out"
T_VENV=$(date +%s)

# ---------------------------------------------------------------------------------------------------
# 3a. README's quickstart with the venv's hubfs
# ---------------------------------------------------------------------------------------------------
unset HUBFS_BIN HF_TOKEN HF_TOKEN_PATH HF_ENDPOINT
export HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_TELEMETRY=1
(cd "$WORK" && XDG_CACHE_HOME="$WORK/xdg" timeout 180 "$BIN" demo --exit "$WORK/demo") >"$WORK/demo.out" 2>&1
chk "hubfs demo --exit" $? "$WORK/demo.out"

start_local_hub --seed-demo
mkdir -p "$MNT"
HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write timeout 120 "$BIN" mount demo/tiny-model "$MNT" --daemon \
  --cache-dir "$WORK/cache" >"$WORK/mount.out" 2>&1
rc=$?
grep -q "^mounted demo/tiny-model@[0-9a-f]\{40\} at $MNT (pid [0-9]*)" "$WORK/mount.out" && [ "$rc" -eq 0 ]
chk "hubfs mount --daemon (local Hub at $EP)" $? "$WORK/mount.out"
curl -sf "$EP/demo/tiny-model/resolve/main/config.json" -o "$WORK/config.hub"
cmp -s "$WORK/config.hub" "$MNT/config.json"
check "config.json read through the mount is the Hub's" $?
want="$(curl -sf "$EP/api/models/demo/tiny-model/paths-info/main" -H 'content-type: application/json' \
  -d '{"paths":["model.safetensors"]}' | "$V/bin/python" -c 'import json,sys; print(json.load(sys.stdin)[0]["lfs"]["oid"])')"
got="$(sha256sum "$MNT/model.safetensors" | cut -d' ' -f1)"
[ -n "$want" ] && [ "$want" = "$got" ]
check "sha256 of model.safetensors through the mount is the Hub's (${got:0:12}…)" $?
timeout 60 "$BIN" status >"$WORK/status.out" 2>&1 && grep -qF "demo/tiny-model@main at $MNT " "$WORK/status.out"
chk "hubfs status lists it" $? "$WORK/status.out"
timeout 120 "$BIN" unmount "$MNT" >"$WORK/unmount.out" 2>&1 && ! mountpoint -q "$MNT" &&
  ! timeout 60 "$BIN" status 2>&1 | grep -qF " at $MNT "
chk "hubfs unmount: gone from the mount table and from status" $? "$WORK/unmount.out"

# ---------------------------------------------------------------------------------------------------
# 3b. the pytest suite with the venv's python and the wheel's binary
# ---------------------------------------------------------------------------------------------------
(cd "$WORK" && env -u HUBFS_BIN timeout 600 "$V/bin/python" -m pytest "$SRC/tests/python" -v -p no:cacheprovider \
  --rootdir "$SRC/tests/python" -o addopts= 2>&1) >"$WORK/pytest.log"
prc=$?
n=0
while read -r name verdict; do
  n=$((n + 1))
  case "$verdict" in
    PASSED) check "pytest ${name#*::}" 0 ;;
    SKIPPED*) echo "  skip  pytest ${name#*::}" ;;
    *) check "pytest ${name#*::} ($verdict)" 1 ;;
  esac
done < <(sed -n 's/^\(\S*::\S*\) \(PASSED\|FAILED\|ERROR\|SKIPPED\).*/\1 \2/p' "$WORK/pytest.log")
[ "$prc" -eq 0 ] && [ "$n" -gt 0 ]
chk "pytest tests/python: $(tail -n1 "$WORK/pytest.log" | tr -d '=' | sed 's/^ *//')" $? "$WORK/pytest.log"

# ---------------------------------------------------------------------------------------------------
# 3c. the acceptance one-liner (the issue's)
# ---------------------------------------------------------------------------------------------------
(cd "$WORK" && env -u HUBFS_BIN XDG_CACHE_HOME="$WORK/xdg" timeout 180 "$V/bin/python" -c \
  "import hubfs; m = hubfs.mount('demo/tiny-model', endpoint='$EP'); print(open(m.path + '/config.json').read()); m.unmount()") \
  >"$WORK/oneliner.out" 2>"$WORK/oneliner.err"
rc=$?
# print() adds a newline after the file's content.
printf '\n' | cat "$WORK/config.hub" - | cmp -s - "$WORK/oneliner.out" && [ "$rc" -eq 0 ]
chk "python -c \"import hubfs; m = hubfs.mount('demo/tiny-model', endpoint=…); print(open(m.path + '/config.json').read()); m.unmount()\"" $? \
  "$WORK/oneliner.out" "$WORK/oneliner.err"
! "$BIN" status --json --cache-dir "$WORK/xdg/hubfs" 2>/dev/null | grep -q '"mountpoint"'
check "the one-liner's mount is gone after m.unmount()" $?

T_END=$(date +%s)
echo "# build $((T_BUILT - T0)) s, venv $((T_VENV - T_BUILT)) s, checks $((T_END - T_VENV)) s"
echo "python: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
