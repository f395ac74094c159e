"""Fixtures of the hubfs Python API tests: a local Hub for the whole session, seeded repos.

    python -m pytest tests/python            # the `hubfs` on HUBFS_BIN, else the installed wheel's

The session starts `hubfs local-hub --seed-demo` (the same binary the API drives) and reads its
endpoint from the `endpoint: URL` line it prints, as ci/lib.sh does. The environment is isolated
before any test runs: HF_HOME points into the session's scratch dir, HF_TOKEN/HF_TOKEN_PATH are
removed (a real token of the caller must not reach the local Hub) and HF_ENDPOINT is the local Hub.
huggingface_hub and datasets are imported inside the tests, after that, because they read
HF_ENDPOINT when imported. Mounts need root and FUSE (as the rest of the project's tests).
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import hubfs

#: The local Hub's write token (docs/LOCAL_HUB.md).
WRITE_TOKEN = "hf_local_write"


@dataclass
class LocalHub:
    endpoint: str
    token: str
    work: Path
    cache_dir: Path


def _read_endpoint(proc: subprocess.Popen, timeout: float) -> str:
    """The URL of the `endpoint: URL` line; keeps draining stdout afterwards so the Hub never blocks."""
    lines: "queue.Queue[str]" = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line == "":
            break
        if line.startswith("endpoint: "):
            return line[len("endpoint: ") :].strip()
    raise RuntimeError("hubfs local-hub did not print its endpoint within %ss" % timeout)


@pytest.fixture(scope="session", autouse=True)
def hub() -> Iterator[LocalHub]:
    work = Path(tempfile.mkdtemp(prefix="hubfs-pytest."))
    os.environ["HF_HOME"] = str(work / "hf-home")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_DATASETS_CACHE"] = str(work / "datasets-cache")
    for k in ("HF_TOKEN", "HF_TOKEN_PATH", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(k, None)
    err = open(work / "hub.err", "w")
    proc = subprocess.Popen(
        [hubfs.find_binary(), "local-hub", "--data-dir", str(work / "hub"), "--seed-demo"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        endpoint = _read_endpoint(proc, 60)
    except Exception:
        proc.kill()
        proc.wait(10)
        err.close()
        raise RuntimeError("local hub did not start: " + (work / "hub.err").read_text()[-2000:]) from None
    os.environ["HF_ENDPOINT"] = endpoint
    h = LocalHub(endpoint=endpoint, token=WRITE_TOKEN, work=work, cache_dir=work / "cache")
    try:
        yield h
    finally:
        # Mounts a failed test left behind (their cache dir is ours), then the Hub.
        try:
            for s in hubfs.mounts(h.cache_dir):
                subprocess.run([hubfs.find_binary(), "unmount", s["mountpoint"]], timeout=120, check=False)
        except Exception:
            pass
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        err.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def api(hub: LocalHub):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.endpoint, token=hub.token)


@pytest.fixture(scope="session")
def table_rows() -> list:
    """The rows of the seeded parquet dataset: a pure function of the row number."""
    words = ["alpha", "bravo", "charlie", "delta"]
    return [{"id": i, "text": f"row {i} {words[i % 4]}", "value": i * 0.5} for i in range(3000)]


@pytest.fixture(scope="session")
def parquet_dataset(hub: LocalHub, api, table_rows) -> str:
    """datasets/local/py-table holding data/train.parquet (3,000 rows in 3 row groups)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = hub.work / "train.parquet"
    pq.write_table(pa.Table.from_pylist(table_rows), path, row_group_size=1000)
    api.create_repo("local/py-table", repo_type="dataset", exist_ok=True)
    api.upload_file(
        path_or_fileobj=str(path), path_in_repo="data/train.parquet", repo_id="local/py-table", repo_type="dataset"
    )
    return "local/py-table"


@pytest.fixture(scope="session")
def writable_dataset(hub: LocalHub, api) -> str:
    api.create_repo("local/py-writable", repo_type="dataset", exist_ok=True)
    api.upload_file(path_or_fileobj=b"# writable\n", path_in_repo="README.md", repo_id="local/py-writable", repo_type="dataset")
    return "local/py-writable"


@pytest.fixture(scope="session")
def private_model(hub: LocalHub, api) -> str:
    api.create_repo("local/py-private", private=True, exist_ok=True)
    api.upload_file(path_or_fileobj=b'{"private": true}\n', path_in_repo="config.json", repo_id="local/py-private")
    return "local/py-private"
