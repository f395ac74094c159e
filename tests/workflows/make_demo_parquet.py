"""Writes the demo dataset's parquet file: src/local_hub/demo_data/train-00000.parquet.

    python tests/workflows/make_demo_parquet.py [OUT]

The output is committed and embedded in the binary (`include_bytes!` in src/local_hub/seed.rs), which
seeds it as `data/parquet/train-00000.parquet` of datasets/demo/tiny-dataset. Content is deterministic:
4 row groups x 5,000 rows; columns id int64, text string, value float64, label int64, each a pure
function of the row number (see `row`). The workflow suite (tests/workflows/) recomputes rows with the
same function to check what it reads. Written with pyarrow (pinned in tests/conformance/requirements.txt).
"""

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUPS = 4
ROWS_PER_GROUP = 5_000
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def mix(i: int) -> int:
    """splitmix64 of i: the same generator as seed.rs's demo_bytes."""
    z = (i * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def row(i: int) -> dict:
    """Row i of the file (0-based, across row groups)."""
    h = mix(i)
    return {
        "id": i,
        "text": f"row {i} {WORDS[h % 8]} {WORDS[(h >> 3) % 8]}",
        "value": (h >> 11) / float(1 << 53) * 100.0,
        "label": (h >> 7) % 5,
    }


SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("value", pa.float64()), ("label", pa.int64())])


def table() -> pa.Table:
    rows = [row(i) for i in range(ROW_GROUPS * ROWS_PER_GROUP)]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path(__file__).resolve().parents[2] / "src/local_hub/demo_data/train-00000.parquet"
    pq.write_table(table(), out, row_group_size=ROWS_PER_GROUP, compression="zstd")
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == ROW_GROUPS and meta.num_rows == ROW_GROUPS * ROWS_PER_GROUP
    print(f"{out}: {out.stat().st_size} bytes, {meta.num_row_groups} row groups, {meta.num_rows} rows")


if __name__ == "__main__":
    main()
