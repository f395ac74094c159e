# shellcheck shell=bash
# Section 9 of tests/workflows/run.sh, sourced by it: POSIX tools into a writable mount.
# Uses run.sh's BIN, PY, HERE, WORK, EP and its helpers (check, chk, show, run_py, start_mount,
# mount_checks, alive, mounted).
#
# A writable dataset mount has to take what the ordinary copy tools do to a directory. The mount keeps
# modes, owners, times, symlinks (and FIFOs, sockets, devices) itself, in its journal beside the staging
# area, so they survive commits and a remount with the same --cache-dir; regular files go to the Hub,
# symlinks do not (the Hub cannot store them); hard links are one inode in the mount and every name a
# file of its own on the Hub.
#
#   source tree on local disk: text files, a 2 MiB random file, run.sh 0755, secret.txt 0600, old.txt
#   with a 2001 mtime, owned.txt owned by daemon:daemon, sub/ (and the tree's root) with old mtimes,
#   link -> sub/file.txt, a FIFO sub/pipe, hard links a-hard.txt (of a.txt) and sub/random-hard.bin
#   (of random.bin); a tar (tar -cpf: it records the hard links) and a zip (zip -ry: zip skips the
#   FIFO) of it; a local git repo with two commits
#   1. rsync -a SRC/ MNT/rs/; a second rsync -a --itemize-changes prints nothing, before the commit and
#      again after `hubfs sync` (and that one makes no commit on the Hub); rsync -aH SRC/ MNT/rsh/
#   2. cp -a, tar -xpf, unzip, git clone (fsck --strict, log) into the mount; then inside the mount
#      cp -al MNT/cpa MNT/cpal and git clone --local MNT/clone MNT/clonel (both make hard links)
#   3. through the mount: type, mode, owner, mtime of every entry and symlink targets equal the source's;
#      the hard links of rsh/, cpa/, tar/, cpal/ and clonel/ are one inode with st_nlink 2 (or more);
#      ln MNT/cpa/a.txt MNT/hardlink.txt works
#   4. after `hubfs sync`: every regular file on the Hub with its source's sha256 (every name of a hard
#      link), no symlink on the Hub; `status --verbose` lists the hard links
#   5. unmount, remount with the same --cache-dir: the same modes, owners, mtimes, symlinks and hard
#      links (st_nlink, one inode, a write through one name read through the other)
#   6. a --write NFS server: nfs-cp of the source's regular files in, unmount, sha256 on the Hub

echo "== POSIX tools into a writable mount"
PT_T0=$(date +%s)
PT="$WORK/posix" PM="$WORK/posix-mnt" PN="$WORK/posix-nfs"
PS="$PT/src" PG="$PT/repo"
PT_REPO=local/posix-tools PT_NFS_REPO=local/posix-nfs
mkdir -p "$PT"

# pt_run OUT LIMIT CMD...: CMD with its stdout and stderr in OUT, killed after LIMIT seconds.
pt_run() { local out="$1" limit="$2"; shift 2; timeout -k 5 "$limit" "$@" >"$out" 2>&1; }
# pt_meta DIR [FORMAT]: one line per entry under DIR (DIR itself is `.`): path, type, mode, owner and
# mtime in seconds (FORMAT replaces `%y %m %U:%G %Ts`); for a symlink `path -> target`. Sorted.
pt_meta() {
  (cd "$1" && { find . ! -type l -printf "%p ${2:-%y %m %U:%G %Ts}\n"; find . -type l -printf '%p -> %l\n'; }) 2>&1 |
    LC_ALL=C sort
}
# pt_sums DIR PREFIX [FIND ARGS...]: `sha256sum` lines of the regular files under DIR, as ./PREFIX/path.
pt_sums() {
  local dir="$1" prefix="$2"; shift 2
  (cd "$dir" && find . "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sed "s|  \./|  ./$prefix|"
}
# pt_linked LABEL A B [N]: A and B (under the mount) are one inode with st_nlink N (default 2).
pt_linked() {
  local a b
  a="$(stat -c '%i %h' "$2" 2>&1)" b="$(stat -c '%i %h' "$3" 2>&1)"
  [ "$a" = "$b" ] && [ "${a#* }" = "${4:-2}" ]
  chk "$1 ($a / $b)" $?
}
pt_commits() { "$PY" "$HERE/posix_hub.py" commits "$PT_REPO" 2>>"$PT/commits.err"; }
git_pt() { git -C "$1" -c user.name=workflow -c user.email=workflow@example.invalid "${@:2}"; }

# --- the source tree, its archives, a git repo (local disk) -----------------------------------------------
mkdir -p "$PS/sub/deeper" "$PG"
printf 'alpha\n' >"$PS/a.txt"
printf 'beta\nbeta\n' >"$PS/b.txt"
seq 1 5000 >"$PS/sub/file.txt"
printf 'deep\n' >"$PS/sub/deeper/deep.txt"
head -c 2097152 /dev/urandom >"$PS/random.bin"
printf '#!/bin/sh\necho hi\n' >"$PS/run.sh" && chmod 0755 "$PS/run.sh"
printf 'secret\n' >"$PS/secret.txt" && chmod 0600 "$PS/secret.txt"
printf 'old\n' >"$PS/old.txt" && touch -d '2001-02-03 04:05:06' "$PS/old.txt"
printf 'owned\n' >"$PS/owned.txt" && chown daemon:daemon "$PS/owned.txt"
ln -s sub/file.txt "$PS/link"
mkfifo "$PS/sub/pipe"
ln "$PS/a.txt" "$PS/a-hard.txt" && ln "$PS/random.bin" "$PS/sub/random-hard.bin"
touch -d '2002-03-04 05:06:07' "$PS/sub"  # after everything is in it: directories' mtimes last
touch -d '2003-04-05 06:07:08' "$PS"
tar -C "$PS" -cpf "$PT/src.tar" . && (cd "$PS" && zip -qry "$PT/src.zip" .) &&
  git_pt "$PG" init -q -b main && printf 'one\n' >"$PG/one.txt" && git_pt "$PG" add . && git_pt "$PG" commit -qm "first commit" &&
  mkdir "$PG/dir" && printf 'two\n' >"$PG/dir/two.txt" && head -c 65536 /dev/urandom >"$PG/dir/blob.bin" &&
  git_pt "$PG" add . && git_pt "$PG" commit -qm "second commit"
check "posix: source tree, its tar and zip, and a local git repo with two commits built on local disk" $?
pt_meta "$PS" >"$PT/src.meta"
# unzip restores no owner, nor the root's mode and mtime; zip skips FIFOs
pt_meta "$PS" '%y %m %Ts' | grep -v -e '^\. ' -e '^\./sub/pipe ' >"$PT/src-noowner.meta"

curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer hf_local_write" \
  -H 'content-type: application/json' -d '{"name":"posix-tools","organization":"local","type":"dataset"}' >/dev/null
check "posix: dataset repo $PT_REPO created through the Hub API" $?
HF_TOKEN=hf_local_write start_mount posix setsid "datasets/$PT_REPO" "$PM" --write
mount_checks "posix: writable dataset" "datasets/$PT_REPO" "$PM" $?

# pt_same_meta LABEL WANT DIR [FORMAT]: pt_meta of DIR equals the file WANT.
pt_same_meta() {
  local label="$1" want="$2" dir="$3" fmt="${4:-}" got="$PT/$RANDOM.meta"
  if [ -n "$fmt" ]; then pt_meta "$dir" "$fmt" | grep -v '^\. ' >"$got"; else pt_meta "$dir" >"$got"; fi
  diff "$want" "$got" >"$got.diff"
  chk "$label" $? || show "$got.diff"
}
# pt_rsync_quiet LABEL OUT [RSYNC ARGS...]: rsync -a --itemize-changes SRC/ MNT/rs/ exits 0, prints nothing.
pt_rsync_quiet() {
  local label="$1" out="$2" rc lines; shift 2
  pt_run "$out" 60 rsync -a --itemize-changes "$@" "$PS/" "$PM/rs/"
  rc=$?
  lines=$(wc -l <"$out")
  [ "$rc" = 0 ] && [ "$lines" = 0 ] && ! [ -s "$out" ]
  chk "$label (exit $rc, $lines lines)" $? || show "$out"
}

if ! mounted "$PM"; then
  check "posix: $PM is mounted (the FUSE checks cannot run)" 1
else
  # --- 1. rsync -----------------------------------------------------------------------------------------
  pt_run "$PT/rsync1.out" 60 rsync -a "$PS/" "$PM/rs/"
  chk "posix: rsync -a SRC/ MNT/rs/ exits 0" $? || show "$PT/rsync1.out"
  pt_rsync_quiet "posix: a second rsync -a --itemize-changes right away prints nothing (modes, owners, mtimes, symlink kept)" \
    "$PT/rsync2.out"
  pt_run "$PT/rsynch.out" 60 rsync -aH "$PS/" "$PM/rsh/"
  chk "posix: rsync -aH SRC/ MNT/rsh/ (hard links kept) exits 0" $? || show "$PT/rsynch.out"

  # --- 2. cp -a, tar, unzip, git clone ------------------------------------------------------------------
  pt_run "$PT/cpa.out" 60 cp -a "$PS" "$PM/cpa"
  chk "posix: cp -a SRC MNT/cpa exits 0" $? || show "$PT/cpa.out"
  mkdir -p "$PM/tar" 2>"$PT/tar.out" && pt_run "$PT/tar.out" 60 tar -C "$PM/tar" -xpf "$PT/src.tar"
  chk "posix: mkdir MNT/tar; tar -C MNT/tar -xpf SRC.tar exits 0" $? || show "$PT/tar.out"
  pt_run "$PT/unzip.out" 60 unzip -q "$PT/src.zip" -d "$PM/zip"
  rc=$?
  [ "$rc" = 0 ] && ! [ -s "$PT/unzip.out" ]
  chk "posix: unzip -q SRC.zip -d MNT/zip exits 0 and prints nothing (exit $rc)" $? || show "$PT/unzip.out"
  pt_run "$PT/clone.out" 60 git clone -q "$PG" "$PM/clone"
  chk "posix: git clone -q LOCALREPO MNT/clone exits 0" $? || show "$PT/clone.out"
  pt_run "$PT/fsck.out" 60 git -C "$PM/clone" fsck --strict
  chk "posix: git -C MNT/clone fsck --strict exits 0" $? || show "$PT/fsck.out"
  pt_run "$PT/log.out" 30 git -C "$PM/clone" log --format=%s
  [ "$(cat "$PT/log.out")" = $'second commit\nfirst commit' ]
  chk "posix: git -C MNT/clone log shows both commits" $? || show "$PT/log.out"
  # Hard links inside the mount: a cp -al snapshot, and a local clone (git links its objects).
  pt_run "$PT/cpal.out" 60 cp -al "$PM/cpa" "$PM/cpal"
  chk "posix: cp -al MNT/cpa MNT/cpal (a snapshot of hard links) exits 0" $? || show "$PT/cpal.out"
  pt_run "$PT/clonel.out" 60 git clone -q --local "$PM/clone" "$PM/clonel"
  chk "posix: git clone --local MNT/clone MNT/clonel exits 0" $? || show "$PT/clonel.out"
  pt_run "$PT/fsckl.out" 60 git -C "$PM/clonel" fsck --strict
  chk "posix: git -C MNT/clonel fsck --strict exits 0" $? || show "$PT/fsckl.out"
  obj="$(cd "$PM/clonel/.git/objects" 2>/dev/null && find . -type f -path './??/*' | head -n1)"
  [ -n "$obj" ] && pt_linked "posix: git clone --local hard-linked its objects (clone/ and clonel/ $obj)" \
    "$PM/clone/.git/objects/$obj" "$PM/clonel/.git/objects/$obj" ||
    chk "posix: clonel/.git/objects has objects" 1
  { pt_sums "$PG" "" -path ./.git -prune -o; pt_sums "$PG/.git/objects" ".git/objects/"; } >"$PT/repo.sums"
  { pt_sums "$PM/clone" "" -path ./.git -prune -o; pt_sums "$PM/clone/.git/objects" ".git/objects/"; } >"$PT/clone.sums" 2>&1
  n=$(wc -l <"$PT/repo.sums")
  diff "$PT/repo.sums" "$PT/clone.sums" >"$PT/clone.diff"
  chk "posix: clone/'s working tree and .git/objects read back with the source repo's sha256 ($n files)" $? ||
    show "$PT/clone.diff"

  # --- 3. metadata through the mount ---------------------------------------------------------------------
  for d in rsh tar cpa; do
    pt_linked "posix: $d/a.txt and $d/a-hard.txt are one inode" "$PM/$d/a.txt" "$PM/$d/a-hard.txt" \
      "$([ "$d" = cpa ] && echo 4 || echo 2)"
    pt_linked "posix: $d/random.bin and $d/sub/random-hard.bin are one inode" "$PM/$d/random.bin" \
      "$PM/$d/sub/random-hard.bin" "$([ "$d" = cpa ] && echo 4 || echo 2)"
  done
  pt_linked "posix: cp -al: cpal/run.sh is cpa/run.sh" "$PM/cpa/run.sh" "$PM/cpal/run.sh"
  for d in rs rsh cpa tar cpal; do
    pt_same_meta "posix: $d/: type, mode, owner, mtime of every entry equal the source's (run.sh 755, secret.txt 600, old.txt 2001, sub/ 2002, owned.txt daemon) and link's target" \
      "$PT/src.meta" "$PM/$d"
  done
  pt_same_meta "posix: zip/: type, mode and mtime of every entry below the root equal the source's, and link's target" \
    "$PT/src-noowner.meta" "$PM/zip" '%y %m %Ts'
  got="$(readlink -v "$PM/rs/link" 2>&1)"
  [ "$got" = "$(readlink "$PS/link")" ]
  chk "posix: readlink MNT/rs/link gives the source's target sub/file.txt" $? || show <<<"$got"
  got="$(ls -l "$PM/rs/link" 2>&1)"
  [ "${got:0:1}" = l ] && [ "${got% -> sub/file.txt}" != "$got" ]
  chk "posix: ls -l MNT/rs/link shows a symlink -> sub/file.txt" $? || show <<<"$got"
  pt_run "$PT/cat-link.out" 30 cmp "$PM/rs/link" "$PS/sub/file.txt"
  chk "posix: reading through MNT/rs/link gives sub/file.txt's bytes" $? || show "$PT/cat-link.out"
  pt_run "$PT/ln.out" 30 ln "$PM/cpa/a.txt" "$PM/hardlink.txt"
  chk "posix: ln MNT/cpa/a.txt MNT/hardlink.txt exits 0" $? || show "$PT/ln.out"
  pt_linked "posix: hardlink.txt is cpa/a.txt (a.txt, a-hard.txt, cpal's two and hardlink.txt: 5 names)" \
    "$PM/cpa/a.txt" "$PM/hardlink.txt" 5

  # --- 4. committed: rsync again, no commit; everything on the Hub ---------------------------------------
  pt_run "$PT/sync1.out" 90 "$BIN" sync "$PM"
  chk "posix: hubfs sync MNT exits 0 (every copy committed)" $? || show "$PT/sync1.out"
  for d in rs rsh cpa tar zip cpal; do pt_meta "$PM/$d"; done >"$PT/mnt-before.meta"
  for f in rsh/a.txt rsh/a-hard.txt tar/random.bin tar/sub/random-hard.bin cpa/a.txt cpal/a-hard.txt hardlink.txt; do
    printf '%s %s\n' "$f" "$(stat -c '%i %h' "$PM/$f" 2>&1)"
  done >"$PT/links-before.txt"
  c1="$(pt_commits)"
  pt_rsync_quiet "posix: after the commit, rsync -a --itemize-changes SRC/ MNT/rs/ prints nothing" "$PT/rsync3.out"
  pt_run "$PT/sync2.out" 90 "$BIN" sync "$PM"
  chk "posix: hubfs sync MNT exits 0 after that rsync" $? || show "$PT/sync2.out"
  c2="$(pt_commits)"
  [ -n "$c1" ] && [ "$c1" = "$c2" ]
  chk "posix: that rsync made no commit on the Hub (commits before ${c1:-?}, after ${c2:-?})" $? || show "$PT/commits.err"
  for d in rs rsh cpa tar zip cpal; do pt_meta "$PM/$d"; done >"$PT/mnt-after.meta"
  diff "$PT/mnt-before.meta" "$PT/mnt-after.meta" >"$PT/mnt-after.diff"
  chk "posix: rs/ rsh/ cpa/ tar/ zip/ cpal/: modes, owners, mtimes and symlinks unchanged by the commit" $? || show "$PT/mnt-after.diff"

  for d in rs rsh cpa tar zip cpal; do pt_sums "$PS" "$d/"; done >"$PT/hub.sums"
  printf '%s  ./hardlink.txt\n' "$(sha256sum <"$PS/a.txt" | cut -d' ' -f1)" >>"$PT/hub.sums"
  pt_sums "$PM/clone" "clone/" >>"$PT/hub.sums" 2>"$PT/clone-read.err"
  pt_sums "$PM/clonel" "clonel/" >>"$PT/hub.sums" 2>>"$PT/clone-read.err"
  run_py posix_hub.py 180 verify "posix" "$PT_REPO" "$PT/hub" "$PT/hub.sums" \
    rs/link cpa/link tar/link zip/link rs/sub/pipe cpa/sub/pipe tar/sub/pipe

  # What only the mount keeps is counted and listed by `hubfs status`.
  pt_run "$PT/status-v.out" 30 "$BIN" status --verbose
  grep -q "kept in this mount only, never on the Hub: [1-9][0-9]* symlink(s) or special file(s), [1-9][0-9]* mode/owner change(s)" "$PT/status-v.out" &&
    grep -q "local    rs/link: symlink -> sub/file.txt" "$PT/status-v.out" &&
    grep -q "local    rs/sub/pipe: fifo" "$PT/status-v.out" &&
    grep -q "local    rs/secret.txt: file mode 0600" "$PT/status-v.out" &&
    grep -q "name(s) are hard links" "$PT/status-v.out" &&
    grep -q "local    rsh/a-hard.txt: hard link (2 names; also rsh/a.txt)" "$PT/status-v.out"
  chk "posix: hubfs status --verbose counts and lists the symlinks, FIFOs, modes and hard links kept only in the mount" $? ||
    show "$PT/status-v.out"

  # `hubfs status` asks the mount itself: a file held open for writing shows at once (the status file
  # is only rewritten as the committer works, and nothing wakes it while a file stays open).
  mkdir -p "$PM/live" && exec 3>"$PM/live/open-now.txt" && printf 'x' >&3
  pt_run "$PT/status-live.json" 30 "$BIN" status --json
  "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if any(e["path"] == "live/open-now.txt" and e["open"] for m in d if m.get("writable") for e in m["writable"]["dirty"]) else 1)' \
    "$PT/status-live.json" 2>>"$PT/status-live.err"
  chk "posix: hubfs status shows a file held open for writing at once (live/open-now.txt, open)" $? ||
    show "$PT/status-live.json" "$PT/status-live.err"
  exec 3>&-
  rm -rf "$PM/live"

  # --- 5. remount with the same --cache-dir --------------------------------------------------------------
  pt_run "$PT/unmount1.out" 120 "$BIN" unmount "$PM"
  chk "posix: hubfs unmount MNT exits 0" $? || show "$PT/unmount1.out"
  HF_TOKEN=hf_local_write start_mount posix setsid "datasets/$PT_REPO" "$PM" --write
  rc=$?
  [ "$rc" = 0 ] && mounted "$PM" && alive "$MPID"
  chk "posix: remounted with the same --cache-dir (exit $rc, pid ${MPID:-?})" $? || show "$WORK/posix.out"
  if mounted "$PM"; then
    for d in rs rsh cpa tar zip cpal; do pt_meta "$PM/$d"; done >"$PT/mnt-remount.meta"
    diff "$PT/mnt-before.meta" "$PT/mnt-remount.meta" >"$PT/mnt-remount.diff"
    chk "posix: after the remount rs/ rsh/ cpa/ tar/ zip/ cpal/ have the same modes, owners, mtimes and symlinks as before" $? ||
      show "$PT/mnt-remount.diff"
    for f in rsh/a.txt rsh/a-hard.txt tar/random.bin tar/sub/random-hard.bin cpa/a.txt cpal/a-hard.txt hardlink.txt; do
      printf '%s %s\n' "$f" "$(stat -c '%i %h' "$PM/$f" 2>&1)"
    done >"$PT/links-remount.txt"
    diff "$PT/links-before.txt" "$PT/links-remount.txt" >"$PT/links-remount.diff"
    chk "posix: after the remount the hard links have the same inode numbers and st_nlink" $? ||
      show "$PT/links-remount.diff"
    printf 'shared\n' >"$PM/rsh/a-hard.txt" && [ "$(cat "$PM/rsh/a.txt" 2>&1)" = shared ]
    chk "posix: after the remount a write through rsh/a-hard.txt is read through rsh/a.txt" $?
    got="$(readlink -v "$PM/rs/link" 2>&1)"
    [ "$got" = sub/file.txt ]
    chk "posix: after the remount readlink MNT/rs/link gives sub/file.txt" $? || show <<<"$got"
    pt_rsync_quiet "posix: after the remount rsync -a --dry-run --itemize-changes SRC/ MNT/rs/ prints nothing" \
      "$PT/rsync4.out" --dry-run
    pt_run "$PT/unmount2.out" 120 "$BIN" unmount "$PM"
    chk "posix: hubfs unmount MNT exits 0 after the remount" $? || show "$PT/unmount2.out"
  fi
fi

# --- 6. NFS: nfs-cp into a --write server ------------------------------------------------------------------
# libnfs-utils has nfs-cp, nfs-ls and nfs-cat only: no way to make a directory over NFS from the shell (and
# no libnfs for Python here). The repo's directories are made on the Hub instead, by seeding it with
# sub/deeper/seed.txt through huggingface_hub before the server starts: then every regular file of the
# source tree goes over NFS to its own path, sub/ and sub/deeper/ included.
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer hf_local_write" \
  -H 'content-type: application/json' -d '{"name":"posix-nfs","organization":"local","type":"dataset"}' >/dev/null &&
  HF_TOKEN=hf_local_write "$PY" "$HERE/posix_hub.py" seed "$PT_NFS_REPO" sub/deeper/seed.txt 'seed' >"$PT/seed.out" 2>&1
chk "posix NFS: dataset repo $PT_NFS_REPO created, sub/deeper/seed.txt uploaded with huggingface_hub" $? || show "$PT/seed.out"
HF_TOKEN=hf_local_write start_mount posix-nfs setsid "datasets/$PT_NFS_REPO" "$PN" --nfs --serve-only --nfs-addr 127.0.0.1:0 --write
mount_checks "posix NFS: --write server (--serve-only)" "datasets/$PT_NFS_REPO" nfs $?
PN_PORT="$(sed -n 's|^mounted .* at nfs://[0-9.]*:\([0-9]*\)/ .*|\1|p' <<<"$MOUT")"
if [ -z "$PN_PORT" ]; then
  check "posix NFS: the server printed its port (the NFS checks cannot run)" 1
else
  q="?nfsport=$PN_PORT&mountport=$PN_PORT"
  rc=0 n=0
  : >"$PT/nfs-cp.err"
  while IFS= read -r -d '' f; do
    f="${f#./}"
    n=$((n + 1))
    timeout -k 5 60 nfs-cp "$PS/$f" "nfs://127.0.0.1//$f$q" >>"$PT/nfs-cp.err" 2>&1 || { rc=1; echo "^ nfs-cp $f" >>"$PT/nfs-cp.err"; }
  done < <(cd "$PS" && find . -type f -print0 | LC_ALL=C sort -z)
  chk "posix NFS: nfs-cp LOCAL nfs://.../PATH of the source's $n regular files (into /, sub/, sub/deeper/) exits 0" $rc ||
    show "$PT/nfs-cp.err"
  pt_run "$PT/unmount-nfs.out" 120 "$BIN" unmount "$PN"
  chk "posix NFS: hubfs unmount of the server exits 0 (it drains)" $? || show "$PT/unmount-nfs.out"
  { pt_sums "$PS" ""; printf '%s  ./sub/deeper/seed.txt\n' "$(printf seed | sha256sum | cut -d' ' -f1)"; } >"$PT/nfs.sums"
  run_py posix_hub.py 180 verify "posix NFS" "$PT_NFS_REPO" "$PT/hub-nfs" "$PT/nfs.sums"
fi
echo "   POSIX tools section: $(( $(date +%s) - PT_T0 )) s"
