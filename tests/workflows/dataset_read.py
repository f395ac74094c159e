"""Read workflows on a read-only mount of datasets/demo/tiny-dataset, checked against the Hub's copy.

    python dataset_read.py MOUNT REF_DIR

REF_DIR is what hub_ref.py wrote for the dataset. `datasets` keeps its Arrow cache in
$HF_DATASETS_CACHE (run.sh points it into its scratch dir).
"""

import csv
import json
import random
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from datasets import load_dataset

import make_demo_parquet
from wfcommon import check, exit_code

mnt, ref = Path(sys.argv[1]), Path(sys.argv[2])
files = ref / "files"
PARQUET = "data/parquet/train-00000.parquet"


def csv_shards():
    shards = sorted(str(p) for p in (mnt / "data/train").glob("*.csv"))
    if len(shards) != 3:
        return f"expected 3 csv shards, found {shards}"
    ds = load_dataset("csv", data_files=shards, split="train")
    want = []
    for p in sorted((files / "data/train").glob("*.csv")):
        with open(p, newline="") as f:
            want += list(csv.DictReader(f))
    if ds.num_rows != len(want):
        return f"{ds.num_rows} rows, the Hub's files have {len(want)}"
    if ds.column_names != ["id", "text", "label"]:
        return f"columns {ds.column_names}"
    for i in [0, 1, 199, 200, 401, len(want) - 1]:
        got, w = ds[i], want[i]
        if (got["id"], got["text"], got["label"]) != (int(w["id"]), w["text"], int(w["label"])):
            return f"row {i}: {got} != {w}"
    print(f"# csv: {ds.num_rows} rows", flush=True)


def jsonl():
    ds = load_dataset("json", data_files=str(mnt / "data/validation/part-0.jsonl"), split="train")
    want = [json.loads(line) for line in (files / "data/validation/part-0.jsonl").read_text().splitlines()]
    if ds.num_rows != len(want):
        return f"{ds.num_rows} rows, the Hub's file has {len(want)}"
    for i in [0, 37, len(want) - 1]:
        if ds[i] != want[i]:
            return f"row {i}: {ds[i]} != {want[i]}"
    print(f"# jsonl: {ds.num_rows} rows", flush=True)


def parquet_row_groups():
    m = pq.ParquetFile(mnt / PARQUET)
    r = pq.ParquetFile(files / PARQUET)
    n = r.metadata.num_row_groups
    if m.metadata.num_row_groups != n or m.metadata.num_rows != r.metadata.num_rows:
        return f"{m.metadata.num_row_groups} row groups / {m.metadata.num_rows} rows, " \
               f"the Hub's copy {n} / {r.metadata.num_rows}"
    if n < 2:
        return f"only {n} row group"
    order = list(range(n)) * 2
    random.Random(7).shuffle(order)
    for i in order:
        if not m.read_row_group(i).equals(r.read_row_group(i)):
            return f"row group {i} differs"
    # Column projection: only some column chunks are read.
    if not m.read_row_group(n - 1, columns=["value"]).equals(r.read_row_group(n - 1, columns=["value"])):
        return "column 'value' of the last row group differs"
    print(f"# parquet: {n} row groups read in order {order}", flush=True)


def parquet_generator():
    # The seeded file is what tests/workflows/make_demo_parquet.py describes.
    t = pq.read_table(mnt / PARQUET)
    for i in [0, 4999, 5000, 12345, t.num_rows - 1]:
        got = {c: t.column(c)[i].as_py() for c in t.column_names}
        if got != make_demo_parquet.row(i):
            return f"row {i}: {got} != {make_demo_parquet.row(i)}"


def pandas_parquet():
    got = pd.read_parquet(mnt / PARQUET)
    want = pd.read_parquet(files / PARQUET)
    if got.shape != want.shape or not got.equals(want):
        return f"DataFrame {got.shape} differs from the Hub copy's {want.shape}"
    print(f"# pandas: {got.shape[0]} rows, label counts {got['label'].value_counts().sort_index().tolist()}",
          flush=True)


check("dataset: datasets.load_dataset('csv') on the shards gives the Hub's rows", csv_shards)
check("dataset: datasets.load_dataset('json') on the jsonl gives the Hub's rows", jsonl)
check("dataset: pyarrow ParquetFile.read_row_group in shuffled order equals the Hub copy", parquet_row_groups)
check("dataset: the parquet rows are the ones make_demo_parquet.py generates", parquet_generator)
check("dataset: pandas.read_parquet equals the Hub copy", pandas_parquet)
sys.exit(exit_code())
