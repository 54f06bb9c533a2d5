"""The egress arm over hostcapd: `http_request` through the tenant's egress
proxy, the same way a command's traffic goes.

    egress = SpawnEgress(host.process)            # when capabilities say network.mode = "proxy"
    response = await egress.fetch(EgressRequest(method="GET", url="https://pypi.org/simple/"))

Each fetch is one sandboxed `curl` spawn of the tenant: its only way out is
the loopback listener of its egress proxy, so the tenant's rules decide and
the daemon audits the connection (`network.connect`) beside the spawn's
exec and exit. The engine's `allowed_domains` has already been checked by
then (the tool's guardrail): both must allow, so the narrower wins. A
refusal by the tenant's rules is `ToolPolicyError("egress_rule_denied")`
with the proxy's reason; one by the engine's list is `domain_not_allowed`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from hostcap.errors import HostError, ToolPolicyError
from hostcap.host import EgressRequest, EgressResponse, ProcessCapability, SpawnOptions

#: The header the egress proxy puts on a refusal (hostcapd.egress.proxy).
REFUSAL_HEADER = "x-hostcap-refusal"
_MARK = "@@hostcap-egress@@"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
#: Seconds a fetch may take, end to end.
TIMEOUT_S = 60
#: Largest response body kept.
MAX_BODY = 8 * 1024 * 1024


class SpawnEgress:
    """EgressCapability over the process arm: `curl` in a proxy-mode spawn."""

    def __init__(self, process: ProcessCapability, labels: Mapping[str, str] | None = None) -> None:
        self._process = process
        self._labels = dict(labels or {"hostcap.arm": "egress"})

    async def fetch(self, request: EgressRequest) -> EgressResponse:
        args = [
            "-sS", "-v", "--proto", "=https", "--max-time", str(TIMEOUT_S),
            "--max-filesize", str(MAX_BODY), "-o", "-",
            "-w", f"%{{stderr}}\n{_MARK}%{{http_code}} %{{content_type}}\n{_MARK}%{{header_json}}\n",
        ]  # fmt: skip
        if request.method == "HEAD":
            args.append("--head")
        else:
            args += ["-X", request.method]
        for name, value in request.headers.items():
            if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} is not a valid HTTP header")
            args += ["-H", f"{name}: {value}"]
        stdin = None
        if request.body is not None:
            args += ["--data-binary", "@-"]
            stdin = request.body.encode()
        args += ["--", request.url]
        result = await self._process.spawn(
            "curl", args, {}, SpawnOptions(labels=self._labels, stdin=stdin)
        )
        refusal = _refusal(result.stderr)
        if refusal is not None:
            raise ToolPolicyError("egress_rule_denied", tool_id="http_request", detail=refusal)
        status, media_type, headers = _meta(result.stderr)
        if result.exit_code != 0 or status == 0:
            last = [line for line in result.stderr.splitlines() if line.startswith("curl:")]
            raise HostError("HOST_FAILURE", last[-1] if last else result.message)
        return EgressResponse(
            status=status,
            headers=headers,
            body=result.stdout,
            media_type=media_type or "text/plain",
        )


def _refusal(stderr: str) -> str | None:
    """The proxy's refusal reason, from curl's verbose response headers."""
    for line in stderr.splitlines():
        if line.startswith("< ") and line[2:].lower().startswith(REFUSAL_HEADER + ":"):
            return line[2:].split(":", 1)[1].strip()
    return None


def _meta(stderr: str) -> tuple[int, str, dict[str, str]]:
    parts = stderr.split(_MARK)
    if len(parts) < 3:
        return 0, "", {}
    first, _, media_type = parts[-2].strip().partition(" ")
    try:
        status = int(first)
        raw = json.loads(parts[-1].strip() or "{}")
    except ValueError:
        return 0, "", {}
    headers = {
        str(k): ", ".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in raw.items()
    }
    return status, media_type.split(";")[0].strip(), headers
