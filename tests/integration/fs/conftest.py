"""Fixtures of the FsService integration tests: each test runs against the
real daemon and against the in-process service (see fs_endpoint)."""

from fs_endpoint import endpoint, fs_daemon, stub

__all__ = ["endpoint", "fs_daemon", "stub"]
