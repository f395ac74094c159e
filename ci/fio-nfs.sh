#!/usr/bin/env bash
# Builds fio with its NFS engine (libnfs), which Debian's fio package lacks, from Debian's own fio
# source package, and prints the binary's path. Cached: a second run only prints the path.
#   bash ci/fio-nfs.sh            # -> /var/cache/hubfs-fio/fio (or $HUBFS_FIO_DIR/fio)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

DIR="${HUBFS_FIO_DIR:-/var/cache/hubfs-fio}"
BIN="$DIR/fio"
if [ -x "$BIN" ] && "$BIN" --enghelp 2>/dev/null | grep -qw nfs; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
for pkg in libnfs-dev build-essential dpkg-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || NEED="${NEED:-} $pkg"
done
if [ -n "${NEED:-}" ]; then
  apt-get update -qq >&2
  # shellcheck disable=SC2086
  apt-get install -y -qq -o Dpkg::Use-Pty=0 $NEED >&2
fi

# A private deb-src list derived from the machine's own sources, so the system's lists stay as they are.
APT="$DIR/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/parts"
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$APT/parts/src.sources"
else
  grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >"$APT/parts/src.list"
fi
apt_src() {
  apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$APT/parts" \
    -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"
}
apt_src update -qq >&2
SRC="$DIR/src"
rm -rf "$SRC"
mkdir -p "$SRC"
(cd "$SRC" && apt_src source --download-only fio >&2 && dpkg-source -x ./*.dsc build >&2)
(
  cd "$SRC/build"
  ./configure >"$DIR/configure.log" 2>&1
  grep -q 'NFS engine.*yes' "$DIR/configure.log" || { echo "fio configure found no libnfs" >&2; exit 1; }
  make -j"$(nproc)" >"$DIR/make.log" 2>&1
)
cp "$SRC/build/fio" "$BIN"
rm -rf "$SRC"
echo "$BIN"
