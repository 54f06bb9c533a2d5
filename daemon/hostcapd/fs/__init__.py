"""The jailed file capability's mechanism, beneath a tenant's roots.

Modules, from the kernel up: `scope` (lexical location of a path beneath a
root), `policy` (protected and secret patterns), `content` (text or binary,
media type), `errors` (the refusal for a kernel error), `ops` (the operations
on root fds), `worker` (the per-tenant process that runs them as the tenant,
confined), `protocol` (its frames), `client` (the daemon's handle on the
worker, as `hostcapd.spawner.client` is on the spawner), `direct` (the reads
the front-end asks of the worker directly, decision 0034) and
`direct_worker` (the worker's end of them). The service side is in
`hostcapd.service` (`fs_service`, `fs_runtime`, `fs_reports`).

The worker is started as `python -m hostcapd.fs.worker`, which imports this
package: nothing here imports gRPC, protobuf or pydantic, and the worker
process never loads them.
"""
