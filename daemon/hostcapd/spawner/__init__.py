"""The spawner: the one single-threaded process that creates sandboxed children.

It runs as a fresh interpreter (`python -m hostcapd.spawner`) that never
imports gRPC, is a child subreaper, reaps with wait4 and reports exits. The
daemon talks to it over a SOCK_SEQPACKET socketpair (`channel`); fds cross
with SCM_RIGHTS. `client.SpawnerClient` is the daemon's side.
"""
