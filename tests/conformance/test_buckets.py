"""Storage buckets with the stock client: lifecycle, uploads (always Xet: huggingface_hub uploads bucket files
through hf_xet even with HF_HUB_DISABLE_XET), listings, downloads, batch failures, copies, sync and HfFileSystem.

In noxet mode HfFileSystem reads bucket files over plain HTTP (`/buckets/{id}/resolve/{path}` → 302 → blob
origin with Range), which is the path a client without Xet takes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import ALICE, BOB, LOCAL_READ, MiB, binary, http_status, sha256_bytes, sha256_file, unique, HEX64


def _raw(endpoint: str, method: str, path: str, token: str | None, **kw):
    from huggingface_hub.utils import get_session

    headers = kw.pop("headers", {})
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return get_session().request(method, f"{endpoint}{path}", headers=headers, **kw)


def _tree(api, bucket_id: str, prefix: str | None = None, recursive: bool = True) -> dict:
    out = {}
    for e in api.list_bucket_tree(bucket_id, prefix=prefix, recursive=recursive):
        out[(e.path, e.type)] = e
    return out


def _files(api, bucket_id: str, prefix: str | None = None) -> dict:
    return {p: e for (p, t), e in _tree(api, bucket_id, prefix).items() if t == "file"}


@pytest.fixture
def bucket(api):
    bucket_id = f"alice/{unique('bucket')}"
    url = api.create_bucket(bucket_id)
    assert url.bucket_id == bucket_id
    yield bucket_id
    api.delete_bucket(bucket_id, missing_ok=True)


@pytest.fixture
def local_tree(tmp_path) -> dict[str, bytes]:
    """A small folder: text, a 3 MiB binary, nested files and an empty file."""
    files = {
        "README.md": b"# bucket\n",
        "weights/model.bin": binary(3 * MiB),
        "data/a/1.csv": b"id\n1\n",
        "data/a/2.csv": b"id\n2\n" * 1000,
        "data/b.json": json.dumps({"k": list(range(100))}).encode(),
        "empty.txt": b"",
    }
    root = tmp_path / "src"
    for p, data in files.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(data)
    return {"root": root, "files": files}


def test_lifecycle_info_list_settings_move_delete(hf, api, bob_api, anon_api, endpoint):
    from huggingface_hub.errors import BucketNotFoundError, HfHubHTTPError

    bucket_id = f"alice/{unique('life')}"
    url = api.create_bucket(bucket_id, private=True)
    assert (url.bucket_id, url.namespace) == (bucket_id, "alice")
    with pytest.raises(HfHubHTTPError) as e:
        api.create_bucket(bucket_id)
    assert http_status(e.value) == 409
    assert api.create_bucket(bucket_id, exist_ok=True).bucket_id == bucket_id

    info = api.bucket_info(bucket_id)
    assert (info.id, info.private, info.size, info.total_files) == (bucket_id, True, 0, 0)
    raw = _raw(endpoint, "GET", f"/api/buckets/{bucket_id}", ALICE).json()
    updated0 = raw["updatedAt"]
    assert raw["createdAt"] <= updated0

    # Private: hidden from anonymous callers (401) and other users (404), both as BucketNotFoundError.
    for other, status in ((anon_api, 401), (bob_api, 404)):
        with pytest.raises(BucketNotFoundError) as e:
            other.bucket_info(bucket_id)
        assert http_status(e.value) == status
        assert bucket_id not in {b.id for b in other.list_buckets("alice")}
    assert bucket_id in {b.id for b in api.list_buckets("alice")}
    assert bucket_id in {b.id for b in api.list_buckets()}  # "me"
    assert {b.id for b in api.list_buckets("alice", search=bucket_id.split("/")[1].upper())} == {bucket_id}

    api.update_bucket_settings(bucket_id, private=False)
    assert anon_api.bucket_info(bucket_id).private is False
    updated1 = _raw(endpoint, "GET", f"/api/buckets/{bucket_id}", None).json()["updatedAt"]
    assert updated1 > updated0

    # Writes need the namespace's write token.
    with pytest.raises(HfHubHTTPError) as e:
        bob_api.update_bucket_settings(bucket_id, private=True)
    assert http_status(e.value) == 403
    with pytest.raises(HfHubHTTPError) as e:
        bob_api.create_bucket(f"alice/{unique('notbob')}")
    assert http_status(e.value) == 403
    with pytest.raises(HfHubHTTPError) as e:
        anon_api.delete_bucket(bucket_id)
    assert http_status(e.value) == 401

    moved = f"alice/{unique('moved')}"
    api.move_bucket(bucket_id, moved)
    with pytest.raises(BucketNotFoundError):
        api.bucket_info(bucket_id)
    assert api.bucket_info(moved).id == moved
    api.delete_bucket(moved)
    with pytest.raises(BucketNotFoundError) as e:
        api.bucket_info(moved)
    assert http_status(e.value) == 404
    api.delete_bucket(moved, missing_ok=True)
    with pytest.raises(BucketNotFoundError):
        api.delete_bucket(moved)


def test_upload_list_download(api, bucket, local_tree, tmp_path, endpoint):
    root, files = local_tree["root"], local_tree["files"]
    before = _raw(endpoint, "GET", f"/api/buckets/{bucket}", ALICE).json()["updatedAt"]
    api.batch_bucket_files(bucket, add=[(str(root / p), p) for p in files] + [(b"in memory\n", "mem/bytes.txt")])
    info = api.bucket_info(bucket)
    assert info.total_files == len(files) + 1
    assert info.size == sum(len(d) for d in files.values()) + len(b"in memory\n")
    assert _raw(endpoint, "GET", f"/api/buckets/{bucket}", ALICE).json()["updatedAt"] > before

    listed = _files(api, bucket)
    assert set(listed) == set(files) | {"mem/bytes.txt"}
    for p, data in files.items():
        e = listed[p]
        assert e.size == len(data), p
        assert HEX64.match(e.xet_hash), e.xet_hash
        # mtime: the local file's, to the millisecond.
        assert abs(e.mtime.timestamp() - os.path.getmtime(root / p)) < 0.002, p
        assert e.uploaded_at is not None
    # Non-recursive root: files and folders of the first level only.
    top = set(_tree(api, bucket, recursive=False))
    assert top == {("README.md", "file"), ("empty.txt", "file"), ("weights", "directory"), ("data", "directory"),
                   ("mem", "directory")}
    # A recursive listing has files only; a prefix matches raw keys and lists one level below it.
    assert all(t == "file" for (_, t) in _tree(api, bucket))
    assert set(_tree(api, bucket, prefix="data", recursive=False)) == {("data/a", "directory"),
                                                                     ("data/b.json", "file")}
    assert set(_tree(api, bucket, prefix="data/", recursive=False)) == {("data/a", "directory"),
                                                                      ("data/b.json", "file")}
    assert list(api.list_bucket_tree(bucket, prefix="nothing-here", recursive=True)) == []

    infos = {e.path: e for e in api.get_bucket_paths_info(bucket, ["weights/model.bin", "data", "missing.txt"])}
    assert set(infos) == {"weights/model.bin"}
    assert infos["weights/model.bin"].xet_hash == listed["weights/model.bin"].xet_hash

    meta = api.get_bucket_file_metadata(bucket, "weights/model.bin")
    assert meta.size == len(files["weights/model.bin"])
    assert meta.xet_file_data.file_hash == listed["weights/model.bin"].xet_hash
    assert meta.xet_file_data.refresh_route.endswith(f"/api/buckets/{bucket}/xet-read-token")

    out = tmp_path / "out"
    api.download_bucket_files(bucket, [(p, out / p) for p in files] + [(listed["mem/bytes.txt"], out / "mem.txt")])
    for p, data in files.items():
        assert sha256_file(out / p) == sha256_bytes(data), p
    assert (out / "mem.txt").read_bytes() == b"in memory\n"


def test_batch_delete_and_per_op_failures(api, bucket, local_tree, endpoint):
    from huggingface_hub.errors import BucketBatchError

    root, files = local_tree["root"], local_tree["files"]
    api.batch_bucket_files(bucket, add=[(str(root / "README.md"), "keep.md"), (str(root / "data/b.json"), "gone.json")])
    before = _raw(endpoint, "GET", f"/api/buckets/{bucket}", ALICE).json()["updatedAt"]
    api.batch_bucket_files(bucket, delete=["gone.json"])
    assert set(_files(api, bucket)) == {"keep.md"}
    assert _raw(endpoint, "GET", f"/api/buckets/{bucket}", ALICE).json()["updatedAt"] > before

    # A copy of a hash the source does not hold fails alone; the other operations of the batch apply.
    bogus = "ab" * 32
    with pytest.raises(BucketBatchError) as e:
        api.batch_bucket_files(bucket, add=[(b"still added\n", "added.txt")], copy=[("bucket", bucket, bogus, "bad.bin")],
                               delete=["keep.md"])
    assert [f["path"] for f in e.value.failures] == ["bad.bin"]
    assert http_status(e.value) == 200
    assert set(_files(api, bucket)) == {"added.txt"}

    # An addFile whose content the CAS never received fails; every operation failing is a 422.
    body = json.dumps({"type": "addFile", "path": "x.bin", "xetHash": bogus, "mtime": 1}) + "\n"
    r = _raw(endpoint, "POST", f"/api/buckets/{bucket}/batch", ALICE, content=body.encode(),
             headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 422, r.text
    j = r.json()
    assert (j["success"], j["processed"], j["succeeded"]) == (False, 1, 0)
    assert j["failed"][0]["path"] == "x.bin" and "not found" in j["failed"][0]["error"]
    assert set(_files(api, bucket)) == {"added.txt"}

    # More operations than the Hub's clients put in one request: refused whole.
    body = "".join(json.dumps({"type": "deleteFile", "path": f"f{i}"}) + "\n" for i in range(1001))
    r = _raw(endpoint, "POST", f"/api/buckets/{bucket}/batch", ALICE, content=body.encode(),
             headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 400, r.text
    assert "1001" in r.json()["error"]


def test_copy_from_repo_and_bucket(api, bucket, model_repo, xet_active, local_tree, tmp_path):
    # From a repo: server-side by Xet hash when the repo file is in Xet, else download + upload by the client.
    api.copy_files(f"hf://{model_repo.repo_id}/{model_repo.big.path_in_repo}", f"hf://buckets/{bucket}/from-repo/")
    copied = _files(api, bucket)["from-repo/big.bin"]
    assert copied.size == len(model_repo.big.data)
    if xet_active:
        repo_entry = next(iter(api.get_paths_info(model_repo.repo_id, [model_repo.big.path_in_repo])))
        assert copied.xet_hash == repo_entry.xet_hash

    # From another bucket, a whole folder (rsync-style trailing slash: its contents).
    src = f"alice/{unique('src')}"
    api.create_bucket(src)
    try:
        root, files = local_tree["root"], local_tree["files"]
        api.batch_bucket_files(src, add=[(str(root / p), p) for p in files if p.startswith("data/")])
        api.copy_files(f"hf://buckets/{src}/data/", f"hf://buckets/{bucket}/backup/")
        got = _files(api, bucket, "backup/")
        want = {p.replace("data/", "backup/", 1): d for p, d in files.items() if p.startswith("data/")}
        assert set(got) == set(want)
        src_files = _files(api, src)
        for p, data in want.items():
            assert got[p].xet_hash == src_files[p.replace("backup/", "data/", 1)].xet_hash
        out = tmp_path / "copied"
        api.download_bucket_files(bucket, [(p, out / p) for p in want] + [("from-repo/big.bin", out / "big.bin")])
        for p, data in want.items():
            assert (out / p).read_bytes() == data
        assert sha256_file(out / "big.bin") == model_repo.big.sha256
    finally:
        api.delete_bucket(src)


def test_sync_both_ways(api, bucket, local_tree, tmp_path):
    root, files = local_tree["root"], local_tree["files"]
    api.sync_bucket(str(root), f"hf://buckets/{bucket}/mirror", quiet=True)
    assert set(_files(api, bucket)) == {f"mirror/{p}" for p in files}

    (root / "data/a/1.csv").unlink()
    (root / "new.txt").write_bytes(b"new file\n")
    time.sleep(1.2)  # past the client's 1 s mtime window
    (root / "README.md").write_bytes(b"# bucket, edited\n")
    plan = api.sync_bucket(str(root), f"hf://buckets/{bucket}/mirror", delete=True, quiet=True)
    summary = plan.summary()
    assert (summary["uploads"], summary["deletes"]) == (2, 1), summary
    remote = _files(api, bucket)
    assert "mirror/data/a/1.csv" not in remote and "mirror/new.txt" in remote

    dest = tmp_path / "down"
    api.sync_bucket(f"hf://buckets/{bucket}/mirror", str(dest), quiet=True)
    local = {p.relative_to(root).as_posix(): sha256_file(p) for p in root.rglob("*") if p.is_file()}
    down = {p.relative_to(dest).as_posix(): sha256_file(p) for p in dest.rglob("*") if p.is_file()}
    assert down == local


def test_hf_file_system_on_buckets(hf, endpoint, api, bucket, local_tree):
    from huggingface_hub import HfFileSystem

    fs = HfFileSystem(endpoint=endpoint, token=ALICE, skip_instance_cache=True)
    root, files = local_tree["root"], local_tree["files"]
    api.batch_bucket_files(bucket, add=[(str(root / p), p) for p in files])
    base = f"hf://buckets/{bucket}"
    names = {e["name"].rsplit("/", 1)[-1]: e for e in fs.ls(base, detail=True)}
    assert names["weights"]["type"] == "directory"
    assert names["README.md"]["size"] == len(files["README.md"])
    big = files["weights/model.bin"]
    assert fs.info(f"{base}/weights/model.bin")["size"] == len(big)
    assert fs.cat_file(f"{base}/weights/model.bin") == big
    with fs.open(f"{base}/weights/model.bin", "rb", block_size=64 * 1024) as f:
        f.seek(MiB + 5)
        assert f.read(100_000) == big[MiB + 5:MiB + 5 + 100_000]
    assert sorted(fs.glob(f"{base}/data/a/*.csv")) == [f"buckets/{bucket}/data/a/1.csv", f"buckets/{bucket}/data/a/2.csv"]

    fs.pipe_file(f"{base}/written/by-fs.txt", b"written through HfFileSystem\n")
    fs.rm(f"{base}/data/b.json")
    fs.invalidate_cache()
    remote = _files(api, bucket)
    assert "written/by-fs.txt" in remote and "data/b.json" not in remote
    assert fs.cat_file(f"{base}/written/by-fs.txt") == b"written through HfFileSystem\n"


def test_plain_http_resolve(api, bucket, endpoint, local_tree):
    """What a client without Xet does: resolve → 302 to the blob origin, which serves ranges."""
    from huggingface_hub.utils import get_session

    root, files = local_tree["root"], local_tree["files"]
    api.batch_bucket_files(bucket, add=[(str(root / "weights/model.bin"), "w.bin"), (str(root / "empty.txt"), "e")])
    big = files["weights/model.bin"]
    xet_hash = _files(api, bucket)["w.bin"].xet_hash
    for method, status in (("HEAD", 200), ("GET", 302)):
        r = _raw(endpoint, method, f"/buckets/{bucket}/resolve/w.bin", ALICE, follow_redirects=False)
        assert r.status_code == status, method
        assert r.headers["x-xet-hash"] == xet_hash
        assert r.headers["x-linked-size"] == str(len(big))
        assert 'rel="xet-auth"' in r.headers["link"] and 'rel="xet-reconstruction-info"' in r.headers["link"]
    assert r.headers["location"] != f"{endpoint}/buckets/{bucket}/resolve/w.bin"
    location = r.headers["location"]
    r = get_session().get(location, headers={"Range": "bytes=100-1099"})
    assert r.status_code == 206 and r.content == big[100:1100]
    r = _raw(endpoint, "GET", f"/buckets/{bucket}/resolve/w.bin", ALICE, follow_redirects=True)
    assert sha256_bytes(r.content) == sha256_bytes(big)
    r = _raw(endpoint, "GET", f"/buckets/{bucket}/resolve/e", ALICE, follow_redirects=True)
    assert r.status_code == 200 and r.content == b""
    missing = _raw(endpoint, "HEAD", f"/buckets/{bucket}/resolve/nope", ALICE)
    assert (missing.status_code, missing.headers.get("x-error-code")) == (404, "EntryNotFound")


def test_tokens_and_access(hf, endpoint, api, bob_api, local_read_api, local_write_api):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import BucketNotFoundError, HfHubHTTPError

    private = f"local/{unique('priv')}"
    local_write_api.create_bucket(private, private=True)
    try:
        # A read token reads but cannot write, nor get a Xet write token.
        assert local_read_api.bucket_info(private).private is True
        with pytest.raises(HfHubHTTPError) as e:
            local_read_api.batch_bucket_files(private, delete=["x"])
        assert http_status(e.value) == 403
        r = _raw(endpoint, "GET", f"/api/buckets/{private}/xet-write-token", LOCAL_READ)
        assert r.status_code == 403
        r = _raw(endpoint, "GET", f"/api/buckets/{private}/xet-read-token", LOCAL_READ)
        assert r.status_code == 200 and r.json()["casUrl"] and r.headers["x-xet-access-token"] == r.json()["accessToken"]
        # Other users and anonymous callers see nothing.
        with pytest.raises(BucketNotFoundError):
            bob_api.batch_bucket_files(private, delete=["x"])
        r = _raw(endpoint, "GET", f"/api/buckets/{private}/xet-read-token", None)
        assert (r.status_code, r.headers.get("x-error-code")) == (401, "RepoNotFound")
        r = _raw(endpoint, "HEAD", f"/buckets/{private}/resolve/x", BOB)
        assert (r.status_code, r.headers.get("x-error-code")) == (404, "RepoNotFound")
        with pytest.raises(BucketNotFoundError):
            list(HfApi(endpoint=endpoint, token=False).list_bucket_tree(private))
    finally:
        local_write_api.delete_bucket(private)


def test_demo_bucket(anon_api, tmp_path):
    """`--seed-demo` seeds a public bucket with two Xet files."""
    files = _files(anon_api, "demo/scratch-bucket")
    assert set(files) == {"hello.txt", "data/numbers.csv"}
    anon_api.download_bucket_files("demo/scratch-bucket", [("hello.txt", tmp_path / "hello.txt")])
    assert (tmp_path / "hello.txt").read_bytes() == b"Hello from the hubfs demo bucket!\n"
    assert files["data/numbers.csv"].size == len(b"n,square\n" + b"".join(b"%d,%d\n" % (i, i * i) for i in range(100)))
