"""Exceptions raised when the ``hubfs`` binary fails.

The binary reports every failure as one line on stderr (``hubfs: <what went wrong>``) and a
non-zero exit status. :class:`HubfsError` carries that line and the status; the subclasses name
the failures a caller may want to handle differently (ask for a token, create the repo, fall back
to NFS, ...). They are told apart by the wording of that line, because the binary exits with 1 for
every error: see ``classify``.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

__all__ = [
    "HubfsError",
    "BinaryNotFoundError",
    "HubfsTimeoutError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "TokenRefusedError",
    "FuseUnavailableError",
    "MountpointError",
    "NotMountedError",
    "ReadOnlyMountError",
]


class HubfsError(Exception):
    """A ``hubfs`` command failed.

    ``message`` is the binary's own one-line explanation (without its ``hubfs:`` prefix),
    ``returncode`` its exit status (``None`` when it did not run or did not finish), ``command``
    the argv that ran (it never holds a token: tokens go through the environment) and ``stderr``
    everything it wrote to stderr. Any token the caller passed is replaced by ``***`` in all of them.
    """

    def __init__(
        self,
        message: str,
        *,
        returncode: Optional[int] = None,
        command: Optional[Sequence[str]] = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode
        self.command = list(command) if command is not None else None
        self.stderr = stderr

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, returncode={self.returncode!r})"


class BinaryNotFoundError(HubfsError):
    """No ``hubfs`` executable was found (``HUBFS_BIN``, the environment's scripts dir, ``PATH``)."""


class HubfsTimeoutError(HubfsError):
    """A ``hubfs`` command did not finish within its timeout (it was killed)."""


class RepoNotFoundError(HubfsError):
    """The Hub has no such repo, or it is private and no valid token was given.

    The Hub answers both the same way (404), so they cannot be told apart.
    """


class RevisionNotFoundError(HubfsError):
    """The repo exists but has no such branch, tag or commit."""


class TokenRefusedError(HubfsError):
    """The Hub rejected the token (401): wrong, expired or revoked."""


class FuseUnavailableError(HubfsError):
    """``/dev/fuse`` could not be opened: no FUSE in this kernel or container, or not root.

    Serving over NFS (``nfs=True``) does not need it.
    """


class MountpointError(HubfsError):
    """The mountpoint does not exist, is not a directory, or something is already mounted there."""


class NotMountedError(HubfsError):
    """The directory is not a running hubfs mount."""


class ReadOnlyMountError(HubfsError):
    """A writable-mount operation (``sync``) was asked of a read-only mount."""


# (pattern searched in the binary's message, class): the first match wins. These are the binary's
# own wordings (src/process/session.rs, src/commands/unmount.rs, src/process/registry.rs,
# src/process/control.rs); a message matching none stays a plain HubfsError.
_PATTERNS = (
    (re.compile(r"the Hub rejected the token"), TokenRefusedError),
    (re.compile(r"cannot open /dev/fuse"), FuseUnavailableError),
    (re.compile(r"\bnot found, or it is private\b"), RepoNotFoundError),
    (re.compile(r"\brevision \".*\" (of .* )?not found\b"), RevisionNotFoundError),
    (re.compile(r"\bmountpoint .* (does not exist|is not a directory|is busy)"), MountpointError),
    (re.compile(r"is not a (running )?hubfs mount"), NotMountedError),
    (re.compile(r"is a read-only mount: there is nothing to commit"), ReadOnlyMountError),
)


def classify(message: str) -> type[HubfsError]:
    """The most specific :class:`HubfsError` subclass for one of the binary's messages."""
    for pattern, cls in _PATTERNS:
        if pattern.search(message):
            return cls
    return HubfsError
