"""The sandbox: one module per mechanism, each turning the tenant's profile
into plain values (flags, a landlock ruleset fd, a compiled seccomp program,
cgroup paths) that the C set-up applies in the child. Nothing here knows of
gRPC or wire messages."""
