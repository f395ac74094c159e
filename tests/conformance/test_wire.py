"""Raw HTTP checks of the details the stock clients depend on (hub-protocol.md A0, A2-A4, C1).

These use http.client directly (no redirect following unless asked), so a failure names the exact header.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote, urlencode, urljoin, urlsplit

import pytest

from conftest import ALICE, BOB, HEX40, HEX64, LOCAL_READ, git_blob_sha1, unique


@dataclass
class Resp:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    url: str

    def h(self, name: str) -> str | None:
        return self.headers.get(name)

    def json(self):
        return json.loads(self.body)


def _origin(url: str):
    u = urlsplit(url)
    return (u.scheme, u.hostname, u.port)


def raw(method: str, url: str, headers: dict | None = None, body: bytes | None = None, follow: bool = False,
        _hops: int = 0) -> Resp:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        conn.request(method, path, body=body, headers=dict(headers or {}))
        r = conn.getresponse()
        data = r.read()
        resp = Resp(r.status, r.headers, data, url)
    finally:
        conn.close()
    if follow and resp.status in (301, 302, 303, 307, 308) and _hops < 5:
        target = urljoin(url, resp.h("Location"))
        hdrs = dict(headers or {})
        if _origin(target) != _origin(url):
            hdrs.pop("Authorization", None)  # what every client does on a cross-origin redirect
        return raw(method, target, hdrs, body, follow=True, _hops=_hops + 1)
    return resp


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def strip_etag(v: str | None) -> str | None:
    if v is None:
        return None
    if v.startswith("W/"):
        v = v[2:]
    return v.strip('"')


def resolve_url(endpoint: str, repo_id: str, path: str, rev: str = "main", repo_type: str = "model") -> str:
    prefix = "" if repo_type == "model" else f"{repo_type}s/"
    return f"{endpoint}/{prefix}{repo_id}/resolve/{quote(rev, safe='')}/{quote(path)}"


# ---------------------------------------------------------------------------------------------
# resolve: headers, redirects, ranges
# ---------------------------------------------------------------------------------------------


def test_head_regular_file(endpoint, text_repo):
    r = raw("HEAD", resolve_url(endpoint, text_repo.repo_id, text_repo.small.path_in_repo),
            {**auth(ALICE), "Accept-Encoding": "identity"})
    assert r.status == 200
    assert r.h("X-Repo-Commit") == text_repo.commit_notes_v2
    assert strip_etag(r.h("ETag")) == git_blob_sha1(text_repo.small.data)
    assert r.h("Content-Length") == str(len(text_repo.small.data)), "HEAD must report the real Content-Length"
    assert "bytes" in (r.h("Accept-Ranges") or "")
    assert r.h("Content-Encoding") in (None, "identity")


def test_head_lfs_file_redirects(endpoint, model_repo, api):
    entry = api.get_paths_info(model_repo.repo_id, [model_repo.big.path_in_repo])[0]
    r = raw("HEAD", resolve_url(endpoint, model_repo.repo_id, model_repo.big.path_in_repo),
            {**auth(ALICE), "Accept-Encoding": "identity"})
    assert r.status == 302, "LFS/Xet files answer 302 to the blob server (a different origin)"
    assert r.h("Location")
    assert _origin(urljoin(r.url, r.h("Location"))) != _origin(endpoint), \
        "the blob URL must be another origin (port), else Python follows it and loses the X-* headers"
    assert r.h("X-Repo-Commit") == model_repo.commit_big
    assert strip_etag(r.h("X-Linked-Etag")) == model_repo.big.sha256
    assert r.h("X-Linked-Size") == str(len(model_repo.big.data))
    assert r.h("ETag")
    if entry.xet_hash is not None:
        assert r.h("X-Xet-Hash") == entry.xet_hash
        link = r.h("Link") or ""
        refresh = r.h("X-Xet-Refresh-Route")
        assert 'rel="xet-auth"' in link or refresh, "Xet files need the xet-auth Link (or X-Xet-Refresh-Route)"


def test_blob_url_is_self_authorising_and_ranged(endpoint, model_repo):
    r = raw("HEAD", resolve_url(endpoint, model_repo.repo_id, model_repo.big.path_in_repo), auth(ALICE))
    target = urljoin(r.url, r.h("Location"))
    data = model_repo.big.data
    full = raw("GET", target)  # no Authorization, like huggingface_hub's download GET
    assert full.status == 200
    assert full.body == data
    for rng, want in [("bytes=0-9", data[0:10]), ("bytes=1000-1999", data[1000:2000]),
                      (f"bytes={len(data) - 5}-", data[-5:]), ("bytes=-7", data[-7:])]:
        part = raw("GET", target, {"Range": rng})
        assert part.status == 206, rng
        assert part.body == want, rng
        cr = part.h("Content-Range") or ""
        assert re.fullmatch(rf"bytes \d+-\d+/{len(data)}", cr), (rng, cr)
    bad = raw("GET", target, {"Range": f"bytes={len(data)}-"})
    assert bad.status == 416


def test_range_on_regular_file(endpoint, text_repo):
    url = resolve_url(endpoint, text_repo.repo_id, text_repo.small.path_in_repo)
    data = text_repo.small.data
    r = raw("GET", url, {**auth(ALICE), "Range": "bytes=5-9"})
    assert r.status == 206
    assert r.body == data[5:10]
    assert r.h("Content-Range") == f"bytes 5-9/{len(data)}"
    r = raw("GET", url, {**auth(ALICE), "Range": "bytes=-4"})
    assert r.status == 206 and r.body == data[-4:]
    r = raw("GET", url, {**auth(ALICE), "Range": f"bytes={len(data) + 10}-"})
    assert r.status == 416


def test_range_through_redirect(endpoint, model_repo):
    data = model_repo.big.data
    url = resolve_url(endpoint, model_repo.repo_id, model_repo.big.path_in_repo)
    r = raw("GET", url, {**auth(ALICE), "Range": "bytes=7340032-7340131"}, follow=True)
    assert r.status == 206
    assert r.body == data[7340032:7340132]


def test_conditional_get_304(endpoint, text_repo):
    url = resolve_url(endpoint, text_repo.repo_id, text_repo.small.path_in_repo)
    etag = raw("HEAD", url, auth(ALICE)).h("ETag")
    r = raw("GET", url, {**auth(ALICE), "If-None-Match": etag})
    assert r.status == 304


def test_resolve_by_commit_id(endpoint, text_repo):
    r = raw("HEAD", resolve_url(endpoint, text_repo.repo_id, "notes.txt", rev=text_repo.commit_notes_v1),
            auth(ALICE))
    assert r.status == 200
    assert r.h("X-Repo-Commit") == text_repo.commit_notes_v1
    assert r.h("Content-Length") == str(len(text_repo.notes_v1.data))


# ---------------------------------------------------------------------------------------------
# Error headers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def private_repo(api):
    repo_id = f"alice/{unique('wire-private')}"
    api.create_repo(repo_id, private=True)
    api.upload_file(path_or_fileobj=b"p\n", path_in_repo="p.txt", repo_id=repo_id, commit_message="p")
    return repo_id


def _assert_error(r: Resp, status: int, code: str | None):
    assert r.status == status, (r.status, r.body[:200])
    assert r.h("X-Error-Code") == code, r.h("X-Error-Code")
    if r.body and "json" in (r.h("Content-Type") or ""):
        body = r.json()
        assert "error" in body or "errors" in body


def test_error_entry_not_found(endpoint, text_repo):
    r = raw("HEAD", resolve_url(endpoint, text_repo.repo_id, "nope.txt"), auth(ALICE))
    _assert_error(r, 404, "EntryNotFound")
    assert r.h("X-Repo-Commit") == text_repo.commit_notes_v2, "404s on resolve carry X-Repo-Commit too"
    r = raw("GET", resolve_url(endpoint, text_repo.repo_id, "nope.txt"), auth(ALICE))
    _assert_error(r, 404, "EntryNotFound")


def test_error_revision_not_found(endpoint, text_repo):
    r = raw("GET", resolve_url(endpoint, text_repo.repo_id, "hello.txt", rev="nope"), auth(ALICE))
    _assert_error(r, 404, "RevisionNotFound")
    r = raw("GET", f"{endpoint}/api/models/{text_repo.repo_id}/revision/nope", auth(ALICE))
    _assert_error(r, 404, "RevisionNotFound")
    r = raw("GET", f"{endpoint}/api/models/{text_repo.repo_id}/tree/nope", auth(ALICE))
    _assert_error(r, 404, "RevisionNotFound")


def test_error_repo_not_found(endpoint):
    missing = f"alice/{unique('wire-missing')}"
    _assert_error(raw("GET", f"{endpoint}/api/models/{missing}", auth(ALICE)), 404, "RepoNotFound")
    _assert_error(raw("GET", resolve_url(endpoint, missing, "x.txt"), auth(ALICE)), 404, "RepoNotFound")


def test_error_private_repo(endpoint, private_repo):
    for url in (f"{endpoint}/api/models/{private_repo}", resolve_url(endpoint, private_repo, "p.txt"),
                f"{endpoint}/api/models/{private_repo}/tree/main",
                f"{endpoint}/api/models/{private_repo}/xet-read-token/main"):
        _assert_error(raw("GET", url), 401, "RepoNotFound")
        _assert_error(raw("GET", url, auth(BOB)), 404, "RepoNotFound")
        assert raw("GET", url, auth(ALICE)).status in (200, 302), url


def test_error_bad_token(endpoint, text_repo):
    r = raw("GET", f"{endpoint}/api/models/{text_repo.repo_id}", auth("hf_bogus"))
    assert r.status == 401
    assert r.h("X-Error-Code") is None


# ---------------------------------------------------------------------------------------------
# Tree paging, path encodings, paths-info body forms
# ---------------------------------------------------------------------------------------------


def test_tree_link_header_is_absolute(endpoint, anon_api):
    from huggingface_hub.hf_api import RepoFile

    files = [e.path for e in anon_api.list_repo_tree("demo/tiny-dataset", recursive=True, repo_type="dataset")
             if isinstance(e, RepoFile)]
    folder, n = Counter(str(PurePosixPath(p).parent) for p in files).most_common(1)[0]
    assert n > 1000
    url = f"{endpoint}/api/datasets/demo/tiny-dataset/tree/main/{quote(folder, safe='')}?recursive=false&expand=false"
    seen = []
    for _ in range(100):
        r = raw("GET", url)
        assert r.status == 200
        page = r.json()
        assert isinstance(page, list)
        seen += [e["path"] for e in page]
        m = re.search(r'<([^>]+)>;\s*rel="next"', r.h("Link") or "")
        if not m:
            break
        url = m.group(1)
        assert url.startswith("http://") or url.startswith("https://"), f"Link next URL must be absolute: {url}"
    assert len(seen) == len(set(seen))
    assert len([p for p in seen if str(PurePosixPath(p).parent) == folder]) == n


def test_tree_path_with_raw_or_encoded_slashes(endpoint, dataset_repo):
    base = f"{endpoint}/api/datasets/{dataset_repo.repo_id}/tree/main"
    enc = raw("GET", f"{base}/{quote('data/nested', safe='')}", auth(ALICE))
    plain = raw("GET", f"{base}/data/nested", auth(ALICE))
    assert enc.status == plain.status == 200
    assert [e["path"] for e in enc.json()] == [e["path"] for e in plain.json()] == ["data/nested/deeper"]
    entry = enc.json()[0]
    assert entry["type"] == "directory" and HEX40.match(entry["oid"])


def test_tree_entry_json_shape(endpoint, model_repo):
    r = raw("GET", f"{endpoint}/api/models/{model_repo.repo_id}/tree/main/weights", auth(ALICE))
    assert r.status == 200
    (e,) = r.json()
    assert e["type"] == "file" and e["path"] == model_repo.big.path_in_repo
    assert e["size"] == len(model_repo.big.data)
    assert e["lfs"]["oid"] == model_repo.big.sha256
    assert e["lfs"]["size"] == len(model_repo.big.data)
    assert isinstance(e["lfs"]["pointerSize"], int)
    if "xetHash" in e:
        assert HEX64.match(e["xetHash"])


def test_paths_info_form_and_json_bodies(endpoint, dataset_repo):
    url = f"{endpoint}/api/datasets/{dataset_repo.repo_id}/paths-info/main"
    paths = ["data/train.csv", "data", "missing.txt"]
    form = raw("POST", url, {**auth(ALICE), "Content-Type": "application/x-www-form-urlencoded"},
               urlencode([("paths", p) for p in paths] + [("expand", "false")]).encode())
    js = raw("POST", url, {**auth(ALICE), "Content-Type": "application/json"}, json.dumps({"paths": paths}).encode())
    assert form.status == js.status == 200
    assert {e["path"] for e in form.json()} == {e["path"] for e in js.json()} == {"data/train.csv", "data"}


# ---------------------------------------------------------------------------------------------
# Xet tokens (C1)
# ---------------------------------------------------------------------------------------------


def _check_token_response(r: Resp):
    assert r.status == 200, (r.status, r.body[:200])
    body = r.json()
    assert body["casUrl"].startswith("http")
    assert isinstance(body["accessToken"], str) and body["accessToken"]
    assert isinstance(body["exp"], int) and body["exp"] > time.time() + 60, "exp must leave > 60 s (client margin)"
    assert r.h("X-Xet-Cas-Url") == body["casUrl"]
    assert r.h("X-Xet-Access-Token") == body["accessToken"]
    assert r.h("X-Xet-Token-Expiration") == str(body["exp"])


def test_xet_read_token_public(endpoint):
    _check_token_response(raw("GET", f"{endpoint}/api/models/demo/tiny-model/xet-read-token/main"))


def test_xet_write_token(endpoint, model_repo):
    url = f"{endpoint}/api/models/{model_repo.repo_id}/xet-write-token/main"
    _check_token_response(raw("GET", url, auth(ALICE)))
    _check_token_response(raw("GET", f"{endpoint}/api/models/{model_repo.repo_id}/xet-write-token/None?create_pr=1",
                              auth(ALICE)))
    assert raw("GET", url).status in (401, 403)
    assert raw("GET", url, auth(LOCAL_READ)).status in (401, 403, 404)
    assert raw("GET", url, auth(BOB)).status in (401, 403, 404)
