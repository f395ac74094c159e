"""hubfs: mount Hugging Face Hub repos as local directories, from Python.

>>> import hubfs
>>> with hubfs.mount("openai-community/gpt2") as m:
...     print(open(m.path + "/config.json").read())

The package drives the ``hubfs`` executable installed with it (``HUBFS_BIN`` overrides it): a
mount is a ``hubfs mount --daemon`` process, so it behaves exactly as one started from a shell and
``hubfs status`` / ``hubfs unmount`` see it. See docs/PYTHON.md.
"""

from __future__ import annotations

from ._run import find_binary
from .errors import (
    BinaryNotFoundError,
    FuseUnavailableError,
    HubfsError,
    HubfsTimeoutError,
    HubUnavailableError,
    MountpointError,
    NotMountedError,
    ReadOnlyMountError,
    RepoNotFoundError,
    RevisionNotFoundError,
    TokenRefusedError,
)
from .mount import Mount, MountStatus, mount, mounts

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    try:
        __version__ = _version("hubfs")
    except PackageNotFoundError:  # run from a checkout without installing
        __version__ = "0+unknown"
except ImportError:  # pragma: no cover
    __version__ = "0+unknown"

__all__ = [
    "BinaryNotFoundError",
    "FuseUnavailableError",
    "HubfsError",
    "HubfsTimeoutError",
    "HubUnavailableError",
    "Mount",
    "MountStatus",
    "MountpointError",
    "NotMountedError",
    "ReadOnlyMountError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "TokenRefusedError",
    "__version__",
    "find_binary",
    "mount",
    "mounts",
]
