"""The child's environment: the tenant's base variables plus declared ones
whose names the tenant allows. Nothing of the daemon's own environment is
ever copied: the result is built from the config and the request only."""

from __future__ import annotations

from collections.abc import Mapping

from hostcapd.config import _ENV_NAME, FORBIDDEN_ENV, Tenant
from hostcapd.errors import Refusal

MAX_ENV_BYTES = 256 * 1024


def build(tenant: Tenant, declared: Mapping[str, str]) -> dict[str, str]:
    allowed = set(tenant.env_allowlist)
    env = dict(tenant.env)
    size = 0
    for name, value in declared.items():
        if not _ENV_NAME.match(name) or FORBIDDEN_ENV.match(name) or name not in allowed:
            raise Refusal(
                "ENV_NOT_ALLOWED", f"environment variable {name!r} is not allowed for this tenant"
            )
        if "\0" in value:
            raise Refusal("INVALID_ARGUMENT", f"environment variable {name!r} contains a NUL byte")
        size += len(name) + len(value) + 2
        if size > MAX_ENV_BYTES:
            raise Refusal("TOO_LARGE", f"declared environment exceeds {MAX_ENV_BYTES} bytes")
        env[name] = value
    if tenant.network_mode == "proxy":
        # Last: the way out is the proxy's listener, whatever was declared.
        from hostcapd.egress.supervisor import proxy_environment

        env.update(proxy_environment())
    return env


def encode(env: Mapping[str, str]) -> list[bytes]:
    return [f"{k}={v}".encode() for k, v in env.items()]
