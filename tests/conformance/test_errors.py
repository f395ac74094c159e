"""Error shapes as the stock client classifies them (X-Error-Code mapping)."""

from __future__ import annotations

import pytest

from conftest import http_status, unique


def test_missing_file_download(hf, api, text_repo, cache_dir):
    from huggingface_hub.errors import EntryNotFoundError, RemoteEntryNotFoundError

    with pytest.raises(EntryNotFoundError) as ei:
        api.hf_hub_download(text_repo.repo_id, "does-not-exist.txt", cache_dir=cache_dir)
    assert isinstance(ei.value, RemoteEntryNotFoundError)
    assert http_status(ei.value) == 404


def test_missing_file_records_no_exist(hf, api, text_repo, cache_dir):
    """On EntryNotFound the client caches `.no_exist/<X-Repo-Commit>/path`: the 404 must carry X-Repo-Commit."""
    from huggingface_hub.errors import EntryNotFoundError

    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(text_repo.repo_id, "missing/file.bin", cache_dir=cache_dir)
    marks = list(cache_dir.rglob(".no_exist/*/missing/file.bin"))
    assert marks, "no .no_exist marker: the 404 had no X-Repo-Commit header"
    assert marks[0].parent.parent.name == text_repo.commit_notes_v2


def test_bad_revision_download(hf, api, text_repo, cache_dir):
    from huggingface_hub.errors import RevisionNotFoundError

    with pytest.raises(RevisionNotFoundError) as ei:
        api.hf_hub_download(text_repo.repo_id, text_repo.small.path_in_repo, revision="no-such-branch",
                            cache_dir=cache_dir)
    assert http_status(ei.value) == 404


def test_bad_commit_id_download(hf, api, text_repo, cache_dir):
    from huggingface_hub.errors import RevisionNotFoundError

    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(text_repo.repo_id, text_repo.small.path_in_repo, revision="0" * 40,
                            cache_dir=cache_dir)


def test_bad_revision_api(hf, api, text_repo):
    from huggingface_hub.errors import RevisionNotFoundError

    with pytest.raises(RevisionNotFoundError):
        api.model_info(text_repo.repo_id, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(text_repo.repo_id, revision="no-such-branch"))
    with pytest.raises(RevisionNotFoundError):
        api.get_paths_info(text_repo.repo_id, ["hello.txt"], revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_commits(text_repo.repo_id, revision="no-such-branch")
    assert not api.revision_exists(text_repo.repo_id, "no-such-branch")
    assert api.revision_exists(text_repo.repo_id, "main")


def test_bad_revision_snapshot(hf, api, text_repo, cache_dir):
    from huggingface_hub.errors import RevisionNotFoundError

    with pytest.raises(RevisionNotFoundError):
        api.snapshot_download(text_repo.repo_id, revision="no-such-branch", cache_dir=cache_dir)


def test_missing_folder_in_tree(hf, api, text_repo):
    from huggingface_hub.errors import EntryNotFoundError

    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(text_repo.repo_id, "no/such/folder"))


def test_missing_repo(hf, api, anon_api, cache_dir):
    from huggingface_hub.errors import RepositoryNotFoundError

    repo_id = f"alice/{unique('missing')}"
    with pytest.raises(RepositoryNotFoundError) as ei:
        api.model_info(repo_id)
    assert http_status(ei.value) == 404
    with pytest.raises(RepositoryNotFoundError) as ei:
        anon_api.model_info(repo_id)
    assert http_status(ei.value) in (401, 404)
    with pytest.raises(RepositoryNotFoundError):
        api.hf_hub_download(repo_id, "config.json", cache_dir=cache_dir)
    with pytest.raises(RepositoryNotFoundError):
        list(api.list_repo_tree(repo_id))
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_refs(repo_id)
    assert not api.repo_exists(repo_id)
    assert not api.file_exists(repo_id, "config.json")


def test_missing_repo_namespace(hf, api):
    from huggingface_hub.errors import RepositoryNotFoundError

    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info(f"nobody-{unique('ns')}/nothing")


def test_revision_exists_for_commit_ids(api, text_repo):
    assert api.revision_exists(text_repo.repo_id, text_repo.commit_small)
    assert not api.revision_exists(text_repo.repo_id, "f" * 40)
