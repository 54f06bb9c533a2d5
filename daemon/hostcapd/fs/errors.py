"""Refusals of a file operation, as plain values (no gRPC here).

The worker raises `FsRefusal(reason, message)`; the reason is the name of a
`hostcap.v1.ErrorReason` value, which the front-end puts on the wire
unchanged. Messages are secret-free and never name a path outside the
tenant's roots (nor a symlink's target).
"""

from __future__ import annotations

import errno
import os

PATH_ESCAPES_ROOT = "PATH_ESCAPES_ROOT"
SYMLINK_REFUSED = "SYMLINK_REFUSED"
PROTECTED_PATH = "PROTECTED_PATH"
SECRET_PATH = "SECRET_PATH"
READ_ONLY_TIER = "READ_ONLY_TIER"
NOT_FOUND = "NOT_FOUND"
TOO_LARGE = "TOO_LARGE"
LIMIT_INVALID = "LIMIT_INVALID"
QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
CONFLICT = "CONFLICT"
AUDIT_UNAVAILABLE = "AUDIT_UNAVAILABLE"
PROTECTION_UNAVAILABLE = "PROTECTION_UNAVAILABLE"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
#: Not a wire reason: an unexpected failure, sent as gRPC INTERNAL.
INTERNAL = "INTERNAL"

#: The kernel refused the run-as identity (EACCES / EPERM). The wire has no
#: reason of its own for it yet; see `hostcapd.fs.servicer.access_denied_reason`.
ACCESS_DENIED = "ACCESS_DENIED"


class FsRefusal(Exception):
    """A file operation refused or failed with a typed reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"FsRefusal({self.reason!r}, {self.message!r})"


def refusal_from_errno(error: OSError, what: str) -> FsRefusal:
    """The refusal for a kernel error met while doing `what` ("open", "write")
    on a path that is lexically beneath a root.

    EXDEV and ELOOP come from openat2's resolve rules: since `..` was already
    resolved lexically and found inside, only a symlink can have caused them."""
    code = error.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return FsRefusal(NOT_FOUND, f"{what}: no such file or directory")
    if code in (errno.EXDEV, errno.ELOOP):
        return FsRefusal(
            SYMLINK_REFUSED,
            f"{what}: a symlink on the path leads outside the root or is not followed",
        )
    if code in (errno.EACCES, errno.EPERM):
        return FsRefusal(
            ACCESS_DENIED, f"{what}: permission denied for the tenant's run-as identity"
        )
    if code == errno.EROFS:
        return FsRefusal(READ_ONLY_TIER, f"{what}: the file system is read-only")
    if code == errno.EFBIG:
        return FsRefusal(
            TOO_LARGE, f"{what}: the content is larger than the file size limit (EFBIG)"
        )
    if code in (errno.ENOSPC, errno.EDQUOT):
        return FsRefusal(
            QUOTA_EXCEEDED,
            f"{what}: no space left for the content ({errno.errorcode[code]}): "
            "the tenant's disk budget or its volume is full",
        )
    if code == errno.EEXIST:
        return FsRefusal(CONFLICT, f"{what}: the file already exists")
    if code in (errno.ENAMETOOLONG, errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.EINVAL):
        return FsRefusal(INVALID_ARGUMENT, f"{what}: {os.strerror(code).lower()}")
    if code == errno.EAGAIN:
        return FsRefusal(CONFLICT, f"{what}: the path changed while it was resolved; retry")
    return FsRefusal(INTERNAL, f"{what}: {errno.errorcode.get(code or 0, 'unknown error')}")
