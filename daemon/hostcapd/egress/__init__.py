"""Egress by domain: a tenant's rules (`rules`), the unprivileged proxy
that applies them (`proxy`, `python -m hostcapd.egress`), and the daemon's
handle on it (`supervisor`)."""
