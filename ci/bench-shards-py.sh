#!/usr/bin/env bash
# A sharded model loaded from Python the way loaders do it in parallel: a thread pool in which every
# worker opens one shard with `safetensors.safe_open(path, "np")` and takes every tensor (mmap and page
# faults), against one thread taking the shards one after another, through the same mount build:
#   bash ci/bench-shards-py.sh HUBFS_BIN PYTHON [--full]
#
# A model repo on the local Hub holds N shards of float32 tensors, uploaded with the stock client (Xet):
# 8 shards of 32 MiB, or 8 of 256 MiB with --full. Every pass is a fresh read-only mount (a process of
# its own, fresh cache dir, page cache dropped before it), passes alternated:
#   serial:  one thread, the shards in turn;
#   pool:    a ThreadPoolExecutor with one worker per shard;
#   pool-budget: the pool with `--memory-limit 128M`.
# On loopback and on the 30 ms profile (every request delayed 30 ms, 200 Mbit/s per download connection).
# Prints aggregate MB/s (timed from the first `safe_open` to the last tensor), Hub bytes / bytes loaded
# (the local Hub's /admin/stats), and the mount's peak RSS (VmHWM) for every pass. Checks: every tensor
# has the source's sha256; Hub bytes <= 1.02 x the shards' size (no block fetched twice, under 128M
# too, where reads without room take exact ranges and never load those blocks whole as well); peak RSS
# within the memory budget + 10% (the default budget, 512 MiB without a cgroup limit) and + 25% for
# 128M (a small budget's fixed part is a larger share). Speed ratios are printed, not checked (figures,
# not timed tests). Ends with `bench-shards-py: N passed, M failed`.
set -uo pipefail

BIN="${1:?usage: ci/bench-shards-py.sh HUBFS_BIN PYTHON [--full]}"
PY="${2:?usage: ci/bench-shards-py.sh HUBFS_BIN PYTHON [--full]}"
SHARDS=8
MIB=32
[ "${3:-}" = "--full" ] && MIB=256
MIB="${HUBFS_BENCH_SHARD_MIB:-$MIB}"
PROFILES="${HUBFS_BENCH_PROFILES:-loopback 30ms}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/lib.sh
. "$ROOT/ci/lib.sh"
scratch_dir bench-shards "${TMPDIR:-/var/tmp}"

mkdir -p "$MNT" "$WORK/src"
"$PY" - "$WORK/src" "$SHARDS" "$MIB" "$WORK/want.json" <<'EOF'
import hashlib, json, sys
import numpy as np
from safetensors.numpy import save_file
out, shards, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(29)
want = {}
for s in range(shards):
    tensors, left, i = {}, mib << 20, 0
    while left > 0:
        # Mixed sizes, as layers are: 256 KiB to 8 MiB.
        n = min(left, int(rng.choice([1 << 18, 1 << 20, 4 << 20, 8 << 20]))) // 4
        # Random bits (incompressible, as trained weights nearly are to Xet's compression), so
        # the Hub's bytes compare with the file's size.
        tensors[f"layer{i}.weight"] = rng.integers(0, 1 << 32, n, dtype=np.uint32).view(np.float32)
        left -= n * 4
        i += 1
    name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    save_file(tensors, f"{out}/{name}")
    want[name] = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in tensors.items()}
json.dump(want, open(sys.argv[4], "w"))
EOF
check "$SHARDS safetensors shards of $MIB MiB written" $?
TOTAL=$(du -cb "$WORK"/src/*.safetensors | tail -n 1 | cut -f1)

start_local_hub --commit-limit 0
export HF_ENDPOINT="$EP" HF_TOKEN=hf_local_write HF_HOME="$WORK/hf-home" HF_HUB_DISABLE_PROGRESS_BARS=1
curl -sf -X POST "$EP/api/repos/create" -H "authorization: Bearer $HF_TOKEN" -H 'content-type: application/json' \
  -d '{"name":"sharded","organization":"local","type":"model"}' >/dev/null
"$PY" -c "from huggingface_hub import HfApi; HfApi().upload_folder(repo_id='local/sharded', folder_path='$WORK/src')" \
  >"$WORK/upload.log" 2>&1
check "uploaded with the stock client" $? || tail -n 5 "$WORK/upload.log"

hub_bytes() { # bytes the Hub has sent since the last reset (downloads and xorb ranges)
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats" |
    "$PY" -c "import json, sys; d = json.load(sys.stdin); print(d['resolve']['bytes_out'] + d['cas']['bytes_out'])"
}

# pass KIND: a fresh mount, the shards loaded as KIND; sets RATE (MB/s), RATIO (Hub bytes / bytes) and
# RSS (the mount's peak, MiB).
pass() {
  local kind="$1" limit=() workers="$SHARDS" mp secs
  [ "$kind" = serial ] && workers=1
  [ "$kind" = pool-budget ] && limit=(--memory-limit 128M)
  "$BIN" mount local/sharded "$MNT" --cache-dir "$WORK/cache-$RANDOM$RANDOM" "${limit[@]}" >"$WORK/mount.out" 2>&1 &
  mp=$!
  PIDS+=("$mp")
  wait_line "$WORK/mount.out" "mounted " >/dev/null || { cat "$WORK/mount.out"; RATE=0; RATIO=9; RSS=0; return 1; }
  ls -l "$MNT" >/dev/null
  sync
  echo 3 >/proc/sys/vm/drop_caches
  curl -sf -H "authorization: Bearer $HF_TOKEN" "$EP/admin/stats?reset=1" >/dev/null
  "$PY" - "$MNT" "$workers" "$WORK/got.json" <<'EOF'
import hashlib, json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy
from safetensors import safe_open
root, workers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
names = sorted(n for n in os.listdir(root) if n.endswith(".safetensors"))
def load(name):
    with safe_open(os.path.join(root, name), "np") as f:
        return name, {k: f.get_tensor(k) for k in f.keys()}
t0 = time.perf_counter()
with ThreadPoolExecutor(max_workers=workers) as pool:
    loaded = dict(pool.map(load, names))
secs = time.perf_counter() - t0
# Hashed after the timed load.
sha = {n: {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in t.items()} for n, t in loaded.items()}
json.dump({"secs": secs, "sha": sha}, open(out, "w"))
EOF
  local rc=$?
  RSS=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$mp/status")
  local got
  got=$(hub_bytes)
  kill "$mp"; wait "$mp" 2>/dev/null
  [ "$rc" = 0 ] && "$PY" -c "import json, sys; sys.exit(json.load(open('$WORK/got.json'))['sha'] != json.load(open('$WORK/want.json')))"
  check "$PROFILE, $kind: every tensor of every shard has the source's sha256" $?
  secs=$("$PY" -c "import json; print(json.load(open('$WORK/got.json'))['secs'])" 2>/dev/null || echo 0)
  RATE=$(awk -v b="$TOTAL" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? b / s / 1e6 : 0) }')
  RATIO=$(awk -v g="$got" -v b="$TOTAL" 'BEGIN { printf "%.3f", g / b }')
  echo "  figure: $PROFILE, $kind ($workers threads, $SHARDS x $MIB MiB): $RATE MB/s, Hub bytes $RATIO x, mount peak RSS $RSS MiB"
  local budget=512 factor=1.10 most=1.02
  [ "$kind" = pool-budget ] && { budget=128; factor=1.25; }
  awk -v r="$RATIO" -v m="$most" 'BEGIN { exit !(r <= m) }'
  check "$PROFILE, $kind: Hub bytes <= $most x the shards ($RATIO)" $?
  awk -v r="$RSS" -v b="$budget" -v f="$factor" 'BEGIN { exit !(r <= b * f) }'
  check "$PROFILE, $kind: mount peak RSS $RSS MiB <= $factor x $budget MiB" $?
}

for PROFILE in $PROFILES; do
  set_profile "$PROFILE"
  declare -A R=()
  for round in 1 2; do
    for kind in serial pool pool-budget; do pass "$kind"; R[$kind.$round]=$RATE; done
  done
  s=$(awk -v a="${R[serial.1]}" -v b="${R[serial.2]}" 'BEGIN { printf "%.0f", (a + b) / 2 }')
  p=$(awk -v a="${R[pool.1]}" -v b="${R[pool.2]}" 'BEGIN { printf "%.0f", (a + b) / 2 }')
  pb=$(awk -v a="${R[pool-budget.1]}" -v b="${R[pool-budget.2]}" 'BEGIN { printf "%.0f", (a + b) / 2 }')
  echo "  figure: $PROFILE, $SHARDS x $MIB MiB: serial $s MB/s, pool of $SHARDS $p MB/s ($(awk -v p="$p" -v s="$s" 'BEGIN { printf "%.2f", (s > 0 ? p / s : 0) }') x), pool under 128M $pb MB/s"
done

echo "bench-shards-py: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
