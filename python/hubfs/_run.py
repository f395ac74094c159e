"""Finding the ``hubfs`` binary and running it.

Every call has a timeout, and a token is only ever handed over in the child's environment
(``HF_TOKEN``): argv is world-readable through ``/proc/PID/cmdline`` and ``ps``, the environment
is not. ``hubfs mount --daemon`` in turn hands it to the mount process on a pipe and removes it
from that process's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from typing import Dict, List, Mapping, Optional, Sequence

from .errors import BinaryNotFoundError, HubfsError, HubfsTimeoutError, classify

__all__ = ["find_binary", "run"]

#: Seconds a quick command (``status``, ``--version``) may take.
QUICK_TIMEOUT = 60.0

_EXE = "hubfs.exe" if os.name == "nt" else "hubfs"


def _candidates() -> List[str]:
    """Where a wheel's ``hubfs`` is, most specific first.

    Next to ``sys.executable`` comes first because it is the environment running this code even
    when ``sysconfig`` describes another scheme (a venv created from a Python whose scripts dir
    differs); then the scheme's scripts dir, then the user scheme's (``pip install --user``).
    """
    dirs = [os.path.dirname(sys.executable)]
    for scheme in (None, f"{os.name}_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if d:
            dirs.append(d)
    seen: List[str] = []
    for d in dirs:
        p = os.path.join(d, _EXE)
        if p not in seen:
            seen.append(p)
    return seen


def _executable(p: str) -> bool:
    return os.path.isfile(p) and os.access(p, os.X_OK)


def find_binary() -> str:
    """The ``hubfs`` executable this package drives.

    ``HUBFS_BIN`` if set (a development build, say), else the one installed with this package
    (the environment's scripts dir), else the first on ``PATH``.
    """
    env = os.environ.get("HUBFS_BIN")
    if env:
        if _executable(env):
            return env
        raise BinaryNotFoundError(f"HUBFS_BIN={env} is not an executable file")
    for p in _candidates():
        if _executable(p):
            return p
    found = shutil.which(_EXE)
    if found:
        return found
    raise BinaryNotFoundError(
        "the hubfs executable was not found: looked for HUBFS_BIN, "
        + ", ".join(_candidates())
        + " and PATH (reinstall the wheel, or set HUBFS_BIN to a hubfs binary)"
    )


def child_env(token: Optional[str] = None, endpoint: Optional[str] = None) -> Dict[str, str]:
    """This process's environment, with ``HF_TOKEN`` / ``HF_ENDPOINT`` set when given.

    When they are not given the binary resolves them itself as huggingface_hub does
    (``HF_TOKEN``, ``HF_TOKEN_PATH``, ``$HF_HOME/token``, ``HF_ENDPOINT``), so nothing is set.
    """
    env = dict(os.environ)
    if token is not None:
        env["HF_TOKEN"] = token
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    return env


def _redact(text: str, secrets: Sequence[Optional[str]]) -> str:
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


def error_line(stderr: str) -> str:
    """The binary's one-line message: the last ``hubfs: …`` line of stderr, else its last line.

    Earlier lines are progress notes (``still mounting after 10s…``) or log lines.
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("hubfs: "):
            return ln[len("hubfs: ") :]
        if ln.startswith("error: "):  # clap's usage errors
            return ln
    return lines[-1] if lines else ""


def run(
    args: Sequence[str],
    *,
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
    token: Optional[str] = None,
) -> subprocess.CompletedProcess[str]:
    """Runs ``hubfs ARGS`` and returns its output, or raises the :class:`HubfsError` it means.

    ``token`` is only used to scrub it from what is raised (it is never put in ``args``).
    """
    argv = [find_binary(), *args]
    secrets = [token, os.environ.get("HF_TOKEN"), (env or {}).get("HF_TOKEN")]
    try:
        proc = subprocess.run(
            argv,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        err = _redact(err, secrets)
        last = error_line(err)
        raise HubfsTimeoutError(
            f"`hubfs {' '.join(args[:1])}` did not finish within {timeout:g}s" + (f": {last}" if last else ""),
            command=argv,
            stderr=err,
        ) from None
    except OSError as e:
        raise BinaryNotFoundError(f"could not run {argv[0]}: {e}", command=argv) from None
    if proc.returncode != 0:
        err = _redact(proc.stderr, secrets)
        msg = error_line(err) or f"`hubfs {' '.join(args[:1])}` exited with status {proc.returncode}"
        raise classify(msg, proc.returncode)(msg, returncode=proc.returncode, command=argv, stderr=err)
    return proc
