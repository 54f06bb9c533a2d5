"""The audit record contract (being split into modules by job: see the next commit)."""

from hostcap_proto.audit.verify import *  # noqa: F403
