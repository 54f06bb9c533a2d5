"""`hostcapctl audit export --tenant X` against a real daemon with two
tenants: the export holds X's records and only the hashes of the other's,
and `hostcapctl audit verify` checks it; one altered record fails it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ops_support import hostcapctl, wait_admin
from support.daemon import Daemon, audit_records
from support.process import Client, outcome


async def test_a_one_tenant_export_verifies_and_an_altered_record_fails(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = wait_admin(start_daemon(tenants={"alpha": {}, "beta": {}}))
    for tenant, word in (("alpha", "alpha-private"), ("beta", "beta-visible"), ("alpha", "again")):
        client = Client(daemon.socket_of(tenant))
        try:
            assert outcome(await client.run("echo", word)) == "EXITED"
        finally:
            await client.close()
    files = [
        a for f in sorted(daemon.audit_path.parent.glob("audit.jsonl*")) for a in ("--file", str(f))
    ]
    by_file, by_socket = tmp_path / "beta-files.jsonl", tmp_path / "beta-socket.jsonl"
    done = hostcapctl("audit", "export", *files, "--tenant", "beta", "-o", str(by_file))
    assert done.returncode == 0, done.stderr
    done = hostcapctl(
        "audit", "export", "--tenant", "beta", "-o", str(by_socket), admin=daemon.admin_socket
    )
    assert done.returncode == 0, done.stderr
    stored = {r["seq"]: r for r in audit_records(daemon.audit_path)}
    beta = [seq for seq, r in stored.items() if r.get("tenant") == "beta"]
    for export in (by_file, by_socket):
        text = export.read_text()
        assert "beta-visible" in text and "alpha-private" not in text and '"alpha"' not in text
        checked = hostcapctl("audit", "verify", "--json", str(export))
        report = json.loads(checked.stdout)
        assert checked.returncode == 0 and report["ok"], checked.stdout
        assert report["records"] == len(beta) and report["anchor"] == "genesis"
    lines = by_file.read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b"beta-visible" in line)
    altered = tmp_path / "altered.jsonl"
    altered.write_bytes(
        b"".join(
            [
                *lines[:index],
                lines[index].replace(b"beta-visible", b"beta-innocent"),
                *lines[index + 1 :],
            ]
        )
    )
    failed = hostcapctl("audit", "verify", str(altered))
    assert failed.returncode == 1 and failed.stdout.startswith("FAIL") and "edited" in failed.stdout
    misspelt = hostcapctl("audit", "export", *files, "--tenant", "bteta")
    assert misspelt.returncode == 2 and "valid tenants are alpha, beta" in misspelt.stderr
