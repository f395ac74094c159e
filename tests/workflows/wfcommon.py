"""Helpers shared by the workflow scripts (imported, not run).

Every script prints one line per check: `ok NAME` or `FAIL NAME<TAB>reason` (names may hold colons);
tests/workflows/run.sh counts them. A check that raises is reported as failed with the exception, and the script goes on.
"""

import hashlib
import json
import sys
import traceback
from pathlib import Path

FAILED = 0


def ok(name: str) -> None:
    print(f"ok {name}", flush=True)


def fail(name: str, reason: str) -> None:
    global FAILED
    FAILED += 1
    reason = " ".join(str(reason).split())[:600]
    print(f"FAIL {name}\t{reason}", flush=True)


def check(name: str, fn) -> object:
    """Runs fn(); it returns normally (ok), returns a string (failure reason) or raises (failure)."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - every error is a failed check
        traceback.print_exc(file=sys.stderr)
        fail(name, f"{type(e).__name__}: {e}")
        return None
    if isinstance(r, str):
        fail(name, r)
        return None
    ok(name)
    return r


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def bit_equal(a, b) -> bool:
    """Tensors equal bit for bit (the demo weights are random bits: NaNs included, NaN != NaN)."""
    import numpy as np

    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def load_manifest(path) -> dict:
    """The reference manifest written by hub_ref.py: {repo path: {"sha256", "size"}}."""
    return json.loads(Path(path).read_text())


def exit_code() -> int:
    return 1 if FAILED else 0
