"""Branches, tags, pull requests (refs/pr/N), list_repo_refs."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import HEX40, MiB, binary, http_status, sha256_bytes, sha256_file, unique


@pytest.fixture(scope="module")
def refs_repo(hf, api):
    from huggingface_hub import CommitOperationAdd

    repo_id = f"alice/{unique('refs')}"
    api.create_repo(repo_id)
    base = api.create_commit(repo_id, [CommitOperationAdd("base.txt", b"on main\n")], commit_message="base").oid
    return {"repo_id": repo_id, "base": base}


def _refs(api, repo_id, **kw):
    return api.list_repo_refs(repo_id, **kw)


def test_list_repo_refs_main(api, refs_repo):
    refs = _refs(api, refs_repo["repo_id"])
    main = {b.name: b for b in refs.branches}["main"]
    assert main.ref == "refs/heads/main"
    assert main.target_commit == api.repo_info(refs_repo["repo_id"]).sha
    assert isinstance(refs.tags, list)
    assert isinstance(refs.converts, list)
    assert refs.pull_requests is None


def test_branch_create_upload_download(hf, api, refs_repo, cache_dir):
    from huggingface_hub.errors import EntryNotFoundError

    repo_id = refs_repo["repo_id"]
    api.create_branch(repo_id, branch="dev")
    refs = _refs(api, repo_id)
    dev = {b.name: b for b in refs.branches}["dev"]
    assert dev.ref == "refs/heads/dev"
    assert dev.target_commit == refs_repo["base"]

    payload = binary(MiB + 123)  # binary => LFS / Xet on a branch
    info = api.upload_file(path_or_fileobj=payload, path_in_repo="dev-only.bin", repo_id=repo_id, revision="dev",
                           commit_message="on dev")
    text = api.upload_file(path_or_fileobj=b"dev text\n", path_in_repo="dev.txt", repo_id=repo_id, revision="dev",
                           commit_message="dev text")
    assert HEX40.match(info.oid)
    dev = {b.name: b for b in _refs(api, repo_id).branches}["dev"]
    assert dev.target_commit == text.oid
    assert api.repo_info(repo_id, revision="dev").sha == text.oid
    assert api.repo_info(repo_id).sha == refs_repo["base"], "main did not move"

    p = api.hf_hub_download(repo_id, "dev-only.bin", revision="dev", cache_dir=cache_dir)
    assert sha256_file(p) == sha256_bytes(payload)
    p = api.hf_hub_download(repo_id, "dev.txt", revision="dev", cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"dev text\n"
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(repo_id, "dev-only.bin", cache_dir=cache_dir)
    files = {e.path for e in api.list_repo_tree(repo_id, revision="dev")}
    assert {"base.txt", "dev-only.bin", "dev.txt"} <= files


def test_branch_exists_conflict(hf, api, refs_repo):
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = refs_repo["repo_id"]
    api.create_branch(repo_id, branch="dup", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as ei:
        api.create_branch(repo_id, branch="dup")
    assert http_status(ei.value) == 409
    api.create_branch(repo_id, branch="dup", exist_ok=True)


def test_branch_from_starting_point_and_slash_name(hf, api, refs_repo, cache_dir):
    """startingPoint = an older commit; a branch name with '/' travels as one %2F-encoded segment."""
    from huggingface_hub import CommitOperationAdd

    repo_id = refs_repo["repo_id"]
    newer = api.create_commit(repo_id, [CommitOperationAdd("later.txt", b"later\n")], commit_message="later").oid
    api.create_branch(repo_id, branch="feature/old-base", revision=refs_repo["base"])
    br = {b.name: b for b in _refs(api, repo_id).branches}["feature/old-base"]
    assert br.ref == "refs/heads/feature/old-base"
    assert br.target_commit == refs_repo["base"]
    assert br.target_commit != newer
    api.upload_file(path_or_fileobj=b"feature\n", path_in_repo="feature.txt", repo_id=repo_id,
                    revision="feature/old-base", commit_message="feature work")
    p = api.hf_hub_download(repo_id, "feature.txt", revision="feature/old-base", cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"feature\n"
    names = {e.path for e in api.list_repo_tree(repo_id, revision="feature/old-base")}
    assert "later.txt" not in names and "feature.txt" in names


def test_delete_branch(hf, api, refs_repo):
    from huggingface_hub.errors import RevisionNotFoundError

    repo_id = refs_repo["repo_id"]
    api.create_branch(repo_id, branch="short-lived")
    api.delete_branch(repo_id, branch="short-lived")
    assert "short-lived" not in {b.name for b in _refs(api, repo_id).branches}
    with pytest.raises(RevisionNotFoundError):
        api.repo_info(repo_id, revision="short-lived")


def test_tag(hf, api, refs_repo, cache_dir):
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = refs_repo["repo_id"]
    tagged = api.create_commit(repo_id, [CommitOperationAdd("versioned.txt", b"v1 content\n")],
                               commit_message="v1").oid
    api.create_tag(repo_id, tag="v1.0", tag_message="first release")
    api.create_tag(repo_id, tag="at-base", revision=refs_repo["base"])
    api.create_commit(repo_id, [CommitOperationAdd("versioned.txt", b"v2 content\n")], commit_message="v2")

    tags = {t.name: t for t in _refs(api, repo_id).tags}
    assert tags["v1.0"].ref == "refs/tags/v1.0"
    assert tags["v1.0"].target_commit == tagged
    assert tags["at-base"].target_commit == refs_repo["base"]

    p = api.hf_hub_download(repo_id, "versioned.txt", revision="v1.0", cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"v1 content\n"
    p = api.hf_hub_download(repo_id, "versioned.txt", cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"v2 content\n"
    assert api.repo_info(repo_id, revision="v1.0").sha == tagged

    with pytest.raises(HfHubHTTPError) as ei:
        api.create_tag(repo_id, tag="v1.0")
    assert http_status(ei.value) == 409
    api.create_tag(repo_id, tag="v1.0", exist_ok=True)

    api.delete_tag(repo_id, tag="at-base")
    assert "at-base" not in {t.name for t in _refs(api, repo_id).tags}


@pytest.fixture(scope="module")
def pr(hf, api, refs_repo):
    from huggingface_hub import CommitOperationAdd

    repo_id = refs_repo["repo_id"]
    main_before = api.repo_info(repo_id).sha
    payload = binary(2 * MiB)  # LFS/Xet inside a PR: xet-write-token/None?create_pr=1 or batch without ref
    info = api.create_commit(
        repo_id,
        [CommitOperationAdd("pr-file.txt", b"proposed change\n"), CommitOperationAdd("pr-blob.bin", payload)],
        commit_message="a pull request",
        create_pr=True,
    )
    return {"info": info, "payload": payload, "main_before": main_before}


def test_pr_commit_info(api, refs_repo, pr):
    info = pr["info"]
    assert info.pr_url is not None and "/discussions/" in info.pr_url
    assert info.pr_num is not None and info.pr_num >= 1
    assert info.pr_revision == f"refs/pr/{info.pr_num}"
    assert HEX40.match(info.oid)
    assert api.repo_info(refs_repo["repo_id"]).sha == pr["main_before"], "a PR must not move main"


def test_pr_download(hf, api, refs_repo, pr, cache_dir):
    from huggingface_hub.errors import EntryNotFoundError

    repo_id, info = refs_repo["repo_id"], pr["info"]
    p = api.hf_hub_download(repo_id, "pr-file.txt", revision=info.pr_revision, cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"proposed change\n"
    p = api.hf_hub_download(repo_id, "pr-blob.bin", revision=info.pr_revision, cache_dir=cache_dir)
    assert sha256_file(p) == sha256_bytes(pr["payload"])
    assert api.repo_info(repo_id, revision=info.pr_revision).sha == info.oid
    names = {e.path for e in api.list_repo_tree(repo_id, revision=info.pr_revision)}
    assert {"pr-file.txt", "pr-blob.bin", "base.txt"} <= names
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(repo_id, "pr-file.txt", cache_dir=cache_dir)


def test_pr_in_refs(api, refs_repo, pr):
    info = pr["info"]
    without = _refs(api, refs_repo["repo_id"])
    assert without.pull_requests is None
    refs = _refs(api, refs_repo["repo_id"], include_pull_requests=True)
    assert refs.pull_requests is not None
    prs = {p.ref: p for p in refs.pull_requests}
    assert info.pr_revision in prs, f"{info.pr_revision} not in {sorted(prs)}"
    assert prs[info.pr_revision].target_commit == info.oid
    assert info.pr_revision not in {b.ref for b in refs.branches}


def test_commit_on_existing_pr(api, refs_repo, pr, cache_dir):
    """Pushing more commits to refs/pr/N (revision=pr_revision) updates the PR head."""
    repo_id, info = refs_repo["repo_id"], pr["info"]
    more = api.upload_file(path_or_fileobj=b"second PR commit\n", path_in_repo="pr-2.txt", repo_id=repo_id,
                           revision=info.pr_revision, commit_message="more on the PR")
    prs = {p.ref: p for p in _refs(api, repo_id, include_pull_requests=True).pull_requests}
    assert prs[info.pr_revision].target_commit == more.oid
    p = api.hf_hub_download(repo_id, "pr-2.txt", revision=info.pr_revision, cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"second PR commit\n"


def test_second_pr_gets_new_number(hf, api, refs_repo, pr):
    from huggingface_hub import CommitOperationAdd

    second = api.create_commit(refs_repo["repo_id"], [CommitOperationAdd("pr2.txt", b"other\n")],
                               commit_message="another PR", create_pr=True)
    assert second.pr_num is not None and second.pr_num != pr["info"].pr_num


def test_upload_folder_as_pr(api, refs_repo, tmp_path, cache_dir):
    folder = tmp_path / "f"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_bytes(b"folder PR\n")
    info = api.upload_folder(repo_id=refs_repo["repo_id"], folder_path=folder, create_pr=True,
                             commit_message="folder as PR")
    assert info.pr_revision is not None
    p = api.hf_hub_download(refs_repo["repo_id"], "sub/a.txt", revision=info.pr_revision, cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"folder PR\n"


def test_pr_from_parent_commit(hf, api, refs_repo, cache_dir):
    """create_pr=True with parent_commit behind main: the PR is made from that parent."""
    from huggingface_hub import CommitOperationAdd

    repo_id = refs_repo["repo_id"]
    old = api.create_commit(repo_id, [CommitOperationAdd("before-pr.txt", b"at the parent\n")],
                            commit_message="parent of a PR").oid
    old_files = set(api.list_repo_files(repo_id, revision=old))
    main = api.create_commit(repo_id, [CommitOperationAdd("after-parent.txt", b"main moved\n")],
                             commit_message="main moves on").oid
    info = api.create_commit(repo_id, [CommitOperationAdd("from-parent.txt", b"PR from the parent\n")],
                             commit_message="PR from an older commit", create_pr=True, parent_commit=old)
    assert info.pr_num is not None and info.pr_revision == f"refs/pr/{info.pr_num}"
    assert api.repo_info(repo_id).sha == main, "a PR must not move main"

    prs = {d.num: d for d in api.get_repo_discussions(repo_id, discussion_type="pull_request")}
    assert info.pr_num in prs, f"PR {info.pr_num} not in {sorted(prs)}"
    assert prs[info.pr_num].is_pull_request and prs[info.pr_num].title == "PR from an older commit"
    details = api.get_discussion_details(repo_id, info.pr_num)
    assert details.target_branch == "refs/heads/main"

    assert set(api.list_repo_files(repo_id, revision=info.pr_revision)) == old_files | {"from-parent.txt"}
    assert [c.commit_id for c in api.list_repo_commits(repo_id, revision=info.pr_revision)][:2] == [info.oid, old]
    p = api.hf_hub_download(repo_id, "from-parent.txt", revision=info.pr_revision, cache_dir=cache_dir)
    assert Path(p).read_bytes() == b"PR from the parent\n"
