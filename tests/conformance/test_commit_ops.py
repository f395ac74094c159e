"""create_commit with add/delete/copy, parentCommit (412), a 1,100-file commit, list_repo_tree paging, paths-info."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import (
    HEX40,
    HEX64,
    MiB,
    binary,
    git_blob_sha1,
    http_status,
    sha256_bytes,
    sha256_file,
    tree_map,
    unique,
)


# ---------------------------------------------------------------------------------------------
# add / delete / copy
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ops_repo(hf, api):
    from huggingface_hub import CommitOperationAdd

    repo_id = f"alice/{unique('ops')}"
    api.create_repo(repo_id)
    files = {
        "ops/a.txt": b"file a\n",
        "ops/b.txt": b"file b\n",
        "ops/sub/c.txt": b"file c\n",
        "ops/sub/deeper/d.txt": b"file d\n",
        "ops/big.bin": binary(3 * MiB),  # binary => LFS (Xet in xet mode)
        "keep.txt": b"kept\n",
    }
    c1 = api.create_commit(
        repo_id,
        [CommitOperationAdd(path, data) for path, data in files.items()],
        commit_message="ops: initial",
        commit_description="several files at once",
    )
    return {"repo_id": repo_id, "files": files, "c1": c1.oid}


@pytest.fixture(scope="module")
def ops_second_commit(hf, api, ops_repo):
    from huggingface_hub import CommitOperationAdd, CommitOperationCopy, CommitOperationDelete

    repo_id = ops_repo["repo_id"]
    new_file = b"brand new\n"
    c2 = api.create_commit(
        repo_id,
        [
            CommitOperationCopy("ops/a.txt", "ops/a_copy.txt"),  # regular: client re-sends content
            CommitOperationCopy("ops/big.bin", "copies/big_copy.bin"),  # LFS: lfsFile with sha256, no size
            CommitOperationDelete("ops/b.txt"),  # deletedFile
            CommitOperationDelete("ops/sub/"),  # deletedFolder
            CommitOperationAdd("ops/new.txt", new_file),
        ],
        commit_message="ops: copy, delete, add",
    )
    return {"c2": c2.oid, "new_file": new_file}


def test_create_commit_multiple_adds(api, ops_repo, cache_dir):
    entries = tree_map(api, ops_repo["repo_id"], revision=ops_repo["c1"])
    for path, data in ops_repo["files"].items():
        assert entries[path].size == len(data)
        p = api.hf_hub_download(ops_repo["repo_id"], path, revision=ops_repo["c1"], cache_dir=cache_dir)
        assert sha256_file(p) == sha256_bytes(data), path


def test_commit_description_kept(api, ops_repo):
    commits = {c.commit_id: c for c in api.list_repo_commits(ops_repo["repo_id"])}
    c = commits[ops_repo["c1"]]
    assert c.title == "ops: initial"
    assert "several files at once" in c.message


def test_copy_delete_add(hf, api, ops_repo, ops_second_commit, cache_dir, xet_active):
    from huggingface_hub.hf_api import RepoFile

    repo_id, files = ops_repo["repo_id"], ops_repo["files"]
    entries = tree_map(api, repo_id)
    paths = {p for p, e in entries.items() if isinstance(e, RepoFile)}
    assert "ops/b.txt" not in paths
    assert not any(p.startswith("ops/sub/") for p in entries), "deletedFolder must remove the whole subtree"
    assert {"ops/a.txt", "ops/a_copy.txt", "ops/big.bin", "copies/big_copy.bin", "ops/new.txt", "keep.txt"} <= paths
    # copies have the source's content and identity
    assert entries["ops/a_copy.txt"].blob_id == entries["ops/a.txt"].blob_id == git_blob_sha1(files["ops/a.txt"])
    src, dst = entries["ops/big.bin"], entries["copies/big_copy.bin"]
    assert dst.lfs is not None and dst.lfs.sha256 == src.lfs.sha256 == sha256_bytes(files["ops/big.bin"])
    assert dst.size == src.size == len(files["ops/big.bin"])
    if src.xet_hash is not None:
        assert dst.xet_hash == src.xet_hash, "an LFS copy of a Xet file keeps its xetHash"
    for path, want in [("ops/a_copy.txt", files["ops/a.txt"]), ("copies/big_copy.bin", files["ops/big.bin"]),
                       ("ops/new.txt", ops_second_commit["new_file"])]:
        p = api.hf_hub_download(repo_id, path, cache_dir=cache_dir)
        assert sha256_file(p) == sha256_bytes(want), path


def test_deleted_files_still_at_old_revision(hf, api, ops_repo, ops_second_commit, cache_dir):
    from huggingface_hub.errors import EntryNotFoundError

    repo_id = ops_repo["repo_id"]
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(repo_id, "ops/b.txt", cache_dir=cache_dir)
    p = api.hf_hub_download(repo_id, "ops/sub/deeper/d.txt", revision=ops_repo["c1"], cache_dir=cache_dir)
    assert Path(p).read_bytes() == ops_repo["files"]["ops/sub/deeper/d.txt"]


def test_copy_from_older_revision(hf, api, ops_repo, ops_second_commit, cache_dir):
    from huggingface_hub import CommitOperationCopy

    repo_id = ops_repo["repo_id"]
    api.create_commit(
        repo_id,
        [CommitOperationCopy("ops/b.txt", "restored/b.txt", src_revision=ops_repo["c1"])],
        commit_message="restore b from c1",
    )
    p = api.hf_hub_download(repo_id, "restored/b.txt", cache_dir=cache_dir)
    assert Path(p).read_bytes() == ops_repo["files"]["ops/b.txt"]


def test_delete_missing_file_is_entry_not_found(hf, api, ops_repo, ops_second_commit):
    from huggingface_hub import CommitOperationDelete
    from huggingface_hub.errors import EntryNotFoundError

    head = api.repo_info(ops_repo["repo_id"]).sha
    with pytest.raises(EntryNotFoundError):
        api.create_commit(ops_repo["repo_id"], [CommitOperationDelete("does/not/exist.txt")],
                          commit_message="delete missing")
    assert api.repo_info(ops_repo["repo_id"]).sha == head


def test_commit_to_missing_repo(hf, api):
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import RepositoryNotFoundError

    with pytest.raises(RepositoryNotFoundError):
        api.create_commit(f"alice/{unique('never-created')}", [CommitOperationAdd("x.txt", b"x")],
                          commit_message="nope")


# ---------------------------------------------------------------------------------------------
# parentCommit
# ---------------------------------------------------------------------------------------------


def test_parent_commit_mismatch_is_412(hf, api):
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = f"alice/{unique('parent')}"
    api.create_repo(repo_id)
    first = api.create_commit(repo_id, [CommitOperationAdd("one.txt", b"1\n")], commit_message="one").oid
    second = api.create_commit(repo_id, [CommitOperationAdd("two.txt", b"2\n")], commit_message="two",
                               parent_commit=first).oid
    assert second != first
    with pytest.raises(HfHubHTTPError) as ei:
        api.create_commit(repo_id, [CommitOperationAdd("three.txt", b"3\n")], commit_message="stale",
                          parent_commit=first)
    assert http_status(ei.value) == 412
    assert api.repo_info(repo_id).sha == second
    assert not api.file_exists(repo_id, "three.txt")
    # LFS content with a stale parent: uploaded, but the commit itself is refused.
    with pytest.raises(HfHubHTTPError) as ei:
        api.create_commit(repo_id, [CommitOperationAdd("stale.bin", binary(MiB))], commit_message="stale lfs",
                          parent_commit=first)
    assert http_status(ei.value) == 412
    third = api.create_commit(repo_id, [CommitOperationAdd("three.txt", b"3\n")], commit_message="fresh",
                              parent_commit=second).oid
    assert api.repo_info(repo_id).sha == third


# ---------------------------------------------------------------------------------------------
# 1,100 files in one commit; list_repo_tree paging; paths-info
# ---------------------------------------------------------------------------------------------

N_MANY = 1100


@pytest.fixture(scope="module")
def many_repo(hf, api):
    from huggingface_hub import CommitOperationAdd

    repo_id = f"alice/{unique('many')}"
    api.create_repo(repo_id, repo_type="dataset")
    contents = {f"many/f{i:04d}.txt": f"small file number {i}\n".encode() for i in range(N_MANY)}
    contents["top.txt"] = b"top level\n"
    contents["other/x.txt"] = b"x\n"
    info = api.create_commit(
        repo_id,
        [CommitOperationAdd(p, d) for p, d in contents.items()],
        commit_message=f"{N_MANY} files in one commit",
        repo_type="dataset",
    )
    return {"repo_id": repo_id, "contents": contents, "commit": info.oid}


def test_many_files_recursive_listing(hf, api, many_repo):
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    entries = tree_map(api, many_repo["repo_id"], repo_type="dataset")
    files = {p for p, e in entries.items() if isinstance(e, RepoFile)}
    many = {p for p in files if p.startswith("many/")}
    assert len(many) == N_MANY
    assert set(many_repo["contents"]) <= files
    assert isinstance(entries.get("many"), RepoFolder), "a recursive listing includes directory entries"
    assert isinstance(entries.get("other"), RepoFolder)
    for p in random.Random(7).sample(sorted(many), 20):
        assert entries[p].size == len(many_repo["contents"][p])
        assert entries[p].blob_id == git_blob_sha1(many_repo["contents"][p])


def test_many_files_folder_listing(hf, api, many_repo):
    listed = list(api.list_repo_tree(many_repo["repo_id"], "many", repo_type="dataset"))
    paths = [e.path for e in listed]
    assert len(paths) == len(set(paths)) == N_MANY
    assert all(p.startswith("many/") for p in paths)
    # same result at the explicit commit id
    at_commit = list(api.list_repo_tree(many_repo["repo_id"], "many", repo_type="dataset",
                                        revision=many_repo["commit"]))
    assert len(at_commit) == N_MANY


def test_many_files_listing_is_paginated(hf, api, many_repo):
    """More than 1,000 entries: the server pages (Link: <absolute url>; rel="next")."""
    pages_iter = getattr(api, "_iter_repo_tree_pages", None)
    if pages_iter is None:
        pytest.skip("this huggingface_hub has no _iter_repo_tree_pages")
    pages = [len(page) for page, _ in pages_iter(many_repo["repo_id"], "many", repo_type="dataset")]
    assert sum(pages) == N_MANY
    assert len(pages) >= 2, f"expected several pages for {N_MANY} entries, got {pages}"


def test_many_files_download_sample(api, many_repo, cache_dir):
    for p in ["many/f0000.txt", "many/f0999.txt", f"many/f{N_MANY - 1:04d}.txt", "top.txt", "other/x.txt"]:
        path = api.hf_hub_download(many_repo["repo_id"], p, repo_type="dataset", cache_dir=cache_dir)
        assert Path(path).read_bytes() == many_repo["contents"][p]


def test_get_paths_info(hf, api, ops_repo, ops_second_commit):
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    repo_id, files = ops_repo["repo_id"], ops_repo["files"]
    infos = api.get_paths_info(repo_id, ["keep.txt", "ops/big.bin", "ops", "missing/nothing.txt", "ops/b.txt"])
    by_path = {i.path: i for i in infos}
    assert set(by_path) == {"keep.txt", "ops/big.bin", "ops"}, "missing paths are silently omitted"
    keep = by_path["keep.txt"]
    assert isinstance(keep, RepoFile)
    assert keep.size == len(files["keep.txt"])
    assert keep.blob_id == git_blob_sha1(files["keep.txt"])
    assert keep.lfs is None
    big = by_path["ops/big.bin"]
    assert isinstance(big, RepoFile)
    assert big.lfs is not None and big.lfs.sha256 == sha256_bytes(files["ops/big.bin"])
    assert big.size == len(files["ops/big.bin"])
    if big.xet_hash is not None:
        assert HEX64.match(big.xet_hash)
    folder = by_path["ops"]
    assert isinstance(folder, RepoFolder)
    assert HEX40.match(folder.tree_id)


def test_get_paths_info_at_revision(hf, api, ops_repo, ops_second_commit):
    infos = api.get_paths_info(ops_repo["repo_id"], ["ops/b.txt", "ops/sub"], revision=ops_repo["c1"])
    assert {i.path for i in infos} == {"ops/b.txt", "ops/sub"}


def test_get_paths_info_dataset_many(api, many_repo):
    wanted = [f"many/f{i:04d}.txt" for i in range(0, N_MANY, 100)] + ["many", "nope.txt"]
    infos = api.get_paths_info(many_repo["repo_id"], wanted, repo_type="dataset")
    assert {i.path for i in infos} == set(wanted) - {"nope.txt"}
