"""The jailed file capability: FsService beneath a tenant's roots.

    from hostcapd.fs import start_fs_service
    runtime = await start_fs_service(tenant, audit)   # FsRuntime
    fs_pb2_grpc.add_FsServiceServicer_to_server(runtime.servicer, server)
    await runtime.close()

Modules, from the kernel up (its calls, openat2, renameat2, landlock restrict,
are `hostcapd.linux`'s): `scope` (lexical location of a path beneath a root), `policy`
(protected and secret patterns), `content` (text or binary, media type),
`ops` (the operations on root fds), `worker` (the per-tenant process that
runs them as the tenant, confined), `protocol` (its frames), `process` (the
front-end's handle on it), `servicer` (gRPC), `runtime` (start and stop).

The worker is started as `python -m hostcapd.fs.worker`, which imports this
package: so the gRPC side is imported lazily here, and the worker process
never loads gRPC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hostcapd.fs.process import FsWorkerUnavailable
    from hostcapd.fs.runtime import FsRuntime, start_fs_service

__all__ = ["FsRuntime", "FsWorkerUnavailable", "start_fs_service"]


def __getattr__(name: str) -> Any:
    if name in ("FsRuntime", "start_fs_service"):
        from hostcapd.fs import runtime

        return getattr(runtime, name)
    if name == "FsWorkerUnavailable":
        from hostcapd.fs import process

        return process.FsWorkerUnavailable
    raise AttributeError(f"module 'hostcapd.fs' has no attribute {name!r}")
