"""Checks the output of `hubfs status --json` (a JSON array, one object per running mount).

    python status_check.py STATUS_JSON CHECK...

CHECK is one of
    listed=LABEL:MOUNTPOINT:FRONTEND:MODE:CACHE_DIR   the mount is listed with these values
    clean=LABEL:MOUNTPOINT                            a writable mount with nothing dirty and no error
    absent=LABEL:MOUNTPOINT                           the mount is no longer listed
"""

import json
import os
import re
import sys
from pathlib import Path

from wfcommon import check, exit_code

KEYS = ["pid", "repo", "revision", "commit", "mountpoint", "frontend", "mode", "log_file", "cache_dir", "writable"]
WRITABLE_KEYS = ["dirty", "counters", "last_commit", "last_error"]

raw = Path(sys.argv[1]).read_text()


def entries():
    data = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError(f"not a JSON array: {raw[:200]}")
    return data


def find(mountpoint):
    for e in entries():
        if isinstance(e, dict) and os.path.realpath(str(e.get("mountpoint", ""))) == os.path.realpath(mountpoint):
            return e
    return None


def listed(label, mountpoint, frontend, mode, cache_dir):
    def run():
        e = find(mountpoint)
        if e is None:
            return f"not listed (mountpoints listed: {[x.get('mountpoint') for x in entries()]})"
        missing = [k for k in KEYS if k not in e]
        if missing:
            return f"keys missing: {missing} (has {sorted(e)})"
        bad = []
        if e["frontend"] != frontend:
            bad.append(f"frontend {e['frontend']!r}")
        if e["mode"] != mode:
            bad.append(f"mode {e['mode']!r}")
        if os.path.realpath(str(e["cache_dir"])) != os.path.realpath(cache_dir):
            bad.append(f"cache_dir {e['cache_dir']!r}")
        if not re.fullmatch(r"[0-9a-f]{40}", str(e["commit"])):
            bad.append(f"commit {e['commit']!r}")
        if not isinstance(e["pid"], int) or not Path(f"/proc/{e['pid']}").exists():
            bad.append(f"pid {e['pid']!r} is not a running process")
        w = e["writable"]
        if mode == "writable":
            if not isinstance(w, dict) or [k for k in WRITABLE_KEYS if k not in w]:
                bad.append(f"writable is {json.dumps(w)[:200]}")
        elif w is not None:
            bad.append(f"writable should be null for a read-only mount: {json.dumps(w)[:200]}")
        if bad:
            return ", ".join(bad)
    return run


def clean(label, mountpoint):
    def run():
        e = find(mountpoint)
        if e is None:
            return "not listed"
        w = e.get("writable") or {}
        if w.get("dirty") != [] or w.get("last_error") is not None:
            return f"dirty {json.dumps(w.get('dirty'))[:300]}, last_error {w.get('last_error')!r}"
    return run


def absent(label, mountpoint):
    def run():
        if find(mountpoint) is not None:
            return "still listed"
    return run


for arg in sys.argv[2:]:
    kind, _, spec = arg.partition("=")
    parts = spec.split(":")
    label = parts[0]
    if kind == "listed":
        check(f"status --json lists the {label} ({parts[2]}, {parts[3]}, its cache dir)", listed(*parts))
    elif kind == "clean":
        check(f"status --json: the {label} has nothing dirty and no error", clean(*parts))
    elif kind == "absent":
        check(f"status --json no longer lists the {label}", absent(*parts))
    else:
        raise SystemExit(f"unknown check {arg}")
sys.exit(exit_code())
