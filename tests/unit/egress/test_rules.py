"""The egress rules: parsing, deciding, the internal ranges, and the
config section (`[tenants.X.network]`)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hostcapd.cli import main as hostcapd_main
from hostcapd.config import ConfigError, dev_config, parse_config
from hostcapd.egress.rules import Network, Policy, Rule, RuleError, warnings_of

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("text", "kind", "ports"),
    [
        ("pypi.org", "domain", (443, 80)),
        ("*.pythonhosted.org", "suffix", (443, 80)),
        ("github.com:443", "domain", (443,)),
        ("mirror.internal:*", "domain", (0,)),
        ("10.0.0.0/8", "range", (443, 80)),
        ("10.1.2.3:8080", "address", (8080,)),
        ("[2001:db8::1]:443", "address", (443,)),
        ("2001:db8::/32", "range", (443, 80)),
        ("*", "everything", (443, 80)),
    ],
)
def test_a_rule_parses_to_its_kind_and_ports(text: str, kind: str, ports: tuple[int, ...]) -> None:
    rule = Rule.parse(text)
    assert (rule.kind, rule.ports) == (kind, ports)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " pypi.org",
        "pypi.org:0",
        "pypi.org:70000",
        "pypi.org:x",
        "py*pi.org",
        "*.",
        "a..b",
        "10.0.0.1/8",
        "[::1",
        "[::1]x",
        "-bad.org",
        "a b",
    ],
)
def test_a_malformed_rule_is_refused(text: str) -> None:
    with pytest.raises(RuleError):
        Rule.parse(text)


POLICY = Policy.of(
    ["pypi.org", "*.pythonhosted.org", "github.com:443", "10.9.0.0/16", "localhost"],
    ["gist.github.com", "*.bad.pythonhosted.org"],
)


@pytest.mark.parametrize(
    ("host", "port", "allowed", "rule"),
    [
        ("pypi.org", 443, True, "pypi.org"),
        ("PyPI.org.", 80, True, "pypi.org"),
        ("pypi.org", 22, False, ""),
        ("files.pythonhosted.org", 443, True, "*.pythonhosted.org"),
        ("pythonhosted.org", 443, False, ""),  # a suffix rule is its subdomains only
        ("x.bad.pythonhosted.org", 443, False, "*.bad.pythonhosted.org"),  # deny wins
        ("github.com", 80, False, ""),
        ("gist.github.com", 443, False, "gist.github.com"),
        ("1.2.3.4", 443, False, ""),  # an IP literal without a rule
        ("10.9.1.1", 443, True, "10.9.0.0/16"),
        ("evilpypi.org", 443, False, ""),
    ],
)
def test_the_policy_decides_by_name_port_and_deny_first(
    host: str, port: int, allowed: bool, rule: str
) -> None:
    verdict = POLICY.decide(host, port)
    assert (verdict.allowed, verdict.rule) == (allowed, rule)
    if not allowed:
        assert verdict.reason  # the refusal says why


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "169.254.169.254",
        "10.0.0.1",
        "172.16.5.5",
        "192.168.1.1",
        "100.64.0.1",
        "224.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
    ],
)
def test_a_name_resolving_into_an_internal_range_is_refused(address: str) -> None:
    verdict = POLICY.check_address(POLICY.decide("pypi.org", 443), ip(address))
    assert not verdict.allowed
    assert "internal address" in verdict.reason


def test_a_public_address_and_a_named_range_pass() -> None:
    assert POLICY.check_address(POLICY.decide("pypi.org", 443), ip("151.101.0.223")).allowed
    named = Policy.of(["mirror.lan", "10.9.0.0/16"])
    assert named.check_address(named.decide("mirror.lan", 443), ip("10.9.3.3")).allowed
    assert not named.check_address(named.decide("mirror.lan", 443), ip("10.8.3.3")).allowed


def test_the_hosts_own_address_is_refused() -> None:
    own = Policy.of(["pypi.org"], own=[ip("203.0.113.7")])
    assert not own.check_address(own.decide("pypi.org", 443), ip("203.0.113.7")).allowed


def test_an_override_address_is_taken_as_given() -> None:
    p = Policy.of(["allowed.test"], resolve={"allowed.test": "127.0.0.1"})
    verdict = p.decide("allowed.test", 443)
    assert verdict.override == ip("127.0.0.1")
    assert p.check_address(verdict, ip("127.0.0.1")).allowed


def test_everything_is_warned_about() -> None:
    assert warnings_of(Network(mode="proxy", allow=("*",)))
    assert warnings_of(Network(mode="proxy", allow=("0.0.0.0/0",)))
    assert not warnings_of(Network(mode="proxy", allow=("pypi.org",)))


def _dev(tmp_path: Path, **network: object) -> dict[str, object]:
    return dev_config(tmp_path, {"mode": "proxy", **network}).model_dump(mode="json")


def test_the_config_section_and_its_refusals(tmp_path: Path) -> None:
    config = dev_config(tmp_path, {"mode": "proxy", "allow": ["pypi.org"]})
    assert config.tenants[0].network_mode == "proxy"
    data = _dev(tmp_path, resolve={"allowed.test": "127.0.0.1"})
    parse_config(data)  # the dev config allows overrides
    data["daemon"]["allow_resolve_overrides"] = False  # type: ignore[index]
    with pytest.raises(ConfigError, match="allow_resolve_overrides"):
        parse_config(data)
    data = _dev(tmp_path)
    data["tenants"][0]["network"]["allow"] = ["py*pi.org"]  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"network\.allow"):
        parse_config(data)
    data = _dev(tmp_path)
    data["tenants"][0]["network"] = {"mode": "none", "allow": ["pypi.org"]}  # type: ignore[index]
    with pytest.raises(ConfigError, match="mode"):
        parse_config(data)


def test_allow_host_network_is_host_mode(tmp_path: Path) -> None:
    data = dev_config(tmp_path).model_dump(mode="json")
    data["tenants"][0]["sandbox"]["allow_host_network"] = True  # type: ignore[index]
    assert parse_config(data).tenants[0].network_mode == "host"
    data["tenants"][0]["network"] = {"mode": "proxy"}  # type: ignore[index]
    with pytest.raises(ConfigError, match="contradict"):
        parse_config(data)


def test_dev_flags_refuse_a_bad_resolve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = hostcapd_main(
        ["serve", "--dev", "--state-dir", str(tmp_path), "--network", "proxy", "--resolve", "x"]
    )
    assert code == 2
    assert "NAME=ADDR" in capsys.readouterr().err


def test_check_config_warns_on_allow_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support import toml

    data = dev_config(tmp_path, {"mode": "proxy", "allow": ["*", "pypi.org"]}).model_dump(
        mode="json", exclude_none=True
    )
    path = tmp_path / "hostcapd.toml"
    path.write_text(toml.dumps(data))
    hostcapd_main(["check-config", str(path)])
    assert "network.allow '*' allows every destination" in capsys.readouterr().err
