"""Python writers on a writable mount: pandas.DataFrame.to_parquet and sqlite3.

    python write_workload.py MOUNT SCRATCH

Writes MOUNT/tables/metrics.parquet (and the same DataFrame to SCRATCH/metrics.parquet, so the Hub
copy can be compared byte for byte) and MOUNT/db/app.sqlite (a table written by one connection and
read by a second one). What verify_hub.py checks after unmount: SCRATCH/expected.json.
"""

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from wfcommon import check, exit_code, sha256_file

mnt, scratch = Path(sys.argv[1]), Path(sys.argv[2])
ROWS = 500


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({
        "step": np.arange(2_000, dtype=np.int64),
        "loss": rng.random(2_000),
        "split": ["train" if i % 5 else "eval" for i in range(2_000)],
    })


def to_parquet():
    (mnt / "tables").mkdir(exist_ok=True)
    df = frame()
    df.to_parquet(mnt / "tables/metrics.parquet", index=False)
    df.to_parquet(scratch / "metrics.parquet", index=False)
    back = pd.read_parquet(mnt / "tables/metrics.parquet")
    if not back.equals(df):
        return "reading the file back through the mount gives another DataFrame"
    a, b = sha256_file(mnt / "tables/metrics.parquet"), sha256_file(scratch / "metrics.parquet")
    if a != b:
        return f"mount copy sha256 {a} != local copy {b}"


def sqlite_two_connections():
    (mnt / "db").mkdir(exist_ok=True)
    path = mnt / "db/app.sqlite"
    w = sqlite3.connect(path)
    w.execute("create table runs (id integer primary key, name text not null, score real)")
    with w:
        w.executemany("insert into runs (id, name, score) values (?, ?, ?)",
                      [(i, f"run-{i}", i / 7) for i in range(ROWS)])
    r = sqlite3.connect(path)
    n, total = r.execute("select count(*), sum(id) from runs").fetchone()
    if (n, total) != (ROWS, ROWS * (ROWS - 1) // 2):
        return f"the second connection sees {n} rows (sum {total})"
    with w:  # a second transaction, seen by the reader afterwards
        w.execute("update runs set score = -1 where id = 7")
    if r.execute("select score from runs where id = 7").fetchone() != (-1.0,):
        return "the second connection does not see the update"
    r.close()
    w.close()
    leftovers = sorted(p.name for p in (mnt / "db").iterdir() if p.name != "app.sqlite")
    if leftovers and leftovers != ["cli.db"]:
        return f"journal files left behind: {leftovers}"


check("write: pandas.DataFrame.to_parquet into the mount, read back equal", to_parquet)
check(f"write: sqlite3 table of {ROWS} rows, a second connection reads it and an update", sqlite_two_connections)
(scratch / "expected.json").write_text(json.dumps({
    "tables/metrics.parquet": sha256_file(scratch / "metrics.parquet") if (scratch / "metrics.parquet").exists() else None,
    "sqlite": {"db/app.sqlite": {"table": "runs", "rows": ROWS}},
}))
sys.exit(exit_code())
