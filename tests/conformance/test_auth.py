"""whoami, tokens, private repos, read-only tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ALICE, BOB, LOCAL_READ, LOCAL_WRITE, binary, http_status, unique


@pytest.mark.parametrize(
    "token,name,role",
    [(ALICE, "alice", "write"), (BOB, "bob", "write"), (LOCAL_WRITE, "local", "write"), (LOCAL_READ, "local", "read")],
    ids=["alice", "bob", "local-write", "local-read"],
)
def test_whoami(api, token, name, role):
    me = api.whoami(token=token)
    assert me["name"] == name
    # Optional on the wire, but when present it must tell the truth (huggingface_hub's login logs it).
    role_seen = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role_seen is not None:
        assert role_seen == role


def test_whoami_shape(api):
    """Fields other stock callers read: list_liked_repos() reads `type`, `hf auth whoami` reads `orgs`."""
    me = api.whoami(token=ALICE)
    assert me.get("type") == "user"
    assert isinstance(me.get("orgs"), list)


def test_whoami_invalid_token(hf, api):
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as ei:
        api.whoami(token="hf_this_token_does_not_exist")
    assert http_status(ei.value) == 401


def test_hf_cli_whoami(hf, endpoint):
    """The `hf` CLI shipped with huggingface_hub, token from HF_TOKEN."""
    hf_cli = Path(sys.executable).parent / "hf"
    if not hf_cli.exists():
        pytest.skip("hf CLI not installed next to this python")
    env = dict(os.environ, HF_TOKEN=ALICE, HF_ENDPOINT=endpoint)
    res = subprocess.run([str(hf_cli), "auth", "whoami"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "alice" in res.stdout


def test_invalid_token_on_public_repo_is_401_not_repo_not_found(hf, endpoint, text_repo):
    """A bad token is an auth error (401, no X-Error-Code), not a missing repo."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    bad = HfApi(endpoint=endpoint, token="hf_invalid_token_xyz")
    with pytest.raises(HfHubHTTPError) as ei:
        bad.model_info(text_repo.repo_id)
    assert http_status(ei.value) == 401
    assert not isinstance(ei.value, RepositoryNotFoundError)


# ---------------------------------------------------------------------------------------------
# Private repos
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def private_repos(api):
    model = f"alice/{unique('private-model')}"
    dataset = f"alice/{unique('private-dataset')}"
    api.create_repo(model, private=True)
    api.create_repo(dataset, repo_type="dataset", private=True)
    secret = b"top secret weights\n"
    api.upload_file(path_or_fileobj=secret, path_in_repo="secret.txt", repo_id=model, commit_message="secret")
    api.upload_file(path_or_fileobj=secret, path_in_repo="secret.txt", repo_id=dataset, repo_type="dataset",
                    commit_message="secret")
    return {"model": model, "dataset": dataset, "secret": secret}


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
def test_private_repo_visible_to_owner(api, private_repos, repo_type, cache_dir):
    repo_id = private_repos[repo_type]
    info = api.repo_info(repo_id, repo_type=repo_type)
    assert info.id == repo_id
    assert info.private is True
    path = api.hf_hub_download(repo_id, "secret.txt", repo_type=repo_type, cache_dir=cache_dir)
    assert Path(path).read_bytes() == private_repos["secret"]


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
def test_private_repo_anonymous_refused(hf, anon_api, private_repos, repo_type, cache_dir):
    from huggingface_hub.errors import RepositoryNotFoundError

    repo_id = private_repos[repo_type]
    with pytest.raises(RepositoryNotFoundError) as ei:
        anon_api.repo_info(repo_id, repo_type=repo_type)
    assert http_status(ei.value) == 401
    with pytest.raises(RepositoryNotFoundError) as ei:
        list(anon_api.list_repo_tree(repo_id, repo_type=repo_type))
    assert http_status(ei.value) == 401
    with pytest.raises(RepositoryNotFoundError):
        anon_api.hf_hub_download(repo_id, "secret.txt", repo_type=repo_type, cache_dir=cache_dir)
    assert not anon_api.repo_exists(repo_id, repo_type=repo_type)


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
def test_private_repo_other_user_refused(hf, bob_api, private_repos, repo_type, cache_dir):
    from huggingface_hub.errors import RepositoryNotFoundError

    repo_id = private_repos[repo_type]
    with pytest.raises(RepositoryNotFoundError) as ei:
        bob_api.repo_info(repo_id, repo_type=repo_type)
    assert http_status(ei.value) == 404
    with pytest.raises(RepositoryNotFoundError) as ei:
        bob_api.hf_hub_download(repo_id, "secret.txt", repo_type=repo_type, cache_dir=cache_dir)
    assert http_status(ei.value) == 404
    with pytest.raises(RepositoryNotFoundError):
        bob_api.get_paths_info(repo_id, ["secret.txt"], repo_type=repo_type)


def test_private_repo_snapshot_refused(hf, bob_api, private_repos, cache_dir):
    from huggingface_hub.errors import RepositoryNotFoundError

    with pytest.raises(RepositoryNotFoundError):
        bob_api.snapshot_download(private_repos["model"], cache_dir=cache_dir)


def test_private_repo_write_by_other_user_refused(hf, api, bob_api, private_repos):
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = private_repos["model"]
    before = api.repo_info(repo_id).sha
    with pytest.raises(HfHubHTTPError) as ei:
        bob_api.upload_file(path_or_fileobj=b"x", path_in_repo="bob.txt", repo_id=repo_id, commit_message="bob")
    assert http_status(ei.value) in (401, 403, 404)
    assert api.repo_info(repo_id).sha == before


# ---------------------------------------------------------------------------------------------
# Namespaces and read tokens
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_repo(local_write_api):
    repo_id = f"local/{unique('rw')}"
    local_write_api.create_repo(repo_id)
    local_write_api.upload_file(path_or_fileobj=b"owned by local\n", path_in_repo="a.txt", repo_id=repo_id,
                                commit_message="init")
    return repo_id


def test_read_token_can_read(local_read_api, local_repo, cache_dir):
    path = local_read_api.hf_hub_download(local_repo, "a.txt", cache_dir=cache_dir)
    assert Path(path).read_bytes() == b"owned by local\n"


def test_read_token_cannot_commit(hf, local_write_api, local_read_api, local_repo):
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    before = local_write_api.repo_info(local_repo).sha
    with pytest.raises(HfHubHTTPError) as ei:
        local_read_api.upload_file(path_or_fileobj=b"nope\n", path_in_repo="b.txt", repo_id=local_repo,
                                   commit_message="must fail")
    assert http_status(ei.value) in (401, 403)
    # A binary file goes through preupload, then Xet (xet-write-token) or the LFS batch API, then the commit:
    # whichever step refuses the read token, nothing may land. An HTTP refusal must be 401/403.
    with pytest.raises(Exception) as ei:
        local_read_api.create_commit(local_repo, [CommitOperationAdd("c.bin", binary(2 * 1024 * 1024))],
                                     commit_message="must fail too")
    if isinstance(ei.value, HfHubHTTPError):
        assert http_status(ei.value) in (401, 403)
    assert local_write_api.repo_info(local_repo).sha == before
    assert not local_write_api.file_exists(local_repo, "b.txt")


def test_read_token_cannot_create_repo_branch_or_tag(hf, local_read_api, local_repo):
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as ei:
        local_read_api.create_repo(f"local/{unique('readonly')}")
    assert http_status(ei.value) in (401, 403)
    with pytest.raises(HfHubHTTPError) as ei:
        local_read_api.create_branch(local_repo, branch="ro-branch")
    assert http_status(ei.value) in (401, 403)
    with pytest.raises(HfHubHTTPError) as ei:
        local_read_api.create_tag(local_repo, tag="ro-tag")
    assert http_status(ei.value) in (401, 403)


def test_write_to_other_namespace_refused(hf, api, local_write_api, local_repo):
    """alice has a write token but no rights on namespace `local`."""
    from huggingface_hub.errors import HfHubHTTPError

    before = local_write_api.repo_info(local_repo).sha
    with pytest.raises(HfHubHTTPError) as ei:
        api.upload_file(path_or_fileobj=b"alice was here\n", path_in_repo="alice.txt", repo_id=local_repo,
                        commit_message="must fail")
    assert http_status(ei.value) in (401, 403, 404)
    with pytest.raises(HfHubHTTPError) as ei:
        api.create_repo(f"bob/{unique('not-alice')}")
    assert http_status(ei.value) in (401, 403, 404)
    assert local_write_api.repo_info(local_repo).sha == before


def test_other_user_reads_public_repo(bob_api, text_repo, cache_dir):
    path = bob_api.hf_hub_download(text_repo.repo_id, text_repo.small.path_in_repo, cache_dir=cache_dir)
    assert Path(path).read_bytes() == text_repo.small.data


def test_anonymous_reads_public_repo(anon_api, text_repo, cache_dir):
    info = anon_api.model_info(text_repo.repo_id)
    assert info.id == text_repo.repo_id
    assert info.private is False
    path = anon_api.hf_hub_download(text_repo.repo_id, text_repo.small.path_in_repo, cache_dir=cache_dir)
    assert Path(path).read_bytes() == text_repo.small.data
