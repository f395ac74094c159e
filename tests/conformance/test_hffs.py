"""HfFileSystem (fsspec): ls/info/exists and ranged reads compared with the uploaded bytes.

HfFileSystemFile._fetch_range sends `GET …/resolve/{rev}/{path}` with `Range: bytes=a-b` and follows redirects
(also for Xet-stored files: there is no Xet path for ranged reads), so the redirect target must honour Range too.
"""

from __future__ import annotations

import pytest

from conftest import ALICE, MiB


@pytest.fixture(scope="module")
def fs(hf, endpoint):
    from huggingface_hub import HfFileSystem

    return HfFileSystem(endpoint=endpoint, token=ALICE, skip_instance_cache=True)


def test_ls_and_info(fs, model_repo):
    root = model_repo.repo_id
    names = {e["name"]: e for e in fs.ls(root, detail=True)}
    assert f"{root}/{model_repo.small.path_in_repo}" in names
    assert names[f"{root}/weights"]["type"] == "directory"
    info = fs.info(f"{root}/{model_repo.big.path_in_repo}")
    assert info["type"] == "file"
    assert info["size"] == len(model_repo.big.data)
    assert fs.exists(f"{root}/{model_repo.big.path_in_repo}")
    assert not fs.exists(f"{root}/nope.bin")
    assert fs.isdir(f"{root}/weights")


def test_find_and_glob(fs, dataset_repo):
    root = f"datasets/{dataset_repo.repo_id}"
    found = {p[len(root) + 1:] for p in fs.find(root)}
    assert set(dataset_repo.files) <= found
    csvs = fs.glob(f"{root}/data/*.csv")
    assert csvs == [f"{root}/data/train.csv"]


RANGES = [
    (0, 1),
    (0, 100),
    (1, 4096),
    (12345, 1),
    (MiB - 10, 20),  # across a MiB boundary
    (5 * MiB - 3, 7),  # across fsspec's default 5 MiB block
    (10 * MiB + 777, MiB + 5),  # a larger span
    (20 * MiB - 100, 100),  # the tail
    (20 * MiB - 1, 1),  # the very last byte
]


def test_seek_read_ranges_big(fs, model_repo):
    data = model_repo.big.data
    path = f"{model_repo.repo_id}/{model_repo.big.path_in_repo}"
    with fs.open(path, "rb") as f:
        assert f.size == len(data)
        for off, n in RANGES:
            f.seek(off)
            got = f.read(n)
            assert got == data[off:off + n], f"range {off}+{n} differs"
            assert f.tell() == off + n
        f.seek(-50, 2)
        assert f.read() == data[-50:]
        f.seek(3 * MiB)
        f.seek(10, 1)
        assert f.read(10) == data[3 * MiB + 10:3 * MiB + 20]


def test_seek_read_small_block_size(fs, model_repo):
    """A tiny block size forces many independent Range requests."""
    data = model_repo.big.data
    path = f"{model_repo.repo_id}/{model_repo.big.path_in_repo}"
    with fs.open(path, "rb", block_size=64 * 1024) as f:
        for off in (0, 65535, 65536, 7 * MiB + 1, len(data) - 65537):
            f.seek(off)
            assert f.read(70_000) == data[off:off + 70_000]


def test_cat_file_ranges(fs, model_repo):
    data = model_repo.big.data
    path = f"{model_repo.repo_id}/{model_repo.big.path_in_repo}"
    for start, end in [(0, 10), (4 * MiB, 4 * MiB + 4096), (len(data) - 10, len(data))]:
        assert fs.cat_file(path, start=start, end=end) == data[start:end]


def test_read_whole_files(fs, model_repo, text_repo):
    big = f"{model_repo.repo_id}/{model_repo.big.path_in_repo}"
    with fs.open(big, "rb") as f:
        assert f.read() == model_repo.big.data  # streaming fast path (block_size=0)
    small = f"{text_repo.repo_id}/{text_repo.small.path_in_repo}"
    assert fs.cat_file(small) == text_repo.small.data
    with fs.open(small, "rb") as f:
        f.seek(6)
        assert f.read(4) == text_repo.small.data[6:10]


def test_stream_file_chunks(fs, model_repo):
    """block_size=0: HfFileSystemStreamFile, one streamed GET read in pieces (it cannot seek)."""
    data = model_repo.big.data
    path = f"{model_repo.repo_id}/{model_repo.big.path_in_repo}"
    with fs.open(path, "rb", block_size=0) as f:
        assert f.read(1000) == data[:1000]
        assert f.read(3 * MiB) == data[1000:1000 + 3 * MiB]
        assert f.read() == data[1000 + 3 * MiB:]
        assert f.read(10) == b""


def test_read_at_revision(fs, text_repo):
    path = f"{text_repo.repo_id}@{text_repo.commit_notes_v1}/notes.txt"
    assert fs.cat_file(path) == text_repo.notes_v1.data
    assert fs.cat_file(f"{text_repo.repo_id}/notes.txt") == text_repo.notes_v2.data


def test_dataset_ranges(fs, dataset_repo):
    lf = dataset_repo.files["blobs/random.bin"]
    path = f"datasets/{dataset_repo.repo_id}/blobs/random.bin"
    with fs.open(path, "rb") as f:
        f.seek(1000)
        assert f.read(5000) == lf.data[1000:6000]
    csv = dataset_repo.files["data/train.csv"]
    assert fs.cat_file(f"datasets/{dataset_repo.repo_id}/data/train.csv", start=8, end=40) == csv.data[8:40]
    spaced = dataset_repo.files["dir with space/file name.txt"]
    assert fs.cat_file(f"datasets/{dataset_repo.repo_id}/dir with space/file name.txt") == spaced.data


def test_get_file(fs, model_repo, tmp_path):
    """fs.get uses hf_xet for Xet-stored files when hf_xet is active, HTTP otherwise."""
    out = tmp_path / "big.bin"
    fs.get_file(f"{model_repo.repo_id}/{model_repo.big.path_in_repo}", str(out))
    assert out.read_bytes() == model_repo.big.data


def test_private_repo_hidden_from_anonymous_fs(hf, api, endpoint):
    from huggingface_hub import HfFileSystem

    from conftest import unique

    repo_id = f"alice/{unique('fs-private')}"
    api.create_repo(repo_id, private=True)
    api.upload_file(path_or_fileobj=b"hidden\n", path_in_repo="h.txt", repo_id=repo_id, commit_message="h")
    anon = HfFileSystem(endpoint=endpoint, token=False, skip_instance_cache=True)
    assert not anon.exists(f"{repo_id}/h.txt")
    with pytest.raises(FileNotFoundError):
        anon.cat_file(f"{repo_id}/h.txt")
    owner = HfFileSystem(endpoint=endpoint, token=ALICE, skip_instance_cache=True)
    assert owner.cat_file(f"{repo_id}/h.txt") == b"hidden\n"
