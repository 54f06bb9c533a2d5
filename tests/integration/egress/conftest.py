"""The egress tests' fixtures (egress_support.py)."""

from egress_support import origins, proxy_daemon

__all__ = ["origins", "proxy_daemon"]
