"""The hubfs Python API against a local Hub: real mounts read by real libraries, checked on the Hub.

Every mount uses the session's cache dir (``hub.cache_dir``) so that nothing lands in ~/.cache/hubfs
and a mount a failed test leaves behind is found and unmounted by the session fixture.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hubfs
from hubfs.mount import _option_args

pytestmark = pytest.mark.timeout(300)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def listed(m: hubfs.Mount) -> bool:
    return any(s.get("pid") == m.pid and s.get("mountpoint") == m.path for s in hubfs.mounts())


# --- reads ------------------------------------------------------------------------------------------


def test_safetensors_loads_through_a_mount(hub, api):
    from huggingface_hub import hf_hub_download
    from safetensors import safe_open

    [info] = api.get_paths_info("demo/tiny-model", ["model.safetensors"])
    ref = hf_hub_download("demo/tiny-model", "model.safetensors", endpoint=hub.endpoint, cache_dir=str(hub.work / "dl"))
    with hubfs.mount("demo/tiny-model", endpoint=hub.endpoint, cache_dir=hub.cache_dir) as m:
        assert os.path.ismount(m.path)
        assert re.fullmatch(r"[0-9a-f]{40}", m.commit or ""), m.commit
        assert sorted(os.listdir(m.path)) == sorted(f for f in api.list_repo_files("demo/tiny-model"))
        path = os.path.join(m, "model.safetensors")  # a Mount is os.PathLike
        assert path == m.path + "/model.safetensors"
        # The whole file's sha256 is the Hub's own (its LFS pointer's).
        assert sha256_file(path) == info.lfs.sha256
        with safe_open(path, "np") as got, safe_open(ref, "np") as want:
            keys = list(got.keys())
            assert keys and keys == list(want.keys())
            for k in keys:
                a, b = got.get_tensor(k), want.get_tensor(k)
                assert a.dtype == b.dtype and a.shape == b.shape, k
                assert hashlib.sha256(a.tobytes()).hexdigest() == hashlib.sha256(b.tobytes()).hexdigest(), k
        mountpoint = m.path
    # The with block unmounted, and removed the temporary mountpoint it made.
    assert not os.path.exists(mountpoint)
    assert not m.mounted


def test_datasets_reads_parquet_through_a_mount(hub, parquet_dataset, table_rows):
    from datasets import load_dataset

    mnt = hub.work / "table-mnt"
    mnt.mkdir()
    # endpoint=None: the binary takes HF_ENDPOINT from the environment (the session set it).
    with hubfs.mount(f"datasets/{parquet_dataset}", mnt, cache_dir=hub.cache_dir) as m:
        assert m.path == str(mnt)
        ds = load_dataset("parquet", data_files=os.path.join(m.path, "data/train.parquet"), split="train")
        assert ds.num_rows == len(table_rows)
        assert ds.column_names == ["id", "text", "value"]
        for i in (0, 1, 999, 1000, 2999):
            assert ds[i] == table_rows[i], i
        assert list(ds["id"]) == list(range(len(table_rows)))
    assert mnt.is_dir() and not os.path.ismount(mnt)  # a given dir stays


# --- writes -----------------------------------------------------------------------------------------


def test_written_file_is_on_the_hub_after_sync(hub, api, writable_dataset):
    payload = os.urandom(3 << 20)  # LFS/Xet class (>= 1 MiB)
    note = b"written through hubfs\n"
    with hubfs.mount(
        f"datasets/{writable_dataset}", write=True, token=hub.token, endpoint=hub.endpoint, cache_dir=hub.cache_dir
    ) as m:
        assert m.writable and m.status()["mode"] != "read-only"
        os.makedirs(os.path.join(m.path, "out"), exist_ok=True)
        with open(os.path.join(m.path, "out", "blob.bin"), "wb") as f:
            f.write(payload)
        with open(os.path.join(m.path, "out", "note.txt"), "wb") as f:
            f.write(note)
        m.sync()
        # Right after sync, without unmounting: the Hub has both, with the right content.
        infos = {i.path: i for i in api.get_paths_info(writable_dataset, ["out/blob.bin", "out/note.txt"], repo_type="dataset")}
        assert set(infos) == {"out/blob.bin", "out/note.txt"}
        assert infos["out/blob.bin"].lfs is not None
        assert infos["out/blob.bin"].lfs.sha256 == hashlib.sha256(payload).hexdigest()
        from huggingface_hub import hf_hub_download

        p = hf_hub_download(
            writable_dataset, "out/note.txt", repo_type="dataset", endpoint=hub.endpoint, token=hub.token,
            cache_dir=str(hub.work / "dl"),
        )
        assert Path(p).read_bytes() == note
        assert m.status().get("writable") is not None


def test_overlay_edits_stay_local_until_published_as_a_pull_request(hub, api):
    before = sorted(api.list_repo_files("demo/tiny-model"))
    with hubfs.mount(
        "demo/tiny-model", overlay=True, token="hf_local_read", endpoint=hub.endpoint, cache_dir=hub.cache_dir
    ) as m:
        with open(os.path.join(m.path, "notes.txt"), "w") as f:
            f.write("written from Python\n")
        os.remove(os.path.join(m.path, "README.md"))
        assert sorted((c["kind"], c["path"]) for c in m.diff()) == [("added", "notes.txt"), ("deleted", "README.md")]
        assert sorted(api.list_repo_files("demo/tiny-model")) == before  # nothing left the machine
        with pytest.raises(hubfs.HubfsError, match="write"):
            m.publish("From Python", pr=True, token="hf_local_read")
        out = m.publish("From Python", pr=True, token=hub.token)
        assert out["commit"] and "/discussions/" in (out["pr_url"] or "")
        assert m.diff() == []
    assert sorted(api.list_repo_files("demo/tiny-model")) == before
    prs = [d for d in api.get_repo_discussions("demo/tiny-model") if d.is_pull_request and d.title == "From Python"]
    assert len(prs) == 1
    files = api.list_repo_files("demo/tiny-model", revision=f"refs/pr/{prs[0].num}")
    assert "notes.txt" in files and "README.md" not in files


def test_sync_of_a_read_only_mount_says_so(hub):
    with hubfs.mount("demo/tiny-model", cache_dir=hub.cache_dir) as m:
        with pytest.raises(hubfs.ReadOnlyMountError, match="read-only mount"):
            m.sync()


# --- status, lifecycle, options ---------------------------------------------------------------------


def test_mounts_lists_a_running_mount(hub):
    m = hubfs.mount("demo/tiny-model", cache_dir=hub.cache_dir, readahead_kib=128, passthrough="off")
    try:
        assert listed(m)
        s = m.status()
        assert s["repo"] == "demo/tiny-model" and s["commit"] == m.commit and s["pid"] == m.pid
        assert s["mountpoint"] == m.path
        assert s["readahead_kib"][0] == 128  # readahead_kib=128 became --readahead-kib 128
        assert [x for x in hubfs.mounts(hub.cache_dir) if x["pid"] == m.pid]
        assert "demo/tiny-model@" in repr(m) and m.path in repr(m) and "ro" in repr(m)
    finally:
        m.unmount()
    assert not listed(m)
    m.unmount()  # idempotent
    assert "unmounted" in repr(m)
    with pytest.raises(hubfs.NotMountedError):
        m.status()


def test_unmount_after_the_mount_went_away_is_quiet(hub, tmp_path):
    m = hubfs.mount("demo/tiny-model", tmp_path, cache_dir=hub.cache_dir)
    subprocess.run([hubfs.find_binary(), "unmount", m.path], check=True, timeout=120)
    m.unmount()
    assert not os.path.ismount(tmp_path)


def test_option_mapping():
    assert _option_args({"readahead_kib": 128}) == ["--readahead-kib", "128"]
    assert _option_args({"allow_other": True, "nfs": False, "metrics_addr": None}) == ["--allow-other"]
    assert _option_args({"commit_every": "10m", "cache_size": 0}) == ["--commit-every", "10m", "--cache-size", "0"]
    with pytest.raises(TypeError):
        _option_args({"daemon": True})


def test_unknown_option_is_the_binarys_error(hub):
    with pytest.raises(hubfs.HubfsError, match="no-such-flag"):
        hubfs.mount("demo/tiny-model", cache_dir=hub.cache_dir, no_such_flag=1)


# --- errors -----------------------------------------------------------------------------------------


def test_repo_that_does_not_exist(hub, tmp_path):
    with pytest.raises(hubfs.RepoNotFoundError) as ei:
        hubfs.mount("demo/no-such-repo", tmp_path, endpoint=hub.endpoint, cache_dir=hub.cache_dir)
    e = ei.value
    assert isinstance(e, hubfs.HubfsError)
    assert "repository demo/no-such-repo not found" in str(e)
    assert e.returncode == 3 and "\n" not in str(e)
    assert not os.path.ismount(tmp_path)


def test_private_repo_needs_the_token(hub, private_model):
    with pytest.raises(hubfs.RepoNotFoundError):
        hubfs.mount(private_model, cache_dir=hub.cache_dir)
    with hubfs.mount(private_model, token=hub.token, cache_dir=hub.cache_dir) as m:
        assert Path(m.path, "config.json").read_text() == '{"private": true}\n'


def test_revision_that_does_not_exist(hub):
    with pytest.raises(hubfs.RevisionNotFoundError, match="no-such-branch") as ei:
        hubfs.mount("demo/tiny-model", revision="no-such-branch", cache_dir=hub.cache_dir)
    assert ei.value.returncode == 4


def test_bad_token_is_refused_and_never_shown(hub):
    secret = "hf_pytest_" + os.urandom(12).hex()
    with pytest.raises(hubfs.TokenRefusedError) as ei:
        hubfs.mount("demo/tiny-model", token=secret, cache_dir=hub.cache_dir)
    e = ei.value
    assert "rejected the token" in str(e) and e.returncode == 5
    for text in (str(e), repr(e), e.stderr, " ".join(e.command or []), str(e.args)):
        assert secret not in text


def test_mountpoint_that_does_not_exist(hub, tmp_path):
    with pytest.raises(hubfs.MountpointError, match="does not exist") as ei:
        hubfs.mount("demo/tiny-model", tmp_path / "missing", cache_dir=hub.cache_dir)
    assert ei.value.returncode == 7


def test_unreachable_hub_without_patience(hub, tmp_path):
    with pytest.raises(hubfs.HubUnavailableError, match="Connection refused") as ei:
        hubfs.mount(
            "demo/tiny-model", tmp_path, endpoint="http://127.0.0.1:1", cache_dir=hub.cache_dir, max_hub_wait="0"
        )
    assert ei.value.returncode == 8
    assert not os.path.ismount(tmp_path)


def test_exit_status_decides_before_the_wording():
    from hubfs.errors import classify

    # The status names the class whatever the message says; 1 (or no status) leaves it to the words.
    assert classify("anything at all", 3) is hubfs.RepoNotFoundError
    assert classify("the Hub rejected the token", 7) is hubfs.MountpointError
    assert classify("the Hub rejected the token", 1) is hubfs.TokenRefusedError
    assert classify("/m is not a hubfs mount: nothing is mounted there", 1) is hubfs.NotMountedError
    assert classify("cannot open /dev/fuse (ENOENT)") is hubfs.FuseUnavailableError
    assert classify("something new", 1) is hubfs.HubfsError
    assert classify("error: unexpected argument", 2) is hubfs.HubfsError


def test_token_is_not_on_the_daemons_command_line(hub, writable_dataset):
    with hubfs.mount(f"datasets/{writable_dataset}", write=True, token=hub.token, cache_dir=hub.cache_dir) as m:
        assert m.pid
        cmdline = Path(f"/proc/{m.pid}/cmdline").read_bytes()
        assert b"mount" in cmdline and m.path.encode() in cmdline  # the right process
        assert hub.token.encode() not in cmdline
        # nor in its environment (the binary hands it over on a pipe)
        assert hub.token.encode() not in Path(f"/proc/{m.pid}/environ").read_bytes()


def test_missing_binary_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HUBFS_BIN", "/nonexistent/hubfs")
    with pytest.raises(hubfs.BinaryNotFoundError, match="HUBFS_BIN"):
        hubfs.mount("demo/tiny-model")


def test_without_fuse(hub, tmp_path):
    """A container without /dev/fuse, for real: a mount namespace whose /dev is an empty tmpfs
    (plus /dev/null, which every container has)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a mount namespace here: {probe.stderr.decode().strip()}")
    code = textwrap.dedent(
        f"""
        import sys, hubfs
        try:
            hubfs.mount("demo/tiny-model", {str(tmp_path)!r}, cache_dir={str(hub.cache_dir)!r})
        except hubfs.FuseUnavailableError as e:
            print("FUSE-UNAVAILABLE", e)
            sys.exit(0)
        except Exception as e:
            print("OTHER", type(e).__name__, e)
            sys.exit(2)
        print("MOUNTED")
        sys.exit(1)
        """
    )
    env = dict(os.environ)
    pkg_parent = str(Path(hubfs.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    script = 'mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && exec "$0" -c "$1"'
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, sys.executable, code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "FUSE-UNAVAILABLE" in r.stdout and "cannot open /dev/fuse" in r.stdout, r.stdout


def test_mount_timeout_stops_the_detached_child(hub, tmp_path):
    """An unreachable endpoint makes a mount wait (up to --max-hub-wait); the call's timeout bounds
    it, and the mount process `mount --daemon` had started does not linger after it."""
    import time

    with pytest.raises(hubfs.HubfsTimeoutError, match="did not finish within 3s"):
        hubfs.mount("demo/tiny-model", tmp_path, endpoint="http://127.0.0.1:1", cache_dir=hub.cache_dir, timeout=3)

    def lingering() -> list:
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if str(tmp_path).encode() in argv and b"mount" in argv:
                    out.append(int(d))
        return out

    deadline = time.monotonic() + 15
    while lingering() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lingering() == []
    assert not os.path.ismount(tmp_path)
