"""The repos created by `hubfs local-hub --seed-demo`: demo/tiny-model and demo/tiny-dataset.

Only the top-level model files are fixed names; everything else is discovered with list_repo_tree.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import math
import struct
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

from conftest import HEX64, MiB, sha256_file

MODEL = "demo/tiny-model"
DATASET = "demo/tiny-dataset"

DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@pytest.fixture(scope="module")
def model_tree(hf, anon_api):
    from huggingface_hub.hf_api import RepoFile

    return {e.path: e for e in anon_api.list_repo_tree(MODEL, recursive=True) if isinstance(e, RepoFile)}


@pytest.fixture(scope="module")
def dataset_tree(hf, anon_api):
    from huggingface_hub.hf_api import RepoFile

    return {e.path: e for e in anon_api.list_repo_tree(DATASET, recursive=True, repo_type="dataset")
            if isinstance(e, RepoFile)}


def test_demo_model_is_public(anon_api):
    info = anon_api.model_info(MODEL)
    assert info.id == MODEL
    assert info.private is False
    assert info.sha is not None


def test_demo_model_files(model_tree):
    for name in ("config.json", "tokenizer.json", "README.md", "model.safetensors"):
        assert name in model_tree, f"{name} missing from {sorted(model_tree)}"


def test_demo_model_safetensors_is_xet(model_tree):
    e = model_tree["model.safetensors"]
    assert e.size >= 64 * MiB
    assert e.lfs is not None and HEX64.match(e.lfs.sha256)
    assert e.lfs.size == e.size
    assert e.xet_hash is not None and HEX64.match(e.xet_hash), "model.safetensors is seeded through Xet"


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_demo_model_json_files(anon_api, cache_dir, name):
    p = anon_api.hf_hub_download(MODEL, name, cache_dir=cache_dir)
    json.loads(Path(p).read_text())


def test_demo_model_readme(anon_api, cache_dir):
    p = anon_api.hf_hub_download(MODEL, "README.md", cache_dir=cache_dir)
    assert Path(p).read_text().strip()


def _check_safetensors_header(header_len: int, header: bytes, file_size: int) -> dict:
    meta = json.loads(header)
    assert isinstance(meta, dict)
    data_len = file_size - 8 - header_len
    tensors = {k: v for k, v in meta.items() if k != "__metadata__"}
    assert tensors, "no tensors in the safetensors header"
    max_end = 0
    for name, t in tensors.items():
        start, end = t["data_offsets"]
        assert 0 <= start <= end <= data_len, (name, t, data_len)
        if t["dtype"] in DTYPE_SIZES:
            assert end - start == math.prod(t["shape"]) * DTYPE_SIZES[t["dtype"]], (name, t)
        max_end = max(max_end, end)
    assert max_end == data_len, "the tensors must cover the data section exactly"
    return tensors


def test_demo_safetensors_header_via_ranges(hf, endpoint, model_tree):
    """Read just the header through HfFileSystem range reads."""
    from huggingface_hub import HfFileSystem

    fs = HfFileSystem(endpoint=endpoint, token=False, skip_instance_cache=True)
    size = model_tree["model.safetensors"].size
    with fs.open(f"{MODEL}/model.safetensors", "rb", block_size=256 * 1024) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        assert 0 < n < 100 * MiB
        header = f.read(n)
    assert len(header) == n
    _check_safetensors_header(n, header, size)


def test_demo_safetensors_metadata_api(anon_api, model_tree):
    """HfApi.get_safetensors_metadata: HEAD + `Range: bytes=0-100000` GET on resolve (follows the redirect)."""
    meta = anon_api.get_safetensors_metadata(MODEL)
    assert not meta.sharded
    fm = meta.files_metadata["model.safetensors"]
    assert fm.tensors


def test_demo_safetensors_download_matches_tree(anon_api, model_tree, cache_dir):
    e = model_tree["model.safetensors"]
    p = anon_api.hf_hub_download(MODEL, "model.safetensors", cache_dir=cache_dir)
    assert Path(p).stat().st_size == e.size
    assert sha256_file(p) == e.lfs.sha256
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = f.read(n)
    _check_safetensors_header(n, header, e.size)


def test_demo_model_snapshot(anon_api, model_tree, cache_dir):
    snap = Path(anon_api.snapshot_download(MODEL, cache_dir=cache_dir, ignore_patterns=["*.safetensors"]))
    for path, e in model_tree.items():
        if path.endswith(".safetensors"):
            continue
        local = snap / path
        assert local.is_file(), path
        assert local.stat().st_size == e.size, path
        if e.lfs is not None:
            assert sha256_file(local) == e.lfs.sha256, path


# ---------------------------------------------------------------------------------------------
# demo/tiny-dataset
# ---------------------------------------------------------------------------------------------


def _big_folder(tree) -> tuple[str, int]:
    counts = Counter(str(PurePosixPath(p).parent) for p in tree)
    folder, n = counts.most_common(1)[0]
    return folder, n


def test_demo_dataset_shape(dataset_tree):
    assert any(p.endswith(".csv") for p in dataset_tree), "no CSV file"
    assert any(p.endswith(".jsonl") for p in dataset_tree), "no JSONL file"
    assert any(p.count("/") >= 2 for p in dataset_tree), "no nested folders"
    folder, n = _big_folder(dataset_tree)
    assert n > 1000, f"largest folder {folder!r} has only {n} files"


def test_demo_dataset_big_folder_listing(anon_api, dataset_tree):
    folder, n = _big_folder(dataset_tree)
    listed = [e.path for e in anon_api.list_repo_tree(DATASET, None if folder == "." else folder,
                                                      repo_type="dataset")]
    files_in_folder = [p for p in listed if p in dataset_tree]
    assert len(files_in_folder) == n
    assert len(listed) == len(set(listed))


def test_demo_dataset_plain_lfs_file(anon_api, dataset_tree, cache_dir):
    plain = [e for e in dataset_tree.values() if e.lfs is not None and e.xet_hash is None]
    assert plain, "the demo dataset must contain at least one plain-LFS (non-Xet) file"
    e = min(plain, key=lambda x: x.size)
    p = anon_api.hf_hub_download(DATASET, e.path, repo_type="dataset", cache_dir=cache_dir)
    assert Path(p).stat().st_size == e.size
    assert sha256_file(p) == e.lfs.sha256


def test_demo_dataset_csv_and_jsonl_parse(anon_api, dataset_tree, cache_dir):
    csvs = sorted(p for p in dataset_tree if p.endswith(".csv"))[:3]
    jsonls = sorted(p for p in dataset_tree if p.endswith(".jsonl"))[:3]
    for path in csvs:
        local = anon_api.hf_hub_download(DATASET, path, repo_type="dataset", cache_dir=cache_dir)
        rows = list(csv.reader(io.StringIO(Path(local).read_text())))
        assert len(rows) >= 2, path
        assert all(len(r) == len(rows[0]) for r in rows if r), path
        e = dataset_tree[path]
        assert Path(local).stat().st_size == e.size
        if e.lfs is not None:
            assert sha256_file(local) == e.lfs.sha256
    for path in jsonls:
        local = anon_api.hf_hub_download(DATASET, path, repo_type="dataset", cache_dir=cache_dir)
        lines = [line for line in Path(local).read_text().splitlines() if line.strip()]
        assert lines, path
        for line in lines:
            json.loads(line)


def test_demo_dataset_snapshot_without_big_folder(anon_api, dataset_tree, cache_dir):
    folder, _ = _big_folder(dataset_tree)
    pattern = f"{folder}/*"
    snap = Path(anon_api.snapshot_download(DATASET, repo_type="dataset", cache_dir=cache_dir,
                                           ignore_patterns=[pattern]))
    expected = {p: e for p, e in dataset_tree.items() if not fnmatch.fnmatch(p, pattern)}
    assert expected, "nothing left to download outside the big folder"
    for path, e in expected.items():
        local = snap / path
        assert local.is_file(), path
        assert local.stat().st_size == e.size, path
        if e.lfs is not None:
            assert sha256_file(local) == e.lfs.sha256, path


def test_demo_dataset_paths_info(anon_api, dataset_tree):
    folder, _ = _big_folder(dataset_tree)
    some = sorted(p for p in dataset_tree if str(PurePosixPath(p).parent) == folder)[:5]
    infos = anon_api.get_paths_info(DATASET, some + [folder, "definitely/missing"], repo_type="dataset")
    assert {i.path for i in infos} == set(some) | {folder}
