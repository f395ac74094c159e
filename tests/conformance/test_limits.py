"""The Hub's limits as the stock client sees them: the commit budget per repository (128 commits per hour on
the free plan) and the request windows (per user, per 5-minute window and bucket).

One server serves the whole session with the Hub's defaults: each test tightens a limit through the local
Hub's admin endpoint (`/admin/limits`, write token), on a repo of its own, and restores it afterwards.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.request

import pytest

from conftest import ALICE, LOCAL_WRITE, http_status, unique


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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_request_window_429_is_waited_out(hf, api, endpoint, cache_dir):
    """A spent `resolvers` window: the stock client's download meets the Hub's 429, waits the `t` seconds of
    its `RateLimit` header, and then succeeds."""
    from huggingface_hub import CommitOperationAdd, hf_hub_download

    repo_id = f"alice/{unique('windows')}"
    api.create_repo(repo_id)
    files = {f"f{i}.txt": (f"file {i}\n" * (i + 1)).encode() for i in range(3)}
    api.create_commit(repo_id, [CommitOperationAdd(name, data) for name, data in files.items()],
                      commit_message="three small files")
    before = _limits(endpoint)["request_windows"]
    # 6 s windows at 3/5000 of the quotas: alice (free) has 3 resolver requests per window. Each download of
    # a small file is a HEAD and a GET of its /resolve/ URL, so the second file's GET is refused.
    v = _limits(endpoint, {"request_windows": {"window_secs": 6, "quota_scale": 0.0006, "reset": True}})
    assert v["request_windows"]["quotas"]["free"]["resolvers"] == 3, v
    records = _Records()
    http_logger = logging.getLogger("huggingface_hub.utils._http")
    http_logger.addHandler(records)
    try:
        # Start early in a window, so the 429 comes with most of the window left to wait.
        while time.time() % 6 > 0.3:
            time.sleep(0.05)
        _limits(endpoint, {"request_windows": {"reset": True}})
        start = time.monotonic()
        paths = {name: hf_hub_download(repo_id, name, token=ALICE, cache_dir=cache_dir) for name in files}
        elapsed = time.monotonic() - start
        stats = _stats(endpoint)["request_windows"]
    finally:
        http_logger.removeHandler(records)
        _limits(endpoint, {"request_windows": {"window_secs": before["window_secs"],
                                               "quota_scale": before["quota_scale"], "reset": True}})
    for name, path in paths.items():
        with open(path, "rb") as f:
            assert f.read() == files[name], name
    # The client says how long it waits: the 429's `t`, plus one second of its own.
    waits = [float(w) for m in records.messages for w in re.findall(r"Rate limited\. Waiting ([0-9.]+)s", m)]
    assert len(waits) == 1, records.messages
    t = waits[0] - 1
    assert 4 <= t <= 6, f"the 429 came early in a 6 s window, yet t={t}"
    assert elapsed >= t, f"took {elapsed:.1f}s, less than the {t}s wait"
    assert stats["refused"]["resolvers"] >= 1, stats
    assert stats["keys"]["user:alice"]["resolvers"]["refused"] >= 1, stats


def _stats(endpoint: str) -> dict:
    req = urllib.request.Request(f"{endpoint}/admin/stats", headers={"authorization": f"Bearer {LOCAL_WRITE}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)
