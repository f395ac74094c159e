#!/usr/bin/env bash
# Workflow suite: the built binary driven as separate processes, exactly as README.md shows, with the
# programs people use on a mount, every outcome checked against the Hub (sha256 from the Hub's API and
# copies downloaded with the stock huggingface_hub client, HF_ENDPOINT = the local Hub):
#
#   bash tests/workflows/run.sh HUBFS_BIN PYTHON
#
# PYTHON must have the packages of tests/conformance/requirements.txt (huggingface_hub, numpy,
# safetensors, pyarrow, pandas, datasets): the venv tests/conformance/run.sh sets up will do.
# Missing apt packages (rsync zip unzip sqlite3 git libnfs-utils curl) are installed first.
#
#   1. `hubfs local-hub --seed-demo`; reference copies of the demo repos with huggingface_hub
#   2. `mount --daemon` started from shells that exit (setsid bash -c, and under a pseudo-terminal
#      with script): demo/tiny-model twice, datasets/demo/tiny-dataset; two `--nfs --serve-only`
#      daemons; a `--write` daemon of a dataset created through the Hub API. Each has its own
#      --cache-dir. `status --json` / `status` list them all with the right frontend and mode.
#   3. read-only model: safetensors.safe_open vs hf_hub_download copy, config/tokenizer JSON,
#      1,000 Python open/read/close cycles; the mount stays up and its log stays short
#   4. read-only dataset: datasets.load_dataset csv/json, pyarrow row groups in shuffled order,
#      pandas.read_parquet, find, du -sb, grep -r, tar c (every extracted file's sha256 vs the Hub)
#   5. NFS (libnfs, userspace): nfs-ls -R, nfs-cp, sha256 vs the Hub, safetensors loads the copy
#   6. writable: cp -r, DataFrame.to_parquet, sqlite3 (Python, two connections; and the CLI), unzip,
#      git init/add/commit; `hubfs unmount`; then every file on the Hub with the right sha256, the
#      sqlite dbs open, the git repository downloaded from the Hub passes fsck
#   7. mixed-read soak (WORKFLOW_SOAK_SECS, default 20) through the --daemon mounts; logs under cap
#   8. `hubfs unmount` of each mount (returns once the process is gone); a plain dir is refused
#   9. POSIX tools into a writable mount (tests/workflows/posix_tools.sh): rsync -a (twice: the second
#      prints nothing and commits nothing), rsync -aH, cp -a, tar -xp (with hard links), unzip, git clone
#      into a --write mount, cp -al and git clone --local inside it; modes, owners, mtimes, symlinks and
#      hard links through the mount, after the commit and after a remount; regular files (every name of
#      a hard link) on the Hub with their source's sha256, symlinks not; nfs-cp into a --write NFS server
#  10. overlay: demo/tiny-model mounted --overlay with a read token, edited from Python, remounted;
#      `overlay diff` lists the four changes; `overlay commit --pr` refused with the read token, done with
#      the write token; the stock client sees the pull request with exactly those changes, main unchanged
#
# Prints each check as `ok`/`FAIL`, ends with `workflows: N passed, M failed`; exits non-zero if any
# check failed. Everything it starts is stopped and its scratch dir removed on exit, also on failure.
#
# Environment: WORKFLOW_SOAK_SECS (default 20); WORKFLOW_KEEP=1 keeps the scratch dir;
# WORKFLOW_ONLY=posix (or overlay) runs the local Hub and section 9 (or 10) only;
# WORKFLOW_FOREGROUND=1 (debugging only) runs mounts as background jobs instead of --daemon.
set -uo pipefail

BIN="${1:?usage: tests/workflows/run.sh HUBFS_BIN PYTHON}"
PY="${2:?usage: tests/workflows/run.sh HUBFS_BIN PYTHON}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
case "$PY" in */*) case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac ;; esac
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SOAK_SECS="${WORKFLOW_SOAK_SECS:-20}"
LOG_CAP=$((10 << 20))
T0=$(date +%s)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hubfs-workflows.XXXXXX")"
PIDS=()    # background processes of this script (the local Hub)
MOUNTS=()  # every mountpoint (or --serve-only dir) handed to `hubfs mount`
MPIDS=()   # the mount processes
declare -A PID_OF=()  # mountpoint -> its mount process
# alive PID: the process runs (a zombie does not count: this machine's PID 1 reaps orphans late).
alive() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; }
mounted() { awk -v d="$1" '$2 == d {f = 1} END {exit !f}' /proc/mounts; }
cleanup() {
  local m p i
  trap - EXIT INT TERM
  for m in "${MOUNTS[@]+"${MOUNTS[@]}"}"; do
    # `hubfs unmount` also stops --serve-only servers, which have nothing in /proc/mounts.
    if mounted "$m" || alive "${PID_OF[$m]:-}"; then timeout 90 "$BIN" unmount "$m" >/dev/null 2>&1; fi
    mounted "$m" && umount -l "$m" 2>/dev/null
  done
  for p in "${MPIDS[@]+"${MPIDS[@]}"}"; do alive "$p" && kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 1 100); do
    local left=0
    for p in "${MPIDS[@]+"${MPIDS[@]}"}"; do alive "$p" && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for p in "${MPIDS[@]+"${MPIDS[@]}"}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  # Nothing may stay attached under WORK before it is deleted.
  awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | while read -r m; do umount -l "$m"; done
  if [ "${WORKFLOW_KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
  if [ "$DONE" = 0 ]; then  # stopped early: still end with the summary line, counting the stop
    echo "workflows: stopped early"
    echo "workflows: ${PASSED:-0} passed, $(( ${FAILED:-0} + 1 )) failed"
  fi
}
DONE=0
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
# chk NAME STATUS: `check` that also returns STATUS, for `chk … || show what went wrong`.
chk() { check "$1" "$2"; return "$2"; }
# show FILE...: the first lines of what went wrong, indented under the failed check.
show() { cat "$@" 2>/dev/null | head -n 15 | sed 's/^/          | /'; }

# ---------------------------------------------------------------------------------------------------------
# programs
# ---------------------------------------------------------------------------------------------------------
missing=()
for pkg in rsync zip unzip sqlite3 git libnfs-utils curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
  check "apt-get install ${missing[*]}" $?
fi
"$PY" -c 'import huggingface_hub, numpy, safetensors, pyarrow, pandas, datasets' 2>"$WORK/py-import.err"
chk "$PY has huggingface_hub, numpy, safetensors, pyarrow, pandas, datasets" $? ||
  { cat "$WORK/py-import.err"; exit 1; }

# run_py SCRIPT TIMEOUT ARGS...: runs a Python workflow script and counts its `ok NAME` /
# `FAIL NAME<TAB>reason` lines as checks; a script that dies early (or times out) is one more failure.
run_py() {
  local script="$1" limit="$2"; shift 2
  local out="$WORK/${script%.py}.$RANDOM.out" err line seen=0 failed=0 rc
  err="${out%.out}.err"
  timeout -k 10 "$limit" "$PY" "$HERE/$script" "$@" >"$out" 2>"$err"
  rc=$?
  while IFS= read -r line; do
    case "$line" in
      "ok "*) check "${line#ok }" 0; seen=1 ;;
      "FAIL "*) line="${line#FAIL }"; check "${line%%$'\t'*}" 1; echo "          ${line#*$'\t'}"; seen=1; failed=1 ;;
      "# "*) echo "        $line" ;;
    esac
  done <"$out"
  if [ "$rc" -ne 0 ] && [ "$failed" = 0 ]; then
    local why="exit $rc"; [ "$rc" = 124 ] && why="timed out after ${limit}s"
    check "$script ran to the end ($why)" 1
  fi
  if [ "$rc" -ne 0 ] || [ "$seen" = 0 ]; then
    [ "$seen" = 0 ] && [ "$rc" = 0 ] && check "$script reported its checks" 1
    sed 's/^/          | /' "$err" | tail -n 15
  fi
}

# start_mount NAME HOW REPO DIR [ARGS...]: `hubfs mount REPO DIR --daemon --cache-dir WORK/cache-NAME
# ARGS...` run from a shell that exits once it returns: HOW=setsid (setsid bash -c) or HOW=pty (under
# `script`, a pseudo-terminal). Sets MOUT (what mount printed), MPID and MLOG; returns mount's status.
start_mount() {
  local name="$1" how="$2" repo="$3" dir="$4"; shift 4
  local out="$WORK/$name.out" cmd rc
  mkdir -p "$dir"
  MOUNTS+=("$dir")
  [ "${WORKFLOW_FOREGROUND:-0}" = 1 ] && how="fg"
  cmd="$(printf '%q ' "$BIN" mount "$repo" "$dir" --daemon --cache-dir "$WORK/cache-$name" "$@")"
  case "$how" in
    setsid) setsid -w bash -c "$cmd >$(printf %q "$out") 2>&1; exit \$?" </dev/null; rc=$? ;;
    pty) script -qefc "$cmd" /dev/null </dev/null >"$out" 2>&1; rc=$? ;;
    fg)
      "$BIN" mount "$repo" "$dir" --cache-dir "$WORK/cache-$name" "$@" >"$out" 2>&1 </dev/null &
      MPIDS+=($!)
      wait_line "$out" "mounted " >/dev/null; rc=$?
      sed -i "s/^\(mounted .*\)$/\1 (pid $!)/" "$out" ;;
  esac
  MOUT="$(tr -d '\r' <"$out")"
  MPID="$(sed -n 's/^mounted .* (pid \([0-9][0-9]*\))$/\1/p' <<<"$MOUT" | head -n1)"
  MLOG="$(sed -n 's/^log: //p' <<<"$MOUT" | head -n1)"
  [ -n "$MPID" ] && [ "$how" != fg ] && MPIDS+=("$MPID")
  PID_OF[$dir]="$MPID"
  [ "$rc" -ne 0 ] && show <<<"$MOUT"
  return "$rc"
}

# mount_checks LABEL REPO DIR RC: the mount command succeeded, printed `mounted REPO@COMMIT at
# DIR (pid N)` and `log: FILE`, and the process is running.
mount_checks() {
  local label="$1" repo="$2" dir="$3" rc="$4" at="$3"
  [ "$dir" = nfs ] && at='nfs://[0-9.]*:[0-9]*/'
  check "$label: mount --daemon returned 0 from a shell that has exited" "$rc"
  grep -q "^mounted $repo@[0-9a-f]\{40\} at $at (pid [0-9]*)$" <<<"$MOUT"
  check "$label: it printed 'mounted $repo@COMMIT at ... (pid N)'" $?
  [ -n "$MLOG" ] && [ -f "$MLOG" ]
  check "$label: it printed 'log: FILE' and FILE exists (${MLOG:-no log line})" $?
  sleep 0.5
  alive "$MPID"
  check "$label: the mount process (pid ${MPID:-?}) runs after its starting shell exited" $?
}

export HF_HOME="$WORK/hf-home" HF_DATASETS_CACHE="$WORK/hf-datasets" HF_HUB_DISABLE_TELEMETRY=1 \
  HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_DISABLE_UPDATE_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
  HF_DATASETS_DISABLE_PROGRESS_BARS=1
unset HF_HUB_OFFLINE HF_HUB_DISABLE_XET

# ---------------------------------------------------------------------------------------------------------
# 1. local Hub and reference copies
# ---------------------------------------------------------------------------------------------------------
echo "== local Hub"
start_local_hub --seed-demo
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_read
echo "   $EP (scratch $WORK)"
if [ -n "${WORKFLOW_ONLY:-}" ]; then # section 9 or 10 alone (see the header)
  case "$WORKFLOW_ONLY" in
    # shellcheck source=tests/workflows/posix_tools.sh
    posix) . "$HERE/posix_tools.sh" ;;
    # shellcheck source=tests/workflows/overlay.sh
    overlay) . "$HERE/overlay.sh" ;;
    *) echo "WORKFLOW_ONLY: posix or overlay"; exit 2 ;;
  esac
  echo "workflows: took $(( $(date +%s) - T0 )) s"
  echo "workflows: $PASSED passed, $FAILED failed"
  DONE=1
  [ "$FAILED" -eq 0 ]
  exit $?
fi
REF_M="$WORK/ref-model" REF_D="$WORK/ref-dataset"
run_py hub_ref.py 180 model demo/tiny-model "$REF_M"
run_py hub_ref.py 180 dataset demo/tiny-dataset "$REF_D"
if ! [ -s "$REF_M/manifest.json" ] || ! [ -s "$REF_D/manifest.json" ]; then echo "no reference copies: stopping"; exit 1; fi

# ---------------------------------------------------------------------------------------------------------
# 2. the mounts
# ---------------------------------------------------------------------------------------------------------
echo "== mounts (--daemon, started from shells that exit)"
M="$WORK/model" M2="$WORK/model-pty" D="$WORK/dataset" W="$WORK/writable" NM="$WORK/nfs-model" ND="$WORK/nfs-dataset"
start_mount model setsid demo/tiny-model "$M"; mount_checks "model (setsid bash -c)" demo/tiny-model "$M" $?
M_PID="$MPID" M_LOG="$MLOG"
start_mount model-pty pty demo/tiny-model "$M2"; mount_checks "model (under a pty with script)" demo/tiny-model "$M2" $?
M2_PID="$MPID"
start_mount dataset setsid datasets/demo/tiny-dataset "$D"; mount_checks "dataset" datasets/demo/tiny-dataset "$D" $?
D_PID="$MPID" D_LOG="$MLOG"
start_mount nfs-model setsid demo/tiny-model "$NM" --nfs --serve-only --nfs-addr 127.0.0.1:0
mount_checks "NFS model (--serve-only)" demo/tiny-model nfs $?
NM_PID="$MPID" NM_PORT="$(sed -n 's|^mounted .* at nfs://[0-9.]*:\([0-9]*\)/ .*|\1|p' <<<"$MOUT")"
start_mount nfs-dataset setsid datasets/demo/tiny-dataset "$ND" --nfs --serve-only --nfs-addr 127.0.0.1:0
mount_checks "NFS dataset (--serve-only)" datasets/demo/tiny-dataset nfs $?
ND_PID="$MPID" ND_PORT="$(sed -n 's|^mounted .* at nfs://[0-9.]*:\([0-9]*\)/ .*|\1|p' <<<"$MOUT")"
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer hf_local_write" \
  -H 'content-type: application/json' -d '{"name":"workflows","organization":"local","type":"dataset"}' >/dev/null
check "dataset repo local/workflows created through the Hub API" $?
HF_TOKEN=hf_local_write start_mount writable setsid datasets/local/workflows "$W" --write
mount_checks "writable dataset" datasets/local/workflows "$W" $?
W_PID="$MPID"

"$BIN" status --json >"$WORK/status.json" 2>"$WORK/status.err"
check "hubfs status --json exits 0" $?
run_py status_check.py 30 "$WORK/status.json" \
  "listed=read-only model mount:$M:fuse:read-only:$WORK/cache-model" \
  "listed=pty-started model mount:$M2:fuse:read-only:$WORK/cache-model-pty" \
  "listed=read-only dataset mount:$D:fuse:read-only:$WORK/cache-dataset" \
  "listed=writable mount:$W:fuse:writable:$WORK/cache-writable" \
  "listed=NFS model server:$NM:nfs:read-only:$WORK/cache-nfs-model" \
  "listed=NFS dataset server:$ND:nfs:read-only:$WORK/cache-nfs-dataset"
"$BIN" status >"$WORK/status.txt" 2>&1
rc=$?
for dir in "$M" "$M2" "$D" "$W" "$NM" "$ND"; do grep -qF " at $dir " "$WORK/status.txt" || rc=1; done
chk "hubfs status (text) lists all six mounts" $rc || show "$WORK/status.txt"

# ---------------------------------------------------------------------------------------------------------
# 3. read-only model
# ---------------------------------------------------------------------------------------------------------
echo "== read-only model mount"
run_py model_read.py 240 "$M" "$REF_M" 1000
ls "$M" >"$WORK/ls.out" 2>&1 && grep -qx config.json "$WORK/ls.out"
check "model: the mount is alive afterwards (ls works)" $?
alive "$M_PID"
check "model: the mount process still runs" $?
"$BIN" status --json >"$WORK/status2.json" 2>&1
run_py status_check.py 30 "$WORK/status2.json" "listed=model mount after 1,000 opens:$M:fuse:read-only:$WORK/cache-model"
lines="no log file"
[ -n "$M_LOG" ] && [ -f "$M_LOG" ] && lines=$(wc -l <"$M_LOG")
[ "$lines" -lt 100 ] 2>/dev/null
check "model: its log file has far fewer than 1,000 lines after 1,000 opens ($lines)" $?
run_py model_read.py 240 "$M2" "$REF_M" 200
alive "$M2_PID"
check "model (pty-started): the mount process still runs" $?

# ---------------------------------------------------------------------------------------------------------
# 4. read-only dataset
# ---------------------------------------------------------------------------------------------------------
echo "== read-only dataset mount"
run_py dataset_read.py 240 "$D" "$REF_D"
n_hub=$(wc -l <"$REF_D/SHA256SUMS")
n=$(find "$D" -type f 2>"$WORK/find.err" | wc -l)
[ "$n" -eq "$n_hub" ]
chk "dataset: find counts $n files, the Hub has $n_hub" $? || show "$WORK/find.err"
sum_sizes() { find "$@" -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
for sub in data/train data/blobs data/parquet data/many; do
  got=$(du -sb "$D/$sub" 2>"$WORK/du.err" | cut -f1)
  want=$(( $(sum_sizes "$REF_D/files/$sub" -type f) + $(sum_sizes "$D/$sub" -type d) ))
  [ "$got" = "$want" ]
  chk "dataset: du -sb $sub = ${got:-?}, the Hub's file sizes (+ directory sizes) $want" $? || show "$WORK/du.err"
done
got="$(grep -rF '"sample 1-17"' "$D" 2>&1)"
[ "$got" = "$D/data/train/shard-00001.csv:217,\"sample 1-17\",1" ]
chk "dataset: grep -r finds the one line holding \"sample 1-17\"" $? || show <<<"$got"
mkdir -p "$WORK/untar"
tar -C "$D" -cf "$WORK/dataset.tar" . 2>"$WORK/tar.err" && tar -C "$WORK/untar" -xf "$WORK/dataset.tar" 2>>"$WORK/tar.err"
chk "dataset: tar c of the mount (and tar x of the archive to local disk)" $? || show "$WORK/tar.err"
(cd "$WORK/untar" && sha256sum --quiet -c "$REF_D/SHA256SUMS") >"$WORK/untar.out" 2>&1
chk "dataset: every file extracted from the tar has the Hub's sha256 ($n_hub files)" $? ||
  show "$WORK/untar.out"
n=$(find "$WORK/untar" -type f | wc -l)
[ "$n" -eq "$n_hub" ]
check "dataset: the tar holds $n files, the Hub has $n_hub" $?
rm -rf "$WORK/untar" "$WORK/dataset.tar"

# ---------------------------------------------------------------------------------------------------------
# 5. NFS, through libnfs's userspace client
# ---------------------------------------------------------------------------------------------------------
echo "== NFS (nfs-ls, nfs-cp)"
# nfs_tree PORT REF LABEL: nfs-ls -R lists exactly the Hub's files with their sizes; nfs-cp of each
# file (all but data/many/) has the Hub's sha256.
nfs_tree() {
  local port="$1" ref="$2" label="$3" q rc
  q="?nfsport=$port&mountport=$port"
  timeout 60 nfs-ls -R "nfs://127.0.0.1/$q" >"$WORK/nfs-ls.out" 2>&1
  rc=$?
  awk '/^-/ {print $6 " " $5}' "$WORK/nfs-ls.out" | sort >"$WORK/nfs-ls.files"
  "$PY" -c 'import json, sys; m = json.load(open(sys.argv[1])); [print(p, e["size"]) for p, e in sorted(m.items())]' \
    "$ref/manifest.json" | sort >"$WORK/hub.files"
  cmp -s "$WORK/nfs-ls.files" "$WORK/hub.files"
  rc=$(( rc != 0 || $? != 0 ))
  chk "$label: nfs-ls -R lists the Hub's $(wc -l <"$WORK/hub.files") files with their sizes" $rc || {
    diff "$WORK/nfs-ls.files" "$WORK/hub.files" >"$WORK/nfs-ls.diff"; show "$WORK/nfs-ls.diff" "$WORK/nfs-ls.out"; }
  rm -rf "$WORK/nfs-copy"; mkdir -p "$WORK/nfs-copy"
  rc=0
  while read -r _ path; do
    path="${path#./}"
    case "$path" in data/many/*) continue ;; esac
    mkdir -p "$WORK/nfs-copy/$(dirname "$path")"
    timeout 120 nfs-cp "nfs://127.0.0.1//$path$q" "$WORK/nfs-copy/$path" >/dev/null 2>>"$WORK/nfs-cp.err" || rc=1
  done <"$ref/SHA256SUMS"
  check "$label: nfs-cp copies every file out" $rc
  (cd "$WORK/nfs-copy" && grep -v ' ./data/many/' "$ref/SHA256SUMS" | sha256sum --quiet -c -) >"$WORK/nfs-sum.out" 2>&1
  chk "$label: the copies have the Hub's sha256" $? || show "$WORK/nfs-sum.out"
}
nfs_tree "$NM_PORT" "$REF_M" "NFS model"
run_py nfs_tensors.py 120 "$WORK/nfs-copy/model.safetensors" "$REF_M/files/model.safetensors"
nfs_tree "$ND_PORT" "$REF_D" "NFS dataset"
rm -rf "$WORK/nfs-copy"

# ---------------------------------------------------------------------------------------------------------
# 6. writable dataset mount
# ---------------------------------------------------------------------------------------------------------
echo "== writable mount"
SRC="$WORK/src"
mkdir -p "$SRC/folder/sub/deeper" "$SRC/zip/docs" "$SRC/git"
printf 'hello\n' >"$SRC/folder/hello.txt"
: >"$SRC/folder/empty.txt"
head -c 2097152 /dev/urandom >"$SRC/folder/sub/random.bin"
seq 1 20000 >"$SRC/folder/sub/deeper/numbers.txt"
for i in 1 2 3 4 5; do printf 'doc %s\n' "$i" >"$SRC/zip/docs/doc$i.txt"; done
head -c 300000 /dev/urandom >"$SRC/zip/blob.bin"
(cd "$SRC/zip" && zip -qr "$WORK/archive.zip" .)
printf '# project\n' >"$SRC/git/README.md"
printf 'print("hi")\n' >"$SRC/git/main.py"
sums_of() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) | sed "s|  \./|  ./$2/|"; }
{ sums_of "$SRC/folder" copied; sums_of "$SRC/zip" unzipped; } >"$WORK/known.sums"

cp -r "$SRC/folder" "$W/copied" 2>"$WORK/cp.err"
chk "write: cp -r of a folder (5 files, 2 MiB) into the mount" $? || show "$WORK/cp.err"
run_py write_workload.py 180 "$W" "$WORK"
sqlite3 "$W/db/cli.db" "create table t (a integer, b text);
  with recursive c(x) as (select 1 union all select x + 1 from c where x < 300) insert into t select x, 'row ' || x from c;" \
  >"$WORK/sqlite.out" 2>&1
chk "write: sqlite3 CLI creates a db with 300 rows" $? || show "$WORK/sqlite.out"
[ "$(sqlite3 "$W/db/cli.db" 'select count(*), sum(a) from t' 2>&1)" = "300|45150" ]
check "write: sqlite3 CLI, a second process, reads the 300 rows back" $?
unzip -q "$WORK/archive.zip" -d "$W/unzipped" >"$WORK/unzip.out" 2>&1
chk "write: unzip an archive into the mount" $? || show "$WORK/unzip.out"
git_in() { git -C "$1" -c user.name=workflow -c user.email=workflow@example.invalid "${@:2}"; }
{ mkdir -p "$W/project" && cp "$SRC/git/README.md" "$SRC/git/main.py" "$W/project/" && git_in "$W/project" init -q -b main && git_in "$W/project" add . && git_in "$W/project" commit -qm "first commit"; } \
  >"$WORK/git.out" 2>&1
chk "write: git init + add + commit in a subdirectory" $? || show "$WORK/git.out"
[ "$(git_in "$W/project" log --format=%s 2>&1)" = "first commit" ] && [ -z "$(git_in "$W/project" status --porcelain 2>&1)" ]
check "write: git log shows the commit and the work tree is clean" $?
git_in "$W/project" fsck --strict >"$WORK/git-fsck.out" 2>&1
chk "write: git fsck in the mount" $? || show "$WORK/git-fsck.out"

(cd "$W" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) >"$WORK/mount.sums" 2>"$WORK/mount-sums.err"
rc=$?
chk "write: every file reads back through the mount ($(wc -l <"$WORK/mount.sums") files)" $rc || show "$WORK/mount-sums.err"
# Closed files are committed in the background (grouped, after closes pause): `hubfs sync` waits for
# that, and then the status file must say nothing is pending. (Read at once, it may show files still
# waiting for their commit, as it should.)
timeout 120 "$BIN" sync "$W" >"$WORK/sync-w.out" 2>&1
chk "write: hubfs sync of the writable mount exits 0" $? || show "$WORK/sync-w.out"
"$BIN" status --json >"$WORK/status3.json" 2>&1
run_py status_check.py 30 "$WORK/status3.json" "clean=writable mount, every file closed and synced,:$W"
t=$(date +%s)
"$BIN" unmount "$W" >"$WORK/unmount-w.out" 2>&1
rc=$?
chk "write: hubfs unmount exits 0 ($(( $(date +%s) - t )) s)" $rc || show "$WORK/unmount-w.out"
why=""; mounted "$W" && why="still mounted"; alive "$W_PID" && why="$why pid $W_PID still runs"
chk "write: once unmount returns, the mount is gone and its process has exited" "$([ -z "$why" ]; echo $?)" ||
  echo "          $why"
run_py verify_hub.py 240 local/workflows "$WORK/hub-writable" "$WORK/mount.sums" "$WORK/known.sums" "$WORK/expected.json"
HUB_W="$WORK/hub-writable/files"
[ "$(sqlite3 "file:$HUB_W/db/cli.db?mode=ro" 'select count(*), sum(a) from t' 2>&1)" = "300|45150" ]
check "hub: the sqlite3 CLI db downloaded from the Hub has the 300 rows" $?
git_in "$HUB_W/project" fsck --strict >"$WORK/git-hub.out" 2>&1 &&
  [ "$(git_in "$HUB_W/project" log --format=%s 2>&1)" = "first commit" ] &&
  [ "$(git_in "$HUB_W/project" show HEAD:main.py 2>&1)" = 'print("hi")' ]
chk "hub: the git repository downloaded from the Hub passes fsck and holds the commit" $? || show "$WORK/git-hub.out"

# ---------------------------------------------------------------------------------------------------------
# 7. mixed-read soak
# ---------------------------------------------------------------------------------------------------------
echo "== mixed-read soak (${SOAK_SECS} s)"
run_py soak.py $((SOAK_SECS + 120)) "$M" "$D" "$REF_M" "$REF_D" "$SOAK_SECS"
ls "$M" >/dev/null 2>&1 && ls "$D/data" >/dev/null 2>&1 && alive "$M_PID" && alive "$D_PID"
check "soak: both mounts are alive at the end" $?
for log in "$M_LOG" "$D_LOG"; do
  size=$(stat -c %s "${log:-/nonexistent}" 2>/dev/null || echo -1)
  [ "$size" -ge 0 ] && [ "$size" -lt "$LOG_CAP" ]
  rc=$?
  check "soak: log $(basename "${log:-none}") is under its 10 MiB cap ($size bytes)" $rc
done

# ---------------------------------------------------------------------------------------------------------
# 8. unmount
# ---------------------------------------------------------------------------------------------------------
echo "== unmount"
for pair in "$M:$M_PID" "$M2:$M2_PID" "$D:$D_PID" "$NM:$NM_PID" "$ND:$ND_PID"; do
  dir="${pair%:*}" pid="${pair##*:}"
  t=$(date +%s%N)
  timeout 120 "$BIN" unmount "$dir" >"$WORK/unmount.out" 2>&1
  rc=$?
  t=$(( ($(date +%s%N) - t) / 1000000 ))
  why="exit $rc"; mounted "$dir" && why="$why, still mounted"; alive "$pid" && why="$why, pid $pid still runs"
  chk "hubfs unmount $(basename "$dir"): exit 0, unmounted, its process gone when it returns ($t ms)" \
    "$([ "$why" = "exit 0" ]; echo $?)" || { echo "          $why"; show "$WORK/unmount.out"; }
done
"$BIN" status --json >"$WORK/status4.json" 2>&1
run_py status_check.py 30 "$WORK/status4.json" "absent=model mount:$M" "absent=NFS model server:$NM" "absent=writable mount:$W"
mkdir -p "$WORK/plain"
out="$(timeout 30 "$BIN" unmount "$WORK/plain" 2>&1)"
rc=$?
[ "$rc" -ne 0 ] && grep -q "not a hubfs mount" <<<"$out"
chk "hubfs unmount of a plain directory fails with 'not a hubfs mount'" $? || echo "          | exit $rc: $out"

# ---------------------------------------------------------------------------------------------------------
# 9. POSIX tools into a writable mount
# ---------------------------------------------------------------------------------------------------------
# shellcheck source=tests/workflows/posix_tools.sh
. "$HERE/posix_tools.sh"

# ---------------------------------------------------------------------------------------------------------
# 10. overlay: edit a model repo with a read token, publish the edits as a pull request
# ---------------------------------------------------------------------------------------------------------
# shellcheck source=tests/workflows/overlay.sh
. "$HERE/overlay.sh"

echo "workflows: took $(( $(date +%s) - T0 )) s"
echo "workflows: $PASSED passed, $FAILED failed"
DONE=1
[ "$FAILED" -eq 0 ]
