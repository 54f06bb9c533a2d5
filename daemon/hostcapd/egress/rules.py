"""A tenant's egress rules: which names and ports a spawn may reach through
the egress proxy, and which addresses it may never reach.

    network = Network(mode="proxy", allow=("pypi.org", "*.pythonhosted.org"))
    policy = Policy.of(network)
    verdict = policy.decide("files.pythonhosted.org", 443)   # before resolving
    verdict = policy.check_address(verdict, ip_address("10.0.0.7"))  # after

A rule is `NAME[:PORT]`: NAME is a domain (`pypi.org`, exact) or a suffix
(`*.pythonhosted.org`: its subdomains, not itself), an IP address, or a
CIDR range (`10.0.0.0/8`); PORT is one port or `*`, default 443 and 80
for an allow rule and every port for a deny rule.
An IPv6 address with a port is bracketed (`[2001:db8::1]:443`). A deny rule
wins over every allow rule. Addresses in the internal ranges (loopback,
link-local, private, CGNAT, multicast, unique-local, the host's own) are
refused unless an allow rule names a range or address containing them; an
address a `resolve` override gives is connected to as given.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PORTS: tuple[int, ...] = (443, 80)
#: The loopback port of the listener in a proxy-mode spawn's network namespace.
PROXY_PORT = 3128
#: Any port: a rule written `NAME:*`.
ANY_PORT = 0
_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_DOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
#: The ranges never connected to unless a rule names them (RFC 6890 and the
#: cloud metadata address 169.254.169.254, which link-local holds).
INTERNAL_RANGES: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "::ffff:0:0/96",  # IPv4-mapped: checked as the IPv4 address it maps
        "64:ff9b::/96",  # NAT64: may reach the IPv4 internal ranges
        "fc00::/7",  # unique-local
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
    )
)


class RuleError(ValueError):
    """A rule that is not `NAME[:PORT]`; the message says what is wrong."""


@dataclass(frozen=True)
class Rule:
    """One parsed rule, kept with the text it was written as."""

    text: str
    #: "domain", "suffix" (its subdomains), "address" or "range"
    kind: Literal["domain", "suffix", "address", "range", "everything"]
    #: The domain (lower case, no trailing dot), the suffix without "*.",
    #: or the address / range in its canonical form.
    name: str
    ports: tuple[int, ...]
    network: IPNetwork | None = None

    @classmethod
    def parse(cls, text: str, default_ports: tuple[int, ...] = DEFAULT_PORTS) -> Rule:
        """An allow rule without a port is 443 and 80; a deny rule (given
        `default_ports=(ANY_PORT,)`) is every port."""
        if not isinstance(text, str) or not text or len(text) > 300 or text != text.strip():
            raise RuleError(f"rule {text!r}: not NAME[:PORT]")
        host, ports = _split_port(text, default_ports)
        low = host.lower()
        low = low[:-1] if low.endswith(".") and low != "*." else low
        if low == "*":
            return cls(text, "everything", "*", ports)
        if host.startswith("[") or ":" in host or re.fullmatch(r"[0-9./]+", host):
            bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
            try:
                net = ipaddress.ip_network(bare, strict=True)
            except ValueError as error:
                raise RuleError(f"rule {text!r}: not an address or range: {error}") from None
            single = net.num_addresses == 1 and "/" not in bare
            return cls(text, "address" if single else "range", str(net), ports, net)
        if low.startswith("*."):
            suffix = low[2:]
            if not _DOMAIN.fullmatch(suffix):
                raise RuleError(f"rule {text!r}: {suffix!r} is not a domain")
            return cls(text, "suffix", suffix, ports)
        if "*" in low:
            raise RuleError(f"rule {text!r}: '*' is allowed only as a leading '*.'")
        if not _DOMAIN.fullmatch(low):
            raise RuleError(f"rule {text!r}: {host!r} is not a domain")
        return cls(text, "domain", low, ports)

    @property
    def allows_everything(self) -> bool:
        return self.kind == "everything" or (
            self.network is not None and self.network.prefixlen == 0
        )

    def port_matches(self, port: int) -> bool:
        return ANY_PORT in self.ports or port in self.ports

    def matches_name(self, name: str) -> bool:
        if self.kind == "everything":
            return True
        if self.kind == "domain":
            return name == self.name
        if self.kind == "suffix":
            return name.endswith("." + self.name)
        return False

    def contains(self, address: IPAddress) -> bool:
        if self.kind == "everything":
            return False  # `*` names no range: internal addresses stay refused
        return self.network is not None and _unmapped(address) in self.network

    def __str__(self) -> str:
        return self.text


def _split_port(text: str, default_ports: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """(host, ports) of `text`: `[v6]:port`, `name:port`, or no port."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise RuleError(f"rule {text!r}: unclosed '['")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, default_ports
        if not rest.startswith(":"):
            raise RuleError(f"rule {text!r}: junk after ']'")
        return host, (_port(text, rest[1:]),)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, (_port(text, port),)
    return text, default_ports  # a bare name, or an IPv6 address without a port


def _port(text: str, port: str) -> int:
    if port == "*":
        return ANY_PORT
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise RuleError(f"rule {text!r}: port {port!r} is not 1-65535 or '*'")
    return int(port)


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_internal(address: IPAddress, own: Iterable[IPAddress] = ()) -> bool:
    """Whether `address` is in an internal range or is one of `own` (the
    host's addresses)."""
    plain = _unmapped(address)
    if plain in set(own):
        return True
    return any(plain in net for net in INTERNAL_RANGES if net.version == plain.version)


def host_literal(host: str) -> IPAddress | None:
    """`host` as an IP address if it is one (`[v6]` too), else None."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        return None


def normal_name(host: str) -> str:
    return host.lower().rstrip(".")


# --- the config section ------------------------------------------------------------


class Network(BaseModel):
    """`[tenants.NAME.network]`: how a tenant's spawns reach the network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: "none": a private network namespace with loopback only (the default);
    #: "proxy": that namespace plus a loopback listener wired to the tenant's
    #: egress proxy, which connects by rule; "host": the host's network
    #: (as `sandbox.allow_host_network = true`).
    mode: Literal["none", "proxy", "host"] = "none"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    #: NAME -> address, connected to as given (offline mirrors, tests);
    #: refused unless `[daemon] allow_resolve_overrides = true`.
    resolve: dict[str, str] = Field(default_factory=dict)
    #: Ceilings per spawn: connections opened, bytes both ways, seconds
    #: allowed for one connect.
    max_connections: int = Field(default=256, gt=0, le=1_000_000)
    max_bytes: int = Field(default=4 * 1024**3, gt=0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=300)

    @field_validator("allow", "deny")
    @classmethod
    def _rules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            Rule.parse(text)  # RuleError is a ValueError: pydantic names the key
        return value

    @field_validator("resolve")
    @classmethod
    def _resolve(cls, value: dict[str, str]) -> dict[str, str]:
        for name, address in value.items():
            if host_literal(name) is not None or not _DOMAIN.fullmatch(normal_name(name)):
                raise ValueError(f"resolve: {name!r} is not a domain name")
            if host_literal(address) is None:
                raise ValueError(f"resolve: {name!r} = {address!r} is not an IP address")
        return {normal_name(k): v for k, v in value.items()}

    @model_validator(mode="after")
    def _proxy_only(self) -> Network:
        if self.mode != "proxy" and (self.allow or self.deny or self.resolve):
            raise ValueError(f'allow, deny and resolve apply to mode = "proxy", not {self.mode!r}')
        return self


def effective_mode(network: Network, allow_host_network: bool) -> str:
    """The mode a tenant has: `allow_host_network` (kept for compatibility)
    is "host"."""
    return "host" if allow_host_network and network.mode == "none" else network.mode


def mode_problems(network: Network, allow_host_network: bool, overrides_allowed: bool) -> list[str]:
    problems = []
    if allow_host_network and network.mode == "proxy":
        problems.append(
            'network.mode = "proxy" and sandbox.allow_host_network = true contradict each other'
        )
    if network.resolve and not overrides_allowed:
        problems.append(
            "network.resolve overrides name resolution, a test and offline-mirror feature: "
            "refused unless [daemon] allow_resolve_overrides = true"
        )
    return problems


def warnings_of(network: Network) -> list[str]:
    """What check-config warns about: a rule that allows everything."""
    return [
        f"network.allow {rule.text!r} allows every destination"
        for rule in map(Rule.parse, network.allow)
        if rule.allows_everything
    ]


# --- deciding -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the policy says of one destination."""

    allowed: bool
    #: The rule that decided (its text), or "" when none matched.
    rule: str
    #: Why, in a line a model can act on.
    reason: str
    #: The override address, when the name has one.
    override: IPAddress | None = None


@dataclass(frozen=True)
class Policy:
    allow: tuple[Rule, ...]
    deny: tuple[Rule, ...]
    resolve: Mapping[str, IPAddress] = field(default_factory=dict)
    own: frozenset[IPAddress] = frozenset()

    @classmethod
    def of(
        cls,
        allow: Iterable[str],
        deny: Iterable[str] = (),
        resolve: Mapping[str, str] | None = None,
        own: Iterable[IPAddress] = (),
    ) -> Policy:
        overrides = {normal_name(k): host_literal(v) for k, v in (resolve or {}).items()}
        return cls(
            tuple(map(Rule.parse, allow)),
            tuple(Rule.parse(text, (ANY_PORT,)) for text in deny),
            {k: v for k, v in overrides.items() if v is not None},
            frozenset(own),
        )

    def decide(self, host: str, port: int) -> Verdict:
        """The verdict on `host:port` before resolving: deny rules first,
        then allow rules; an IP literal only by an address or range rule."""
        literal = host_literal(host)
        name = normal_name(host)
        if not 0 < port < 65536:
            return Verdict(False, "", f"port {port} is not a port")
        if literal is not None:
            for rule in self.deny:
                if rule.contains(literal) and rule.port_matches(port):
                    return Verdict(False, rule.text, f"denied by rule {rule.text!r}")
            for rule in self.allow:
                if rule.contains(literal) and rule.port_matches(port):
                    return Verdict(True, rule.text, f"allowed by rule {rule.text!r}")
            return Verdict(
                False,
                "",
                f"IP address {literal} is refused: no allow rule names it "
                "(connect by name, or ask the operator for an address rule)",
            )
        if not _DOMAIN.fullmatch(name):
            return Verdict(False, "", f"{host!r} is not a domain name")
        for rule in self.deny:
            if rule.matches_name(name) and rule.port_matches(port):
                return Verdict(False, rule.text, f"denied by rule {rule.text!r}")
        for rule in self.allow:
            if rule.matches_name(name) and rule.port_matches(port):
                return Verdict(
                    True, rule.text, f"allowed by rule {rule.text!r}", self.resolve.get(name)
                )
        return Verdict(
            False,
            "",
            f"no allow rule matches {name}:{port} (ask the operator to add "
            f"{name!r} or {name + ':' + str(port)!r} to this tenant's network.allow)",
        )

    def check_address(self, verdict: Verdict, address: IPAddress) -> Verdict:
        """An allowed verdict's resolved `address`, checked against the
        internal ranges (an override's address is taken as given)."""
        if not verdict.allowed or verdict.override is not None:
            return verdict
        if not is_internal(address, self.own):
            return verdict
        for rule in self.deny:
            if rule.contains(address):
                return Verdict(False, rule.text, f"address {address} denied by rule {rule.text!r}")
        for rule in self.allow:
            if rule.contains(address):
                return Verdict(
                    True, rule.text, f"internal address {address} allowed by rule {rule.text!r}"
                )
        return Verdict(
            False,
            verdict.rule,
            f"the name resolved to {address}, an internal address (loopback, link-local, "
            "private, CGNAT, multicast or this host's own), refused unless a rule names its range",
        )

    def ports(self) -> tuple[int, ...]:
        """Every port an allow rule names (ANY_PORT among them if any)."""
        return tuple(sorted({p for rule in self.allow for p in rule.ports}))
