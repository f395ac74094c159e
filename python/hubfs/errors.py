"""Exceptions raised when the ``hubfs`` binary fails.

The binary reports every failure as one line on stderr (``hubfs: <what went wrong>``) and a
non-zero exit status. :class:`HubfsError` carries that line and the status; the subclasses name
the failures a caller may want to handle differently (ask for a token, create the repo, fall back
to NFS, ...). They are told apart by the exit status, which is distinct for each of them (the
table of ``hubfs --help``), and, for a status that names none (1) or a binary older than those
statuses, by the wording of that line: see ``classify``.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Sequence, Type

__all__ = [
    "HubfsError",
    "BinaryNotFoundError",
    "HubfsTimeoutError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "TokenRefusedError",
    "FuseUnavailableError",
    "MountpointError",
    "HubUnavailableError",
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
    """The Hub has no such repo, or it is private and no valid token was given (exit status 3).

    The Hub answers both the same way (404), so they cannot be told apart.
    """


class RevisionNotFoundError(HubfsError):
    """The repo exists but has no such branch, tag or commit (exit status 4)."""


class TokenRefusedError(HubfsError):
    """The Hub rejected the token (401: wrong, expired or revoked), or the token may not do what
    was asked (403, a gated repo, a writable mount without a token that may write): exit status 5."""


class FuseUnavailableError(HubfsError):
    """``/dev/fuse`` could not be opened: no FUSE in this kernel or container, or not root (exit
    status 6).

    Serving over NFS (``nfs=True``) does not need it.
    """


class MountpointError(HubfsError):
    """The mountpoint does not exist, is not a directory, or something is already mounted there
    (exit status 7)."""


class HubUnavailableError(HubfsError):
    """The Hub could not be reached, or kept failing, past every retry and the mount's
    ``max_hub_wait``: connection refused, DNS, timeouts, 5xx, 429 (exit status 8)."""


class NotMountedError(HubfsError):
    """The directory is not a running hubfs mount."""


class ReadOnlyMountError(HubfsError):
    """A writable-mount operation (``sync``) was asked of a read-only mount."""


#: The binary's exit status for each subclass (``hubfs --help`` lists them). 1 is any other
#: failure, 2 a command line the binary refused; neither names a subclass.
EXIT_CODES: Dict[int, Type[HubfsError]] = {
    3: RepoNotFoundError,
    4: RevisionNotFoundError,
    5: TokenRefusedError,
    6: FuseUnavailableError,
    7: MountpointError,
    8: HubUnavailableError,
}

# (pattern searched in the binary's message, class): the first match wins. These are the binary's
# own wordings (src/process/session.rs, src/commands/unmount.rs, src/process/registry.rs,
# src/process/control.rs); a message matching none stays a plain HubfsError. They decide when the
# exit status names no subclass: NotMountedError and ReadOnlyMountError have none of their own.
_PATTERNS = (
    (re.compile(r"the Hub rejected the token"), TokenRefusedError),
    (re.compile(r"cannot open /dev/fuse"), FuseUnavailableError),
    (re.compile(r"\bnot found, or it is private\b"), RepoNotFoundError),
    (re.compile(r"\brevision \".*\" (of .* )?not found\b"), RevisionNotFoundError),
    (re.compile(r"\bmountpoint .* (does not exist|is not a directory|is busy)"), MountpointError),
    (re.compile(r"is not a (running )?hubfs mount"), NotMountedError),
    (re.compile(r"is a read-only mount: there is nothing to commit"), ReadOnlyMountError),
)


def classify(message: str, returncode: Optional[int] = None) -> type[HubfsError]:
    """The most specific :class:`HubfsError` subclass for a failure of the binary.

    The exit status decides when it names a subclass (:data:`EXIT_CODES`); otherwise (1, or
    ``None`` when the status is not known) the wording of the message does.
    """
    if returncode is not None and returncode in EXIT_CODES:
        return EXIT_CODES[returncode]
    for pattern, cls in _PATTERNS:
        if pattern.search(message):
            return cls
    return HubfsError
