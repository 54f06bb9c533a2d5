"""``hostcapctl --admin-socket S ps | kill | health | reload``: the ops commands.

    hostcapctl --admin-socket /run/hostcap/admin.sock ps            # live spawns, every tenant
    hostcapctl --admin-socket /run/hostcap/admin.sock ps --json     # [{spawn_id, tenant, pid, argv, age_s, limits}]
    hostcapctl --admin-socket /run/hostcap/admin.sock kill 3f2a     # a unique id prefix; ends CANCELLED
    hostcapctl --admin-socket /run/hostcap/admin.sock health        # exit 0 when SERVING
    hostcapctl --admin-socket /run/hostcap/admin.sock reload        # like SIGHUP, but says what happened

The admin socket is root's and the admin group's only (the kernel refuses
anyone else at connect). `audit tail -f` and `audit query` over the same
socket are in `hostcap.ctl.audit`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hostcap_proto.v1 import admin_pb2, admin_pb2_grpc, common_pb2, process_pb2

from hostcap.ctl.common import EXIT_REFUSED, channel, report_error, socket_of, wire_error
from hostcap.ctl.process import environment_json

#: The trailing metadata of a health reply that says why it is not serving.
HEALTH_REASON_KEY = "hostcap-health-reason-bin"
#: health: the daemon answered, but not SERVING.
EXIT_NOT_SERVING = 1
#: health: the daemon could not be reached at all.
EXIT_UNREACHABLE = 2


def admin_stub(ch: grpc.Channel) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(ch)  # type: ignore[no-untyped-call]


def spawn_json(info: process_pb2.SpawnInfo) -> dict[str, Any]:
    """One live spawn as `ps --json` prints it."""
    return {
        "spawn_id": info.spawn_id,
        "tenant": info.tenant,
        "pid": info.pid,
        "argv": list(info.argv),
        "age_s": round(info.age_seconds, 3),
        "limits": {f.name: v for f, v in info.limits.ListFields()},
        "detached": info.detached,
    }


def _printable(text: str) -> str:
    # argv is the tenant's: never let its control characters reach the terminal raw.
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{seconds:.1f}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def cmd_ps(args: argparse.Namespace) -> int:
    with channel(socket_of(args, admin=True)) as ch:
        try:
            response = admin_stub(ch).ListSpawns(admin_pb2.ListSpawnsRequest(tenant=args.tenant))
        except grpc.RpcError as error:
            report_error(wire_error(error), as_json=args.json)
            return EXIT_REFUSED
    trees: dict[str, list[dict[str, Any]]] = {}
    if args.tree:
        from hostcap.ctl.tree import TreeUnavailable, spawn_tree

        try:
            trees = {s.spawn_id: spawn_tree(s.pid, s.spawn_id) for s in response.spawns}
        except TreeUnavailable as error:
            print(f"hostcapctl: {error}", file=sys.stderr)
            return EXIT_REFUSED
    if args.json:
        listed = [spawn_json(s) for s in response.spawns]
        if args.tree:
            for item in listed:
                item["processes"] = trees.get(item["spawn_id"], [])
        if args.environments:
            print(json.dumps({"spawns": listed, "environments": [
                environment_json(e) for e in response.environments]}))  # fmt: skip
        else:
            print(json.dumps(listed))
        return 0
    print(f"{'SPAWN':<32} {'TENANT':<12} {'PID':>8} {'AGE':>8}  COMMAND")
    for s in response.spawns:
        command = ("[detached] " if s.detached else "") + _printable(shlex.join(s.argv))
        print(
            f"{s.spawn_id:<32} {_printable(s.tenant):<12} {s.pid:>8} {_age(s.age_seconds):>8}  {command}"
        )
        if args.tree:
            from hostcap.ctl.tree import tree_lines

            for line in tree_lines(trees.get(s.spawn_id, []), _printable):
                print(line)
    if response.environments:
        print(f"\n{'ENVIRONMENT':<40} {'TENANT':<12} {'AGE':>8} {'IDLE':>8}  SPAWNS")
        for e in response.environments:
            print(
                f"{e.environment_id:<40} {_printable(e.tenant):<12} {_age(e.age_seconds):>8}"
                f" {_age(e.idle_seconds):>8}  {' '.join(e.spawn_ids) or '-'}"
            )
    return 0


class AmbiguousPrefix(Exception):
    """A spawn id prefix that more than one live spawn starts with."""

    def __init__(self, prefix: str, matches: list[process_pb2.SpawnInfo]) -> None:
        listed = "; ".join(
            f"{m.spawn_id} ({_printable(m.tenant)}: {_printable(shlex.join(m.argv))})"
            for m in matches
        )
        super().__init__(
            f"spawn id prefix {prefix!r} is ambiguous: {len(matches)} live spawns match: {listed}"
        )
        self.matches = matches


def resolve_spawn_id(stub: admin_pb2_grpc.AdminServiceStub, prefix: str) -> str:
    """The live spawn `prefix` names, as docker resolves a container id: an
    exact id, else the one id starting with it. No match: the prefix itself
    (the daemon answers NOT_FOUND). Several: AmbiguousPrefix."""
    live = stub.ListSpawns(admin_pb2.ListSpawnsRequest()).spawns
    if any(s.spawn_id == prefix for s in live):
        return prefix
    matches = [s for s in live if s.spawn_id.startswith(prefix)]
    if len(matches) > 1:
        raise AmbiguousPrefix(prefix, matches)
    return matches[0].spawn_id if matches else prefix


def cmd_kill(args: argparse.Namespace) -> int:
    if not args.spawn_id:
        print("hostcapctl: kill: the spawn id (or a prefix of it) is empty", file=sys.stderr)
        return EXIT_REFUSED
    with channel(socket_of(args, admin=True)) as ch:
        stub = admin_stub(ch)
        try:
            spawn_id = resolve_spawn_id(stub, args.spawn_id)
            response = stub.Kill(admin_pb2.KillRequest(spawn_id=spawn_id))
        except AmbiguousPrefix as error:
            if args.json:
                print(
                    json.dumps(
                        {
                            "error": {"reason": "AMBIGUOUS", "message": str(error)},
                            "matches": [m.spawn_id for m in error.matches],
                        }
                    )
                )
            else:
                print(f"hostcapctl: {error}", file=sys.stderr)
            return EXIT_REFUSED
        except grpc.RpcError as error:
            report_error(wire_error(error), as_json=args.json)
            return EXIT_REFUSED
    outcome = (
        common_pb2.Outcome.Name(response.exited.outcome) if response.HasField("exited") else None
    )
    if args.json:
        print(
            json.dumps(
                {
                    "spawn_id": response.spawn_id,
                    "tenant": response.tenant,
                    "outcome": outcome,
                    "message": response.exited.message if outcome else None,
                }
            )
        )
        return 0
    ended = f"{outcome}: {response.exited.message}" if outcome else "it had not started"
    print(f"killed spawn {response.spawn_id} of tenant {response.tenant}: {ended}")
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    # The admin socket when given, else a tenant socket: both serve grpc.health.v1.
    path = args.admin_socket if args.admin_socket is not None else socket_of(args)
    with channel(path) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        try:
            response, call = stub.Check.with_call(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as error:
            wire = wire_error(error)
            if wire.reason in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                print(f"UNREACHABLE {path}: {wire.message}", file=sys.stderr)
                return EXIT_UNREACHABLE
            report_error(wire, as_json=False)
            return EXIT_NOT_SERVING
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    # hostcapd says why a tenant is not serving in the reply's trailing metadata.
    reason = next(
        (
            bytes(value).decode(errors="replace")
            for key, value in call.trailing_metadata() or ()
            if key == HEALTH_REASON_KEY
        ),
        "",
    )
    print(f"{status}: {reason}" if reason else status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else EXIT_NOT_SERVING


def cmd_reload(args: argparse.Namespace) -> int:
    with channel(socket_of(args, admin=True)) as ch:
        try:
            response = admin_stub(ch).Reload(admin_pb2.ReloadRequest())
        except grpc.RpcError as error:
            wire = wire_error(error)
            if args.json:
                report_error(wire, as_json=True)
            else:
                print(
                    f"hostcapctl: reload rejected ({wire.reason}); the previous config keeps "
                    f"serving:\n{wire.message}",
                    file=sys.stderr,
                )
            return EXIT_REFUSED
    result = {
        "added": list(response.added),
        "removed": list(response.removed),
        "changed": list(response.changed),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    if not any(result.values()):
        print("reloaded: no tenant changed")
        return 0
    print(
        "reloaded: "
        + "; ".join(f"{key} {', '.join(names)}" for key, names in result.items() if names)
    )
    return 0


def register(sub: Any) -> None:
    """Add ``ps``, ``kill``, ``health`` and ``reload`` to hostcapctl."""
    ps = sub.add_parser("ps", help="live spawns across tenants (admin socket)")
    ps.add_argument("--tenant", default="", help="only this tenant's spawns")
    ps.add_argument(
        "--environments",
        action="store_true",
        help="with --json: an object {spawns, environments} (the open session environments)",
    )
    ps.add_argument(
        "--json",
        action="store_true",
        help="a JSON list of {spawn_id, tenant, pid, argv, age_s, limits}",
    )
    ps.add_argument(
        "--tree",
        action="store_true",
        help="each spawn's processes (its cgroup, else its descendants): pid, CPU, RSS, name; "
        "read on this host with psutil (JSON: `processes`)",
    )
    ps.set_defaults(func=cmd_ps)

    kill = sub.add_parser(
        "kill",
        help="kill a spawn's whole tree (admin socket); it ends CANCELLED",
        description="Kill a live spawn's process tree. Returns once the tree is gone; the spawn "
        "ends CANCELLED and its audit record says an administrator killed it.",
    )
    kill.add_argument(
        "spawn_id",
        metavar="SPAWN_ID",
        help="as `ps` shows it, or a prefix of it that no other live spawn's id starts with",
    )
    kill.add_argument("--json", action="store_true")
    kill.set_defaults(func=cmd_kill)

    health = sub.add_parser(
        "health",
        help="is hostcapd serving? exit 0 SERVING, 1 not serving, 2 unreachable",
        description="Check grpc.health.v1 on the admin socket (or, without --admin-socket, on "
        "--socket). Exit 0 when SERVING, 1 when the daemon answers otherwise, 2 when it "
        "cannot be reached.",
    )
    health.add_argument("--service", default="", help="a service name (default: the whole daemon)")
    health.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    health.set_defaults(func=cmd_health)

    reload = sub.add_parser(
        "reload",
        help="re-read the config (admin socket); a bad one is refused and the old one serves",
    )
    reload.add_argument("--json", action="store_true")
    reload.set_defaults(func=cmd_reload)
