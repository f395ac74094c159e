"""create_repo, upload_file, upload_folder, hf_hub_download, snapshot_download, tree and file metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import (
    HEX40,
    HEX64,
    IS_XET,
    MODE,
    git_blob_sha1,
    http_status,
    lfs_pointer,
    sha256_file,
    tree_map,
    unique,
)


# ---------------------------------------------------------------------------------------------
# create_repo / repo_info
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_create_repo(hf, api, repo_type, private):
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = f"alice/{unique('create')}"
    url = api.create_repo(repo_id, repo_type=repo_type, private=private)
    assert url.repo_id == repo_id
    assert url.repo_type == repo_type
    info = api.repo_info(repo_id, repo_type=repo_type)
    assert info.id == repo_id
    assert info.private is private
    assert info.sha is not None and HEX40.match(info.sha), info.sha
    assert api.repo_exists(repo_id, repo_type=repo_type)
    # A second create: 409 without exist_ok, silently OK with exist_ok=True (the client then reads `url`).
    with pytest.raises(HfHubHTTPError) as ei:
        api.create_repo(repo_id, repo_type=repo_type, private=private)
    assert http_status(ei.value) == 409
    again = api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    assert again.repo_id == repo_id


def test_model_and_dataset_namespaces_are_separate(hf, api):
    from huggingface_hub.errors import RepositoryNotFoundError

    repo_id = f"alice/{unique('only-model')}"
    api.create_repo(repo_id)
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info(repo_id)
    assert not api.repo_exists(repo_id, repo_type="dataset")


def test_repo_info_fields(api, text_repo):
    info = api.model_info(text_repo.repo_id)
    assert info.id == text_repo.repo_id
    assert info.sha == text_repo.commit_notes_v2
    assert info.last_modified is not None
    names = {s.rfilename for s in (info.siblings or [])}
    assert {text_repo.small.path_in_repo, "notes.txt"} <= names


def test_repo_info_files_metadata(api, model_repo):
    """files_metadata=True (?blobs=true): siblings carry size and lfs {sha256,size,pointerSize}."""
    info = api.model_info(model_repo.repo_id, files_metadata=True)
    sib = {s.rfilename: s for s in info.siblings}
    big = sib[model_repo.big.path_in_repo]
    assert big.size == len(model_repo.big.data)
    assert big.lfs is not None
    assert big.lfs.sha256 == model_repo.big.sha256
    assert big.lfs.size == len(model_repo.big.data)
    small = sib[model_repo.small.path_in_repo]
    assert small.size == len(model_repo.small.data)
    assert small.lfs is None


def test_repo_info_at_revision(api, text_repo):
    info = api.model_info(text_repo.repo_id, revision=text_repo.commit_notes_v1)
    assert info.sha == text_repo.commit_notes_v1


# ---------------------------------------------------------------------------------------------
# upload_file: small text (regular) and 20 MiB random (LFS / Xet)
# ---------------------------------------------------------------------------------------------


def test_commit_ids_are_hex40(text_repo):
    ids = (text_repo.commit_small, text_repo.commit_notes_v1, text_repo.commit_notes_v2)
    for c in ids:
        assert HEX40.match(c), c
    assert len(set(ids)) == 3


def test_small_file_tree_entry(hf, api, text_repo):
    from huggingface_hub.hf_api import RepoFile

    entries = tree_map(api, text_repo.repo_id)
    e = entries[text_repo.small.path_in_repo]
    assert isinstance(e, RepoFile)
    assert e.size == len(text_repo.small.data)
    assert e.lfs is None
    assert e.xet_hash is None
    assert e.blob_id == git_blob_sha1(text_repo.small.data)


def test_big_file_tree_entry(hf, api, model_repo, xet_active):
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    entries = tree_map(api, model_repo.repo_id)
    assert isinstance(entries["weights"], RepoFolder)
    assert HEX40.match(entries["weights"].tree_id)
    e = entries[model_repo.big.path_in_repo]
    assert isinstance(e, RepoFile)
    size = len(model_repo.big.data)
    assert e.size == size
    assert e.lfs is not None, "a 20 MiB file must be stored as LFS"
    assert e.lfs.sha256 == model_repo.big.sha256
    assert e.lfs.size == size
    pointer = lfs_pointer(model_repo.big.sha256, size)
    assert e.lfs.pointer_size == len(pointer)
    assert e.blob_id == git_blob_sha1(pointer)
    if xet_active:
        assert e.xet_hash is not None, "uploaded through Xet: the tree entry must carry xetHash"
        assert HEX64.match(e.xet_hash), e.xet_hash
    # noxet: uploaded through the LFS batch API; a server may or may not convert it to Xet.
    elif e.xet_hash is not None:
        assert HEX64.match(e.xet_hash), e.xet_hash


def test_download_small(api, text_repo, cache_dir):
    path = api.hf_hub_download(text_repo.repo_id, text_repo.small.path_in_repo, cache_dir=cache_dir)
    assert sha256_file(path) == text_repo.small.sha256


def test_download_big(api, model_repo, cache_dir):
    path = api.hf_hub_download(model_repo.repo_id, model_repo.big.path_in_repo, cache_dir=cache_dir)
    assert Path(path).stat().st_size == len(model_repo.big.data)
    assert sha256_file(path) == model_repo.big.sha256


def test_download_to_local_dir(api, model_repo, tmp_path):
    path = api.hf_hub_download(model_repo.repo_id, model_repo.big.path_in_repo, local_dir=tmp_path / "ld")
    assert Path(path).resolve() == (tmp_path / "ld" / model_repo.big.path_in_repo).resolve()
    assert sha256_file(path) == model_repo.big.sha256


def test_file_metadata_regular(api, endpoint, text_repo):
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(text_repo.repo_id, text_repo.small.path_in_repo, endpoint=endpoint)
    meta = api.get_hf_file_metadata(url=url)
    assert meta.commit_hash == text_repo.commit_notes_v2
    assert meta.etag == git_blob_sha1(text_repo.small.data)
    assert meta.size == len(text_repo.small.data)
    assert meta.xet_file_data is None


def test_file_metadata_big(api, endpoint, model_repo, xet_active):
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(model_repo.repo_id, model_repo.big.path_in_repo, endpoint=endpoint)
    meta = api.get_hf_file_metadata(url=url)
    assert meta.commit_hash == model_repo.commit_big
    assert meta.etag == model_repo.big.sha256, "LFS files: (X-Linked-)ETag is the sha256"
    assert meta.size == len(model_repo.big.data)
    entry = api.get_paths_info(model_repo.repo_id, [model_repo.big.path_in_repo])[0]
    if entry.xet_hash is not None:
        assert meta.xet_file_data is not None, "Xet-stored file: resolve must send X-Xet-Hash and the xet-auth link"
        assert meta.xet_file_data.file_hash == entry.xet_hash
        assert meta.xet_file_data.refresh_route.startswith(endpoint + "/api/models/" + model_repo.repo_id
                                                           + "/xet-read-token/")


def test_file_exists(api, text_repo, model_repo):
    assert api.file_exists(text_repo.repo_id, text_repo.small.path_in_repo)
    assert api.file_exists(model_repo.repo_id, model_repo.big.path_in_repo)
    assert not api.file_exists(text_repo.repo_id, "no/such/file.txt")


def test_overwrite_and_history(api, text_repo, cache_dir):
    """notes.txt was written twice: main has v2, the first commit still serves v1."""
    p = api.hf_hub_download(text_repo.repo_id, "notes.txt", cache_dir=cache_dir)
    assert Path(p).read_bytes() == text_repo.notes_v2.data
    p = api.hf_hub_download(text_repo.repo_id, "notes.txt", revision=text_repo.commit_notes_v1,
                            cache_dir=cache_dir)
    assert Path(p).read_bytes() == text_repo.notes_v1.data


def test_download_by_full_commit_id(hf, api, model_repo, cache_dir):
    from huggingface_hub.errors import EntryNotFoundError

    p = api.hf_hub_download(model_repo.repo_id, model_repo.big.path_in_repo, revision=model_repo.commit_big,
                            cache_dir=cache_dir)
    assert sha256_file(p) == model_repo.big.sha256
    assert f"snapshots/{model_repo.commit_big}/" in Path(p).as_posix()
    # Before the big file was added it did not exist.
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(model_repo.repo_id, model_repo.big.path_in_repo, revision=model_repo.commit_small,
                            cache_dir=cache_dir)


def test_tree_at_old_commit(api, text_repo):
    entries = tree_map(api, text_repo.repo_id, revision=text_repo.commit_small)
    assert text_repo.small.path_in_repo in entries
    assert "notes.txt" not in entries
    entries = tree_map(api, text_repo.repo_id, revision=text_repo.commit_notes_v1)
    assert entries["notes.txt"].size == len(text_repo.notes_v1.data)


def test_list_repo_commits(api, text_repo):
    commits = api.list_repo_commits(text_repo.repo_id)
    ids = [c.commit_id for c in commits]
    assert ids[0] == text_repo.commit_notes_v2, "newest first"
    order = [text_repo.commit_notes_v2, text_repo.commit_notes_v1, text_repo.commit_small]
    assert [i for i in ids if i in order] == order
    by_id = {c.commit_id: c for c in commits}
    assert by_id[text_repo.commit_notes_v1].title == "notes v1"
    assert by_id[text_repo.commit_small].title == "add hello"
    for c in commits:
        assert HEX40.match(c.commit_id)
        assert c.created_at is not None
        assert isinstance(c.authors, list)
    # At an older revision the history stops there.
    old = [c.commit_id for c in api.list_repo_commits(text_repo.repo_id, revision=text_repo.commit_notes_v1)]
    assert old[0] == text_repo.commit_notes_v1
    assert text_repo.commit_notes_v2 not in old
    assert text_repo.commit_small in old


def test_upload_file_with_parent_commit(api):
    """parent_commit equal to the head is accepted (the mismatch case is in test_commit_ops)."""
    repo_id = f"alice/{unique('parent-ok')}"
    api.create_repo(repo_id)
    head = api.repo_info(repo_id).sha
    info = api.upload_file(path_or_fileobj=b"child\n", path_in_repo="child.txt", repo_id=repo_id,
                           parent_commit=head, commit_message="with parent")
    assert api.repo_info(repo_id).sha == info.oid
    assert info.oid != head
    assert info.commit_url.endswith(info.oid)

# ---------------------------------------------------------------------------------------------
# upload_folder / snapshot_download (dataset)
# ---------------------------------------------------------------------------------------------


def test_upload_folder_tree(hf, api, dataset_repo):
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    entries = tree_map(api, dataset_repo.repo_id, repo_type="dataset")
    for rel, lf in dataset_repo.files.items():
        assert rel in entries, f"{rel} missing from tree: {sorted(entries)}"
        e = entries[rel]
        assert isinstance(e, RepoFile)
        assert e.size == len(lf.data)
        if e.lfs is not None:
            assert e.lfs.sha256 == lf.sha256
            assert e.lfs.size == len(lf.data)
        else:
            assert e.blob_id == git_blob_sha1(lf.data)
    for folder in ("data", "data/nested", "data/nested/deeper", "blobs", "dir with space"):
        assert isinstance(entries.get(folder), RepoFolder), f"folder entry {folder!r} missing"
    assert entries["blobs/random.bin"].lfs is not None, "binary content must be stored as LFS"
    assert entries["blobs/empty.txt"].lfs is None


def test_upload_folder_non_recursive_listing(hf, api, dataset_repo):
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    top = {e.path: e for e in api.list_repo_tree(dataset_repo.repo_id, repo_type="dataset")}
    assert isinstance(top["README.md"], RepoFile)
    assert isinstance(top["data"], RepoFolder)
    assert "data/train.csv" not in top
    sub = {e.path: e for e in api.list_repo_tree(dataset_repo.repo_id, "data", repo_type="dataset")}
    assert set(sub) == {"data/train.csv", "data/test.jsonl", "data/nested"}
    deep = {e.path for e in api.list_repo_tree(dataset_repo.repo_id, "data/nested/deeper", repo_type="dataset")}
    assert deep == {"data/nested/deeper/leaf.txt"}
    spaced = {e.path for e in api.list_repo_tree(dataset_repo.repo_id, "dir with space", repo_type="dataset")}
    assert spaced == {"dir with space/file name.txt"}


@pytest.mark.parametrize("rel", ["data/train.csv", "blobs/random.bin", "blobs/empty.txt",
                                 "dir with space/file name.txt", "data/nested/deeper/leaf.txt"])
def test_dataset_file_download(api, dataset_repo, cache_dir, rel):
    p = api.hf_hub_download(dataset_repo.repo_id, rel, repo_type="dataset", cache_dir=cache_dir)
    assert sha256_file(p) == dataset_repo.files[rel].sha256


def test_snapshot_download(api, dataset_repo, cache_dir):
    snap = Path(api.snapshot_download(dataset_repo.repo_id, repo_type="dataset", cache_dir=cache_dir))
    assert snap.name == dataset_repo.commit
    got = {p.relative_to(snap).as_posix(): sha256_file(p) for p in snap.rglob("*") if p.is_file()}
    want = {rel: lf.sha256 for rel, lf in dataset_repo.files.items()}
    extra = set(got) - set(want)
    assert extra <= {".gitattributes"}, f"unexpected files {extra}"
    for rel, sha in want.items():
        assert got.get(rel) == sha, f"{rel}: sha256 mismatch or missing"


def test_snapshot_download_patterns_and_local_dir(api, dataset_repo, tmp_path):
    out = Path(api.snapshot_download(dataset_repo.repo_id, repo_type="dataset", local_dir=tmp_path / "snap",
                                     allow_patterns=["data/*", "blobs/random.bin"]))
    got = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and ".cache" not in p.parts}
    assert got == {"data/train.csv", "data/test.jsonl", "data/nested/deeper/leaf.txt", "blobs/random.bin"}
    assert sha256_file(out / "blobs/random.bin") == dataset_repo.files["blobs/random.bin"].sha256


def test_snapshot_download_by_commit(api, text_repo, model_repo, cache_dir):
    snap = Path(api.snapshot_download(text_repo.repo_id, revision=text_repo.commit_notes_v1, cache_dir=cache_dir))
    assert snap.name == text_repo.commit_notes_v1
    assert (snap / "notes.txt").read_bytes() == text_repo.notes_v1.data
    assert sha256_file(snap / text_repo.small.path_in_repo) == text_repo.small.sha256
    snap = Path(api.snapshot_download(model_repo.repo_id, revision=model_repo.commit_big, cache_dir=cache_dir))
    assert snap.name == model_repo.commit_big
    assert sha256_file(snap / model_repo.big.path_in_repo) == model_repo.big.sha256
    assert sha256_file(snap / model_repo.small.path_in_repo) == model_repo.small.sha256


def test_mode_marker(hub_mode):
    """Makes the client mode explicit in the report: conformance ran with hf_xet on or off."""
    assert hub_mode == MODE
    assert IS_XET == (MODE == "xet")


def test_reupload_same_content_is_noop(api):
    """The client skips unchanged files when preupload returns the remote oid (git sha1 for regular files,
    sha256 for LFS files): no new commit appears."""
    repo_id = f"alice/{unique('noop')}"
    api.create_repo(repo_id)
    data = b"unchanged content\n"
    first = api.upload_file(path_or_fileobj=data, path_in_repo="same.txt", repo_id=repo_id, commit_message="first")
    api.upload_file(path_or_fileobj=data, path_in_repo="same.txt", repo_id=repo_id, commit_message="same content")
    assert api.repo_info(repo_id).sha == first.oid
