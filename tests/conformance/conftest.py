"""Shared setup for the hubfs local-hub conformance suite.

The suite drives a running `hubfs local-hub` with the stock `huggingface_hub` client.
`run.sh` normally starts the server, exports HF_ENDPOINT and runs pytest once per mode:

    HUBFS_CONFORMANCE_MODE=xet    hf_xet active: Xet upload (xet-write-token + CAS) and Xet download
    HUBFS_CONFORMANCE_MODE=noxet  HF_HUB_DISABLE_XET=1: LFS batch upload, plain HTTP download

If HF_ENDPOINT is not set but HUBFS_BIN is, this conftest starts the server itself (same flags as run.sh).

huggingface_hub reads HF_ENDPOINT / HF_HUB_DISABLE_XET at import time, so this module must not import it
before the environment is final: it is imported lazily inside fixtures only.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------------------------
# Environment (must be final before any test module imports huggingface_hub)
# ---------------------------------------------------------------------------------------------

ALICE = "hf_alice"  # user alice, write
BOB = "hf_bob"  # user bob, write (a second, unrelated user)
LOCAL_WRITE = "hf_local_write"  # user local, write
LOCAL_READ = "hf_local_read"  # user local, read only

SERVER_TOKEN_ARGS = [
    "--token", f"local:{LOCAL_WRITE}:write",
    "--token", f"local:{LOCAL_READ}:read",
    "--token", f"alice:{ALICE}:write",
    "--token", f"bob:{BOB}:write",
]

MiB = 1024 * 1024

_TRUE = {"1", "on", "yes", "true"}


def _mode_from_env() -> str:
    mode = os.environ.get("HUBFS_CONFORMANCE_MODE", "").strip().lower()
    if mode not in ("", "xet", "noxet"):
        raise pytest.UsageError(f"HUBFS_CONFORMANCE_MODE must be 'xet' or 'noxet', got {mode!r}")
    if not mode:
        mode = "noxet" if os.environ.get("HF_HUB_DISABLE_XET", "").strip().lower() in _TRUE else "xet"
    if mode == "noxet":
        os.environ["HF_HUB_DISABLE_XET"] = "1"
    else:
        os.environ.pop("HF_HUB_DISABLE_XET", None)
    os.environ["HUBFS_CONFORMANCE_MODE"] = mode
    return mode


MODE = _mode_from_env()
IS_XET = MODE == "xet"

if "huggingface_hub" in sys.modules:  # pragma: no cover - defensive
    raise RuntimeError("huggingface_hub was imported before the conformance conftest could configure it")

# Tests pass tokens explicitly; never pick up a developer's real token or cache.
os.environ.pop("HF_TOKEN", None)
os.environ.pop("HUGGING_FACE_HUB_TOKEN", None)
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")
# Make hf_xet really fetch from the server on every download (no local chunk cache).
os.environ.setdefault("HF_XET_CHUNK_CACHE_SIZE_BYTES", "0")
_OWN_HF_HOME = None
if not os.environ.get("HF_HOME"):
    _OWN_HF_HOME = os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hubfs-conformance-hfhome-")

_SERVER: dict = {}
ENDPOINT_RE = re.compile(r"^endpoint: (http://\S+)\s*$")


def _start_server() -> str:
    """Start `$HUBFS_BIN local-hub` (only used when HF_ENDPOINT is not given)."""
    binary = os.environ.get("HUBFS_BIN")
    if not binary:
        raise pytest.UsageError(
            "Set HF_ENDPOINT to a running `hubfs local-hub` (started with --seed-demo and the suite's tokens), "
            "or HUBFS_BIN to the hubfs binary so the suite can start one. Normally use tests/conformance/run.sh."
        )
    base = tempfile.mkdtemp(prefix=f"hubfs-conformance-{MODE}-")
    data_dir = os.path.join(base, "data")
    os.mkdir(data_dir)
    log_path = Path(base) / "server.log"
    log = open(log_path, "wb")
    cmd = [binary, "local-hub", "--data-dir", data_dir, "--addr", "127.0.0.1:0", "--seed-demo", *SERVER_TOKEN_ARGS]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    _SERVER.update(proc=proc, base=base, log=log, log_path=log_path)
    found: dict = {}

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            m = ENDPOINT_RE.match(line)
            if m and "endpoint" not in found:
                found["endpoint"] = m.group(1)
        # keep draining until EOF so the server never blocks on a full pipe

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.monotonic() + float(os.environ.get("HUBFS_START_TIMEOUT", "120"))
    while time.monotonic() < deadline:
        if "endpoint" in found:
            return found["endpoint"]
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log_path.read_bytes()[-4000:].decode("utf-8", "replace") if log_path.exists() else ""
    raise RuntimeError(f"hubfs local-hub did not print 'endpoint: http://…' in time; its stderr ends with:\n{tail}")


def _stop_server() -> None:
    proc = _SERVER.get("proc")
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    if _SERVER.get("log"):
        _SERVER["log"].close()
    if _SERVER.get("base"):
        if os.environ.get("HUBFS_KEEP_TMP") == "1":
            print(f"\nkept {_SERVER['base']} (server data and log)", file=sys.stderr)
        else:
            shutil.rmtree(_SERVER["base"], ignore_errors=True)
    _SERVER.clear()


def pytest_configure(config: pytest.Config) -> None:
    if _OWN_HF_HOME and os.environ.get("HUBFS_KEEP_TMP") != "1":
        config.add_cleanup(lambda: shutil.rmtree(_OWN_HF_HOME, ignore_errors=True))
    if not os.environ.get("HF_ENDPOINT"):
        config.add_cleanup(_stop_server)
        os.environ["HF_ENDPOINT"] = _start_server()
    os.environ["HF_ENDPOINT"] = os.environ["HF_ENDPOINT"].rstrip("/")


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        from importlib.metadata import version

        versions = f"huggingface_hub {version('huggingface_hub')}, hf_xet {version('hf_xet')}"
    except Exception as e:  # pragma: no cover
        versions = f"(versions unknown: {e})"
    return [
        f"hubfs conformance mode: {MODE} (HF_HUB_DISABLE_XET={os.environ.get('HF_HUB_DISABLE_XET', '')!s})",
        f"HF_ENDPOINT={os.environ.get('HF_ENDPOINT')}  {versions}",
    ]


# Every test id carries the mode, e.g. `test_upload.py::test_big_file_roundtrip[xet]`.
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hub_mode" in metafunc.fixturenames:
        metafunc.parametrize("hub_mode", [MODE], ids=[MODE], indirect=True, scope="session")


@pytest.fixture(autouse=True, scope="session")
def hub_mode(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", MODE)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def binary(n: int) -> bytes:
    """Random bytes that are unmistakably binary: a NUL in the first 512 bytes (the preupload `sample`) makes
    the server answer uploadMode=lfs whatever its .gitattributes say (hub-protocol.md B1)."""
    return b"\0" + os.urandom(n - 1)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256_hex: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256_hex}\nsize {size}\n".encode()


HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def unique(prefix: str) -> str:
    return f"{prefix}-{MODE}-{secrets.token_hex(4)}"


def tree_map(api, repo_id: str, *, repo_type: str | None = None, revision: str | None = None, path: str | None = None):
    """Recursive listing as {path: RepoFile|RepoFolder}."""
    entries = list(api.list_repo_tree(repo_id, path, recursive=True, repo_type=repo_type, revision=revision))
    out = {}
    for e in entries:
        assert e.path not in out, f"duplicate entry {e.path!r} in tree listing"
        out[e.path] = e
    return out


def http_status(err: BaseException) -> int | None:
    resp = getattr(err, "response", None)
    return getattr(resp, "status_code", None)


@dataclass
class LocalFile:
    path_in_repo: str
    data: bytes
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        self.sha256 = sha256_bytes(self.data)


@dataclass
class TextRepo:
    """alice's public model repo with regular (non-LFS) files only: hello.txt, then notes.txt twice."""

    repo_id: str
    small: LocalFile
    notes_v1: LocalFile
    notes_v2: LocalFile
    commit_small: str
    commit_notes_v1: str
    commit_notes_v2: str  # the head of main


@dataclass
class ModelRepo:
    """alice's public model repo: hello.txt, then a 20 MiB random binary (LFS; Xet in xet mode)."""

    repo_id: str
    small: LocalFile
    big: LocalFile
    big_path: Path
    commit_small: str
    commit_big: str  # the head of main


@dataclass
class DatasetRepo:
    """alice's public dataset repo filled with upload_folder."""

    repo_id: str
    folder: Path
    files: dict  # path_in_repo -> LocalFile
    commit: str
    repo_type: str = "dataset"


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def endpoint() -> str:
    return os.environ["HF_ENDPOINT"]


@pytest.fixture(scope="session")
def hf():
    """The huggingface_hub module, imported after the environment is set."""
    import huggingface_hub

    from huggingface_hub import constants

    assert constants.ENDPOINT == os.environ["HF_ENDPOINT"], (constants.ENDPOINT, os.environ["HF_ENDPOINT"])
    assert bool(constants.HF_HUB_DISABLE_XET) == (MODE == "noxet")
    return huggingface_hub


@pytest.fixture(scope="session")
def xet_active(hf) -> bool:
    from huggingface_hub.utils._runtime import is_xet_available

    active = is_xet_available()
    assert active == IS_XET, f"mode {MODE} but huggingface_hub.is_xet_available() == {active}"
    return active


def _api(endpoint: str, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


@pytest.fixture(scope="session")
def api(hf, endpoint):
    """alice (write)."""
    return _api(endpoint, ALICE)


@pytest.fixture(scope="session")
def bob_api(hf, endpoint):
    return _api(endpoint, BOB)


@pytest.fixture(scope="session")
def anon_api(hf, endpoint):
    return _api(endpoint, False)


@pytest.fixture(scope="session")
def local_write_api(hf, endpoint):
    return _api(endpoint, LOCAL_WRITE)


@pytest.fixture(scope="session")
def local_read_api(hf, endpoint):
    return _api(endpoint, LOCAL_READ)


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    """A fresh HF cache per test, so nothing is served from an earlier download."""
    d = tmp_path / "hf-cache"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def big_file(tmp_path_factory) -> tuple[Path, LocalFile]:
    data = binary(20 * MiB)
    path = tmp_path_factory.mktemp("big") / "big.bin"
    path.write_bytes(data)
    return path, LocalFile("weights/big.bin", data)


@pytest.fixture(scope="session")
def text_repo(api) -> TextRepo:
    repo_id = f"alice/{unique('text')}"
    url = api.create_repo(repo_id)
    assert url.repo_id == repo_id
    small = LocalFile("hello.txt", b"Hello from the hubfs conformance suite!\n" * 3)
    c0 = api.upload_file(path_or_fileobj=small.data, path_in_repo=small.path_in_repo, repo_id=repo_id,
                         commit_message="add hello")
    notes_v1 = LocalFile("notes.txt", b"version one\n")
    notes_v2 = LocalFile("notes.txt", b"version two, longer\n")
    c1 = api.upload_file(path_or_fileobj=notes_v1.data, path_in_repo="notes.txt", repo_id=repo_id,
                         commit_message="notes v1")
    c2 = api.upload_file(path_or_fileobj=notes_v2.data, path_in_repo="notes.txt", repo_id=repo_id,
                         commit_message="notes v2")
    return TextRepo(repo_id=repo_id, small=small, notes_v1=notes_v1, notes_v2=notes_v2, commit_small=c0.oid,
                    commit_notes_v1=c1.oid, commit_notes_v2=c2.oid)


@pytest.fixture(scope="session")
def model_repo(api, big_file) -> ModelRepo:
    repo_id = f"alice/{unique('model')}"
    url = api.create_repo(repo_id)
    assert url.repo_id == repo_id
    small = LocalFile("hello.txt", b"small file next to the big one\n")
    c0 = api.upload_file(path_or_fileobj=small.data, path_in_repo=small.path_in_repo, repo_id=repo_id,
                         commit_message="add hello")
    big_path, big = big_file
    c1 = api.upload_file(path_or_fileobj=str(big_path), path_in_repo=big.path_in_repo, repo_id=repo_id,
                         commit_message="add big")
    return ModelRepo(repo_id=repo_id, small=small, big=big, big_path=big_path, commit_small=c0.oid,
                     commit_big=c1.oid)


@pytest.fixture(scope="session")
def dataset_repo(api, tmp_path_factory) -> DatasetRepo:
    repo_id = f"alice/{unique('dataset')}"
    api.create_repo(repo_id, repo_type="dataset")
    folder = tmp_path_factory.mktemp("folder") / "upload"
    contents = {
        "README.md": b"---\nlicense: mit\npretty_name: hubfs conformance\n---\n# Conformance dataset\n",
        "data/train.csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(200)),
        "data/test.jsonl": b"".join(b'{"id": %d, "text": "row %d"}\n' % (i, i) for i in range(50)),
        "data/nested/deeper/leaf.txt": b"leaf\n",
        "blobs/random.bin": binary(300 * 1024),  # binary: goes LFS/Xet
        "blobs/empty.txt": b"",
        "dir with space/file name.txt": b"spaces are allowed\n",
    }
    files = {}
    for rel, data in contents.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        files[rel] = LocalFile(rel, data)
    info = api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=folder, commit_message="upload folder")
    return DatasetRepo(repo_id=repo_id, folder=folder, files=files, commit=info.oid)
