"""``hubfs.mount()``, :class:`Mount` and ``hubfs.mounts()``: the ``hubfs`` CLI as Python calls.

A mount is a ``hubfs mount --daemon`` process: it keeps running after the call returns (and after
this Python exits, unless :meth:`Mount.unmount` or the ``with`` block ends it), logs to a file, and
is listed by ``hubfs status`` like one started from a shell.
"""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time
from typing import Any, Dict, List, Optional, TypedDict, Union

from . import _run
from .errors import HubfsError, HubfsTimeoutError, NotMountedError

__all__ = ["Mount", "MountStatus", "mount", "mounts", "DEFAULT_MOUNT_TIMEOUT"]

PathLike = Union[str, "os.PathLike[str]"]

#: Seconds ``mount()`` waits for the mount to be usable. A mount waits for the Hub when a request
#: window is spent or the Hub is down (``--max-hub-wait``, 10 minutes by default); this bounds the
#: call instead; on a timeout the mount process is stopped too.
DEFAULT_MOUNT_TIMEOUT = 300.0
#: Seconds ``sync()`` waits: everything pending committed, within the Hub's commit rate limit.
DEFAULT_SYNC_TIMEOUT = 900.0
#: Seconds ``unmount()`` waits: a writable mount drains pending commits (``--drain-timeout``, 60 s).
DEFAULT_UNMOUNT_TIMEOUT = 300.0


class MountStatus(TypedDict, total=False):
    """One running mount as ``hubfs status --json`` describes it (the main keys; others pass through)."""

    pid: int
    repo: str
    revision: Optional[str]
    commit: str
    mountpoint: str
    frontend: str
    mode: str
    nfs_addr: Optional[str]
    log_file: Optional[str]
    cache_dir: str
    writable: Optional[Dict[str, Any]]
    memory: Optional[Dict[str, Any]]
    hub: Optional[List[Dict[str, Any]]]


_MOUNTED = re.compile(r"^mounted (?P<repo>.+)@(?P<commit>\S+) at (?P<path>.+) \(pid (?P<pid>\d+)\)$")
#: ``hubfs overlay commit``'s answer lines.
_PUBLISHED = re.compile(r"^(?:committed |commit )(?P<commit>[0-9a-f]{40})\b")
_OPENED = re.compile(r"^opened pull request #\d+ on \S+: (?P<url>\S+)$")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _option_args(options: Dict[str, Any]) -> List[str]:
    """``readahead_kib=128`` → ``--readahead-kib 128``; ``True`` → the bare flag; ``False``/``None``
    → nothing; a list or tuple → the flag once per item."""
    out: List[str] = []
    for name, value in options.items():
        if name in ("daemon", "token", "help"):
            raise TypeError(f"mount() does not take {name}= as an option")
        if value is None or value is False:
            continue
        if value is True:
            out.append(_flag(name))
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [_flag(name), os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            out += [_flag(name), os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return out


def _statuses(cache_dir: Optional[PathLike] = None, timeout: float = _run.QUICK_TIMEOUT) -> List[MountStatus]:
    args = ["status", "--json"]
    if cache_dir is not None:
        args += ["--cache-dir", os.fspath(cache_dir)]
    out = _run.run(args, timeout=timeout).stdout
    try:
        data = json.loads(out)
    except ValueError as e:
        raise HubfsError(f"`hubfs status --json` printed something that is not JSON: {e}") from None
    if not isinstance(data, list):
        raise HubfsError("`hubfs status --json` did not print a list")
    return data


def mounts(cache_dir: Optional[PathLike] = None, *, timeout: float = _run.QUICK_TIMEOUT) -> List[MountStatus]:
    """Every running hubfs mount of this user (``hubfs status --json``), whoever started it.

    ``cache_dir`` keeps only the mounts using that cache dir.
    """
    return _statuses(cache_dir, timeout)


def _stop_detached_child(child_args: List[str]) -> None:
    """Stops the mount process a killed ``mount --daemon`` left behind: the one whose arguments are
    ``child_args`` (they name our mountpoint) and whose environment marks it as that child."""
    want = [a.encode() for a in child_args]
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[-1:] == [b""]:
                argv = argv[:-1]
            if argv[1:] != want:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"HUBFS_DAEMON_CHILD=1" not in f.read().split(b"\0"):
                    continue
            # SIGTERM: one still waiting for the Hub stops at once, one that mounted meanwhile
            # unmounts and drains; SIGKILL after a grace time if it is stuck all the same.
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                time.sleep(0.1)
                if not os.path.exists(f"/proc/{pid}/cmdline") or _is_zombie(pid):
                    break
            else:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def _same_dir(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


class Mount:
    """A running ``hubfs`` mount started by :func:`mount`.

    Use it as a context manager to unmount at the end of the block. It is not unmounted when the
    object is garbage-collected: a daemon mount is meant to outlive its starter unless told otherwise.
    """

    def __init__(
        self,
        repo: str,
        path: str,
        *,
        commit: Optional[str] = None,
        pid: Optional[int] = None,
        log_file: Optional[str] = None,
        writable: bool = False,
        owns_dir: bool = False,
    ) -> None:
        #: The repo as given to ``mount()`` (``ns/name``, ``datasets/ns/name``, ``hf://…``).
        self.repo = repo
        #: The absolute mountpoint.
        self.path = path
        #: The pid of the mount process.
        self.pid = pid
        #: The mount's log file (its errors after it started are there, not raised).
        self.log_file = log_file
        #: Whether it was mounted with ``write=True``.
        self.writable = writable
        self._commit = commit
        self._owns_dir = owns_dir
        self._unmounted = False

    @property
    def commit(self) -> Optional[str]:
        """The commit id the mount shows (the revision resolved when it mounted)."""
        if self._commit is None and not self._unmounted:
            try:
                self._commit = self.status().get("commit")
            except HubfsError:
                return None
        return self._commit

    @property
    def mounted(self) -> bool:
        """Whether :meth:`unmount` has not been called yet (it does not ask the process)."""
        return not self._unmounted

    def status(self, *, timeout: float = _run.QUICK_TIMEOUT) -> MountStatus:
        """This mount's entry of ``hubfs status --json`` (for writable mounts: files waiting,
        last commit, upload errors; memory; the Hub's request windows).

        Raises :class:`NotMountedError` if it is no longer running.
        """
        for s in _statuses(timeout=timeout):
            if (self.pid is None or s.get("pid") == self.pid) and _same_dir(str(s.get("mountpoint", "")), self.path):
                return s
        raise NotMountedError(f"{self.path} is not a running hubfs mount (`hubfs status` lists them)")

    def sync(self, *, timeout: float = DEFAULT_SYNC_TIMEOUT) -> None:
        """Returns once everything closed, renamed or deleted in this writable mount is committed
        (``hubfs sync``). Raises :class:`HubfsError` with the reason if something cannot be, and
        :class:`ReadOnlyMountError` on a read-only mount, which has nothing to commit."""
        _run.run(["sync", self.path], timeout=timeout)

    def diff(self, *, timeout: float = DEFAULT_SYNC_TIMEOUT) -> List[Dict[str, Any]]:
        """An overlay mount's local changes (``hubfs overlay diff --json``): one dict per change,
        with ``kind`` (``added``, ``modified``, ``deleted``, ``renamed``, ``local``), ``path`` and,
        where they apply, ``from``, ``size``, ``hub_size``, ``conflict`` and ``note``."""
        proc = _run.run(["overlay", "diff", self.path, "--json"], timeout=timeout)
        return list(json.loads(proc.stdout).get("changes", []))

    def publish(
        self,
        message: str,
        *,
        pr: bool = False,
        branch: Optional[str] = None,
        description: Optional[str] = None,
        force: bool = False,
        token: Optional[str] = None,
        timeout: float = DEFAULT_SYNC_TIMEOUT,
    ) -> Dict[str, Optional[str]]:
        """Publishes an overlay mount's changes as one commit, or one pull request with ``pr=True``
        (``hubfs overlay commit``). ``token`` (default: the usual ``HF_TOKEN`` and token file) must
        be allowed to write; it reaches the binary through its environment. Returns ``commit`` and,
        for a pull request, ``pr_url``; both ``None`` when there was nothing to publish."""
        args = ["overlay", "commit", self.path, "-m", message]
        if pr:
            args.append("--pr")
        if branch is not None:
            args += ["--branch", branch]
        if description is not None:
            args += ["--description", description]
        if force:
            args.append("--force")
        proc = _run.run(args, timeout=timeout, env=_run.child_env(token, None), token=token)
        out: Dict[str, Optional[str]] = {"commit": None, "pr_url": None}
        for line in proc.stdout.splitlines():
            m = _PUBLISHED.match(line.strip())
            if m:
                out["commit"] = m.group("commit")
            m = _OPENED.match(line.strip())
            if m:
                out["pr_url"] = m.group("url")
        return out

    def reset(self, *paths: PathLike, timeout: float = DEFAULT_SYNC_TIMEOUT) -> None:
        """Drops an overlay mount's changes at and below ``paths`` (repo paths, or paths inside the
        mount), or every change when none is given (``hubfs overlay reset``)."""
        _run.run(["overlay", "reset", self.path, *[os.fspath(p) for p in paths]], timeout=timeout)

    def unmount(self, *, timeout: float = DEFAULT_UNMOUNT_TIMEOUT) -> None:
        """Unmounts and waits until the mount process has committed what it could and exited
        (``hubfs unmount``). Calling it again, or after the mount went away by other means, does
        nothing. A temporary mountpoint made by ``mount(path=None)`` is removed."""
        if self._unmounted:
            return
        try:
            _run.run(["unmount", self.path], timeout=timeout)
        except NotMountedError:
            pass  # already gone (unmounted from a shell, or the process was killed)
        self._unmounted = True
        if self._owns_dir:
            try:
                os.rmdir(self.path)
            except OSError:
                pass

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        state = "unmounted" if self._unmounted else f"pid {self.pid}"
        commit = f"@{self._commit[:12]}" if self._commit else ""
        mode = "rw" if self.writable else "ro"
        return f"<hubfs.Mount {self.repo}{commit} at {self.path} ({mode}, {state})>"


def mount(
    repo: str,
    path: Optional[PathLike] = None,
    *,
    revision: Optional[str] = None,
    write: bool = False,
    overlay: Union[bool, PathLike] = False,
    token: Optional[str] = None,
    cache_dir: Optional[PathLike] = None,
    endpoint: Optional[str] = None,
    timeout: float = DEFAULT_MOUNT_TIMEOUT,
    **options: Any,
) -> Mount:
    """Mounts ``repo`` at ``path`` with ``hubfs mount --daemon`` and returns once it is usable.

    ``repo`` is what the CLI takes: ``ns/name`` (a model), ``datasets/ns/name``,
    ``buckets/ns/name``, ``…@revision`` or an ``hf://`` URL of a folder. ``path=None`` mounts on a
    new temporary directory, removed again by :meth:`Mount.unmount`.

    ``token`` and ``endpoint`` default to what huggingface_hub would use (``HF_TOKEN``,
    ``HF_TOKEN_PATH``, ``$HF_HOME/token``, ``HF_ENDPOINT``), which the binary reads itself. A
    token given here reaches the binary through its environment, never its command line.

    ``overlay=True`` keeps every change in a local layer (a read token is enough) until
    :meth:`Mount.publish`; a path keeps the layer there (``--overlay=UPPER``).

    Every other keyword is a ``hubfs mount`` flag: ``readahead_kib=128`` is ``--readahead-kib 128``,
    ``nfs=True`` is ``--nfs``, ``False`` or ``None`` leave the flag out (``hubfs mount --help``).

    Raises :class:`HubfsError` (or the subclass naming the failure) with the binary's message.
    """
    owns_dir = path is None
    mountpoint = tempfile.mkdtemp(prefix="hubfs-") if path is None else os.path.abspath(os.fspath(path))
    args: List[str] = ["mount"]
    if revision is not None:
        args += ["--revision", revision]
    if write:
        args.append("--write")
    if overlay is True:
        args.append("--overlay")
    elif overlay:
        args.append("--overlay=" + os.path.abspath(os.fspath(overlay)))
    if cache_dir is not None:
        args += ["--cache-dir", os.path.abspath(os.fspath(cache_dir))]
    args += _option_args(options)
    args += ["--daemon", "--", repo, mountpoint]
    try:
        proc = _run.run(args, timeout=timeout, env=_run.child_env(token, endpoint), token=token)
    except BaseException as e:
        if isinstance(e, (HubfsTimeoutError, KeyboardInterrupt)):
            # `mount --daemon` was killed, but the mount process it started lives in a session of
            # its own and would go on waiting for the Hub, and mount later: stop it too.
            _stop_detached_child([a for a in args if a != "--daemon"])
        if owns_dir:
            try:
                os.rmdir(mountpoint)
            except OSError:
                pass
        raise
    commit = pid = log_file = None
    for line in proc.stdout.splitlines():
        m = _MOUNTED.match(line.strip())
        if m:
            commit, pid = m.group("commit"), int(m.group("pid"))
        elif line.startswith("log: "):
            log_file = line[len("log: ") :].strip()
    return Mount(
        repo,
        mountpoint,
        commit=commit,
        pid=pid,
        log_file=log_file,
        writable=bool(write) or bool(overlay),
        owns_dir=owns_dir,
    )
