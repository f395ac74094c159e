"""The Hub's commit budget per repository (128 commits per hour on the free plan) as the stock client sees it.

One server serves the whole session with the default budget (128/3600): the test tightens it through the
local Hub's admin endpoint (`/admin/limits`, write token) for a repo of its own and restores it afterwards.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from conftest import LOCAL_WRITE, http_status, unique


def _limits(endpoint: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(
        f"{endpoint}/admin/limits",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"authorization": f"Bearer {LOCAL_WRITE}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def test_commit_past_the_budget_is_429(hf, api, endpoint):
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = f"alice/{unique('budget')}"
    other_id = f"alice/{unique('budget-other')}"
    api.create_repo(repo_id)
    api.create_repo(other_id)
    before = _limits(endpoint)["commit_limit"]  # "128/3600" when run.sh started the server
    _limits(endpoint, {"commit_limit": "2/3600"})
    try:
        for i in range(2):
            api.upload_file(path_or_fileobj=b"%d\n" % i, path_in_repo=f"f{i}.txt", repo_id=repo_id,
                            commit_message=f"commit {i}")
        with pytest.raises(HfHubHTTPError) as ei:
            api.upload_file(path_or_fileobj=b"2\n", path_in_repo="f2.txt", repo_id=repo_id,
                            commit_message="one too many")
        err = ei.value
        assert http_status(err) == 429
        text = str(err)
        assert ("You have exceeded the rate limit for repository commits (2 per hour). "
                "You can retry this action in about 1 hour.") in text, text
        # The client read the RateLimit / RateLimit-Policy headers of the 429.
        assert "you have reached your 'commits' rate limit" in text, text
        assert "(0/2 requests remaining in current 3600s window)" in text, text
        assert 3000 < int(err.response.headers["retry-after"]) <= 3600
        assert "f2.txt" not in api.list_repo_files(repo_id), "the refused commit landed"
        # The budget is the repo's: another repo still commits.
        api.upload_file(path_or_fileobj=b"x\n", path_in_repo="x.txt", repo_id=other_id, commit_message="other")
        stats = _limits(endpoint)["repos"][repo_id]
        assert (stats["in_window"], stats["refused"]) == (2, 1), stats
    finally:
        _limits(endpoint, {"commit_limit": before})
    # Back to 128 per hour: the repo commits again.
    api.upload_file(path_or_fileobj=b"2\n", path_in_repo="f2.txt", repo_id=repo_id, commit_message="later")
    assert "f2.txt" in api.list_repo_files(repo_id)
