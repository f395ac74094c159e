#!/usr/bin/env bash
# Sparse reads: parquet queries and random preads through a dataset mount, Hub bytes beside the bytes
# each one needs.
#   bash ci/bench-parquet.sh HUBFS_BIN PYTHON [--full]
#
# A dataset on the local Hub holds parquet shards uploaded with the stock client (Xet). Each shard has
# 8 row groups of six columns: x (int64, the row's number, so row groups have disjoint statistics),
# y (float64), s (a short string) and b1, b2, b3 (400 random bytes each): 40,000 rows, about 47 MiB
# a shard, in 2 shards, or 8 with --full. Every pass is a fresh read-only mount (a process of its own, a fresh
# cache dir, the page cache dropped before it). Passes:
#   duckdb narrow    SELECT sum(x)                                   (DuckDB, 4 threads)
#   duckdb two       SELECT sum(x), sum(y)
#   duckdb filtered  SELECT sum(octet_length(b1)) WHERE x < (half the first row group)
#   duckdb full      every column
#   pyarrow narrow / filtered / full   pyarrow.parquet.read_table with the same columns and filter
#   pread 4k / 64k   200 random preads of that size spread over the shards
#   cp all           every shard read through in order, 128 KiB at a time (as `cp` and `dd` read)
#   PASS@direct      the same through a mount with --direct-io '*.parquet' (no kernel readahead: the
#                    default); the passes without @direct mount with --direct-io none (the page cache)
# On loopback and on the 30 ms profile (every request delayed 30 ms, 200 Mbit/s per connection), or the
# profiles in HUBFS_BENCH_PROFILES. Prints, per pass: seconds, the bytes it needs (from the parquet
# metadata: every footer and the column chunks of the row groups read; for preads, the bytes read),
# Hub bytes (the local Hub's /admin/stats: /resolve/ and CAS bodies) and their ratio, the Hub's
# requests per bucket (api, resolve, CAS) and the mount's peak RSS.
# Checks: every answer equals the one computed from the source files; Hub bytes <= 4 x needed for the
# narrow and two-column queries (<= 16 x for DuckDB's with --direct-io none, whose small column chunks the
# kernel reads ahead of, see below), <= 6 x for the filtered ones (a 2 MiB column chunk costs its 8 MiB
# block); <= 1.05 x the dataset for a full scan and cp (no byte twice); random 4 KiB preads <= 128 KiB
# of Hub bytes per read (two Xet chunks of 64 KiB). Speed is printed, not checked. By default every
# query runs with the default (@direct), and DuckDB's column queries, pyarrow's full scan and cp also
# through the page cache. HUBFS_BENCH_MOUNT_ARGS adds mount options (`--readahead-kib 128`),
# HUBFS_BENCH_PASSES picks passes, and HUBFS_BENCH_BINS="A B" runs every pass with each of several
# builds in turn (alternated, on the same Hub and data; checks apply to each). Ends with `bench-parquet: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-parquet.sh HUBFS_BIN PYTHON [--full]}"
PY="${2:?usage: ci/bench-parquet.sh HUBFS_BIN PYTHON [--full]}"
SHARDS=2
ROWS=40000
if [ "${3:-}" = "--full" ]; then SHARDS=8; fi
PROFILES="${HUBFS_BENCH_PROFILES:-loopback 30ms}"
PASSES="${HUBFS_BENCH_PASSES:-duckdb:narrow@direct duckdb:two@direct duckdb:filtered@direct duckdb:full@direct pyarrow:narrow@direct pyarrow:filtered@direct pyarrow:full@direct pread:4k@direct pread:64k@direct cp:all@direct duckdb:narrow duckdb:two pyarrow:full cp:all}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-parquet "${TMPDIR:-/var/tmp}"

if ! "$PY" -c 'import duckdb, pyarrow' 2>/dev/null; then
  echo "  FAIL  $PY lacks duckdb or pyarrow (tests/conformance/requirements.txt)"
  echo "bench-parquet: 0 passed, 1 failed"
  exit 1
fi

mkdir -p "$MNT" "$WORK/src/data"
"$PY" - "$WORK/src/data" "$SHARDS" "$ROWS" <<'EOF'
import os, sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
out, shards, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(44)
for s in range(shards):
    x = np.arange(s * rows, (s + 1) * rows, dtype=np.int64)
    blob = lambda: pa.array([rng.bytes(400) for _ in range(rows)], pa.binary())
    t = pa.table({
        "x": x,
        "y": rng.random(rows),
        "s": pa.array([f"row-{i % 977}" for i in x]),
        "b1": blob(), "b2": blob(), "b3": blob(),
    })
    pq.write_table(t, f"{out}/part-{s:05d}.parquet", row_group_size=rows // 8)
EOF
check "$SHARDS parquet shards of $ROWS rows written" $?
TOTAL=$(du -cb "$WORK"/src/data/*.parquet | tail -n 1 | cut -f1)

start_local_hub --commit-limit 0
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_PROGRESS_BARS=1
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"name":"tables","organization":"local","type":"dataset"}' >/dev/null
"$PY" -c "from huggingface_hub import HfApi; HfApi().upload_folder(repo_id='local/tables', repo_type='dataset', folder_path='$WORK/src')" \
  >"$WORK/upload.log" 2>&1
check "uploaded with the stock client ($((TOTAL >> 20)) MiB)" $? || tail -n 5 "$WORK/upload.log"

# One pass: runs READER:QUERY on the files under $1 and prints "secs needed answer" as JSON; with a
# second argument, the source dir, it prints the answer computed there instead (no timing).
cat >"$WORK/pass.py" <<'EOF'
import glob, json, os, random, sys, time
import pyarrow.parquet as pq
kind, root = sys.argv[1], sys.argv[2]
reader, query = kind.split(":")
files = sorted(glob.glob(f"{root}/data/*.parquet"))
first = pq.ParquetFile(files[0]).metadata
cut = first.row_group(0).num_rows // 2
COLS = {"narrow": ["x"], "two": ["x", "y"], "filtered": ["b1"], "full": ["x", "y", "s", "b1", "b2", "b3"]}

def needed(src):
    """Bytes a query needs, from the source files' metadata: footers and the column chunks read."""
    total = 0
    for f in sorted(glob.glob(f"{src}/data/*.parquet")):
        with open(f, "rb") as h:
            h.seek(-8, 2)
            total += int.from_bytes(h.read(4), "little") + 8
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            cols = COLS[query]
            if query == "filtered":
                st = rg.column(0).statistics
                cols = ["x", "b1"] if st.min < cut else []
            for c in range(rg.num_columns):
                if rg.column(c).path_in_schema in cols:
                    total += rg.column(c).total_compressed_size
    return total

def run():
    if reader == "duckdb":
        import duckdb
        con = duckdb.connect(config={"threads": 4})
        src = f"read_parquet('{root}/data/*.parquet')"
        sql = {
            "narrow": f"SELECT sum(x) FROM {src}",
            "two": f"SELECT sum(x), sum(y) FROM {src}",
            "filtered": f"SELECT sum(octet_length(b1)) FROM {src} WHERE x < {cut}",
            "full": f"SELECT sum(x), sum(y), count(s), sum(octet_length(b1) + octet_length(b2) + octet_length(b3)) FROM {src}",
        }[query]
        return [float(v) for v in con.execute(sql).fetchone()]
    if reader == "pyarrow":
        import pyarrow.compute as pc
        filt = [("x", "<", cut)] if query == "filtered" else None
        t = pq.read_table(f"{root}/data", columns=COLS[query], filters=filt)
        if query == "filtered":
            return [float(pc.sum(pc.binary_length(t["b1"])).as_py())]
        return [float(pc.sum(pc.binary_length(t[c])).as_py()) if c.startswith("b") or c == "s"
                else float(pc.sum(t[c]).as_py()) for c in COLS[query]]
    if reader == "cp":
        # Every shard read through in order, 128 KiB at a time, as `cp` and `dd bs=128k` read.
        import hashlib
        h = hashlib.sha256()
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while chunk := fh.read(128 << 10):
                    h.update(chunk)
        return [h.hexdigest()]
    # pread: random offsets (seeded, so the source computes the same answer)
    size = {"4k": 4096, "64k": 65536}[query]
    rng = random.Random(44)
    fds = [os.open(f, os.O_RDONLY) for f in files]
    sizes = [os.fstat(fd).st_size for fd in fds]
    import hashlib
    h = hashlib.sha256()
    for _ in range(200):
        i = rng.randrange(len(fds))
        off = rng.randrange(0, sizes[i] - size)
        h.update(os.pread(fds[i], size, off))
    return [h.hexdigest()]

if len(sys.argv) > 3:
    if reader == "pread":
        need = 200 * {"4k": 4096, "64k": 65536}[query]
    elif reader == "cp":
        need = sum(os.path.getsize(f) for f in glob.glob(f"{sys.argv[3]}/data/*.parquet"))
    else:
        need = needed(sys.argv[3])
    print(json.dumps({"answer": run(), "needed": need}))
else:
    t = time.perf_counter()
    answer = run()
    print(json.dumps({"answer": answer, "secs": time.perf_counter() - t}))
EOF

cat >"$WORK/compare.py" <<'EOF'
import json, math, sys
try:
    got = json.load(open(sys.argv[1]))
except ValueError:
    got = {"answer": None, "secs": 0}
want = json.load(open(sys.argv[2]))
a, b = got["answer"], want["answer"]
# Float sums may differ in their last bits with the order threads add them in.
same = a is not None and len(a) == len(b) and all(
    math.isclose(x, y, rel_tol=1e-9) if isinstance(x, float) else x == y for x, y in zip(a, b))
print(int(same), f"{got['secs']:.2f}", want["needed"])
EOF

stats() { # the Hub's bytes and requests since the last reset: "bytes api resolve cas"
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats" |
    "$PY" -c "import json, sys; d = json.load(sys.stdin); print(d['resolve']['bytes_out'] + d['cas']['bytes_out'], d['api']['requests'], d['resolve']['requests'], d['cas']['requests'])"
}

# pass KIND MOUNT_BIN: a fresh mount, one READER:QUERY pass; prints its figures and checks its answer and
# bytes.
pass() {
  local label="$1" kind="${1%@direct}" mbin="$2" mp rc same secs need bytes api res cas ratio rss margs
  read -ra margs <<<"${HUBFS_BENCH_MOUNT_ARGS:-}"
  if [ "$label" = "$kind" ]; then margs+=(--direct-io none); else margs+=(--direct-io '*.parquet'); fi
  "$mbin" mount datasets/local/tables "$MNT" --cache-dir "$WORK/cache-$RANDOM$RANDOM" "${margs[@]}" >"$WORK/mount.out" 2>&1 &
  mp=$!
  PIDS+=("$mp")
  wait_line "$WORK/mount.out" "mounted " >/dev/null || { cat "$WORK/mount.out"; return 1; }
  ls -l "$MNT/data" >/dev/null
  sync
  echo 3 >/proc/sys/vm/drop_caches
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats?reset=1" >/dev/null
  "$PY" "$WORK/pass.py" "$kind" "$MNT" >"$WORK/got.json" 2>"$WORK/pass.err"
  rc=$?
  read -r bytes api res cas <<<"$(stats)"
  rss=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$mp/status")
  kill "$mp"; wait "$mp" 2>/dev/null
  umount -l "$MNT" 2>/dev/null
  [ $rc -eq 0 ] || tail -n 3 "$WORK/pass.err"
  # "same secs needed": whether the answer is the source's, the pass's seconds, the bytes it needs
  read -r same secs need <<<"$("$PY" "$WORK/compare.py" "$WORK/got.json" "$WORK/want-$kind.json")"
  [ "$same" = 1 ]
  check "$PROFILE, $label: the answer equals the source's" $?
  ratio=$(awk -v b="$bytes" -v n="$need" 'BEGIN { printf "%.2f", b / n }')
  printf '| %s | %s | %s | %s | %.1f | %.1f | %s | %s / %s / %s | %s |\n' "$PROFILE" "$label" "$(basename "$mbin")" "$secs" \
    "$(awk -v n="$need" 'BEGIN { print n / 1048576 }')" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" \
    "$ratio" "$api" "$res" "$cas" "$rss"
  case "$kind" in
    *:narrow | *:two)
      if [ "$label" != "$kind" ] || [ "${kind%%:*}" = pyarrow ]; then
        awk -v r="$ratio" 'BEGIN { exit !(r <= 4) }'
        check "$PROFILE, $label: Hub bytes <= 4 x needed ($ratio)" $?
      else
        # DuckDB reads a column chunk's header, then its body: through the page cache the kernel takes
        # that for a sequential reader and reads 128 KiB, then 256 KiB ahead (the mount's 1 MiB
        # readahead), about 0.4 MiB for a 28 KB chunk. What hubfs fetches on top of the kernel's
        # reads is checked.
        awk -v r="$ratio" 'BEGIN { exit !(r <= 16) }'
        check "$PROFILE, $label: Hub bytes <= 16 x needed ($ratio; the kernel's readahead)" $?
      fi ;;
    *:filtered)
      # The filter's rows are in one 2 MiB column chunk, read in one go: its second MiB makes the
      # reader's run sequential, which loads the chunk's 8 MiB block.
      awk -v r="$ratio" 'BEGIN { exit !(r <= 6) }'
      check "$PROFILE, $label: Hub bytes <= 6 x needed ($ratio; the chunk's block)" $? ;;
    *:full | cp:all)
      awk -v b="$bytes" -v t="$TOTAL" 'BEGIN { exit !(b <= 1.05 * t) }'
      check "$PROFILE, $label: Hub bytes <= 1.05 x the dataset" $? ;;
    pread:4k)
      awk -v b="$bytes" 'BEGIN { exit !(b / 200 <= 131072) }'
      check "$PROFILE, $label: Hub bytes per read $((bytes / 200)) <= 128 KiB" $? ;;
  esac
}

for kind in $PASSES; do
  kind="${kind%@direct}"
  "$PY" "$WORK/pass.py" "$kind" "$WORK/src" "$WORK/src" >"$WORK/want-$kind.json"
done
echo "dataset: $SHARDS shards, $((TOTAL >> 20)) MiB"
printf '| profile | pass | build | seconds | needed MiB | Hub MiB | Hub / needed | requests api / resolve / cas | peak RSS MiB |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for PROFILE in $PROFILES; do
  set_profile "$PROFILE"
  for kind in $PASSES; do
    for b in ${HUBFS_BENCH_BINS:-$BIN}; do pass "$kind" "$b"; done
  done
done

echo "bench-parquet: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
