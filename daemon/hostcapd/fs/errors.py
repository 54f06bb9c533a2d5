"""The refusal for a kernel error met by a file operation.

The worker raises `hostcapd.errors.Refusal`, as every mechanism does; the
daemon puts its reason on the wire unchanged. Messages are secret-free and
never name a path outside the tenant's roots (nor a symlink's target).
"""

from __future__ import annotations

import errno
import os

from hostcapd.errors import INTERNAL, Refusal


def refusal_from_errno(error: OSError, what: str) -> Refusal:
    """The refusal for a kernel error met while doing `what` ("open", "write")
    on a path that is lexically beneath a root.

    EXDEV and ELOOP come from openat2's resolve rules: since `..` was already
    resolved lexically and found inside, only a symlink can have caused them."""
    code = error.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return Refusal("NOT_FOUND", f"{what}: no such file or directory")
    if code in (errno.EXDEV, errno.ELOOP):
        return Refusal(
            "SYMLINK_REFUSED",
            f"{what}: a symlink on the path leads outside the root or is not followed",
        )
    if code in (errno.EACCES, errno.EPERM):
        return Refusal(
            "ACCESS_DENIED", f"{what}: permission denied for the tenant's run-as identity"
        )
    if code == errno.EROFS:
        return Refusal("READ_ONLY_TIER", f"{what}: the file system is read-only")
    if code == errno.EFBIG:
        return Refusal(
            "TOO_LARGE", f"{what}: the content is larger than the file size limit (EFBIG)"
        )
    if code in (errno.ENOSPC, errno.EDQUOT):
        return Refusal(
            "QUOTA_EXCEEDED",
            f"{what}: no space left for the content ({errno.errorcode[code]}): "
            "the tenant's disk budget or its volume is full",
        )
    if code == errno.EEXIST:
        return Refusal("CONFLICT", f"{what}: the file already exists")
    if code in (errno.ENAMETOOLONG, errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.EINVAL):
        return Refusal("INVALID_ARGUMENT", f"{what}: {os.strerror(code).lower()}")
    if code == errno.EAGAIN:
        return Refusal("CONFLICT", f"{what}: the path changed while it was resolved; retry")
    return Refusal(INTERNAL, f"{what}: {errno.errorcode.get(code or 0, 'unknown error')}")
