"""hostcapctl run / capabilities."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from hostcap_proto.v1 import common_pb2, host_pb2, host_pb2_grpc, process_pb2, process_pb2_grpc

from hostcap.ctl import terminal
from hostcap.ctl.common import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    channel,
    exit_status,
    refused,
    report_error,
    socket_of,
    wire_error,
)


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run a command through hostcapd")
    run.add_argument("--timeout", type=float, help="wall-clock limit, seconds")
    run.add_argument("--cpu", type=float, help="CPU-time limit, seconds")
    run.add_argument("--memory", type=int, help="memory limit, bytes")
    run.add_argument("--pids", type=int, help="process limit")
    run.add_argument("--output-bytes", type=int, help="output kept per stream, bytes")
    run.add_argument("--cwd", default="", help="working directory (relative to the primary root)")
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V|ID",
        help="a declared variable (K=V), or the id of an open environment to run in",
    )
    run.add_argument("--stdin-file", type=Path, help="file fed to the child's stdin")
    run.add_argument("--request-id", default="", help="idempotency key")
    run.add_argument("--label", action="append", default=[], metavar="K=V", help="audit label")
    run.add_argument("--dry-run", action="store_true", help="resolve and report, run nothing")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument(
        "--detach",
        action="store_true",
        help="start it detached: print its spawn id and return at once (read it with `output`)",
    )
    terminal.add_run_options(run)
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    run.set_defaults(func=cmd_run)

    output = sub.add_parser("output", help="what a detached spawn printed since an offset")
    output.add_argument("spawn_id")
    output.add_argument("--offset", type=int, default=0, help="bytes already read (next_offset)")
    output.add_argument("--wait-ms", type=int, default=0, help="wait this long for new output")
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.set_defaults(func=cmd_output)

    env = sub.add_parser("env", help="session environments: open, list, close")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    env_open = env_sub.add_parser("open", help="open one; prints its id")
    env_open.add_argument("--idle-timeout", type=float, default=0.0, help="seconds (0: default)")
    env_open.add_argument("--lifetime", type=float, default=0.0, help="seconds (0: the ceiling)")
    env_open.add_argument("--label", action="append", default=[], metavar="K=V")
    env_open.add_argument("--json", action="store_true", help="print one JSON object")
    env_open.set_defaults(func=cmd_env_open)
    env_list = env_sub.add_parser("list", help="the tenant's open environments")
    env_list.add_argument("--json", action="store_true", help="print one JSON array")
    env_list.set_defaults(func=cmd_env_list)
    env_close = env_sub.add_parser("close", help="close one: what runs in it ends")
    env_close.add_argument("environment_id")
    env_close.add_argument("--json", action="store_true", help="print one JSON object")
    env_close.set_defaults(func=cmd_env_close)

    stop = sub.add_parser("stop", help="end a spawn of the tenant (SIGKILL to its tree)")
    stop.add_argument("spawn_id")
    stop.add_argument("--json", action="store_true", help="print one JSON object")
    stop.set_defaults(func=cmd_stop)

    caps = sub.add_parser("capabilities", help="what this host enforces for the tenant")
    caps.add_argument("--json", action="store_true")
    caps.set_defaults(func=cmd_capabilities)


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in values:
        if "=" not in item:
            raise SystemExit(f"hostcapctl: {what} {item!r} must be K=V")
        key, value = item.split("=", 1)
        out[key] = value
    return out


def build_request(args: argparse.Namespace) -> process_pb2.SpawnRequest:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit("hostcapctl run: a command is required after --")
    limits = common_pb2.Limits()
    for field, value in (
        ("wall_seconds", args.timeout),
        ("cpu_seconds", args.cpu),
        ("memory_bytes", args.memory),
        ("pids", args.pids),
        ("output_bytes", args.output_bytes),
    ):
        if value is not None:
            setattr(limits, field, value)
    environments = [v for v in args.env if "=" not in v]
    if len(environments) > 1:
        raise SystemExit("hostcapctl run: one environment at most (--env ID)")
    request = process_pb2.SpawnRequest(
        argv=argv,
        cwd=args.cwd,
        env=_pairs([v for v in args.env if "=" in v], "--env"),
        environment_id=environments[0] if environments else "",
        limits=limits,
        request_id=args.request_id,
        dry_run=args.dry_run,
        labels=_pairs(args.label, "--label"),
        detached=getattr(args, "detach", False),
    )
    if args.stdin_file is not None:
        request.stdin = args.stdin_file.read_bytes()
    if terminal.interactive(args):
        terminal.apply_interactive(request, args)
    return request


def _refusal_status(reason: str) -> int:
    return EXIT_NOT_FOUND if reason == "EXECUTABLE_NOT_FOUND" else EXIT_REFUSED


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def run_json(result: process_pb2.RunResult) -> dict[str, Any]:
    s, e = result.started, result.exited
    limits = {f.name: v for f, v in s.limits.ListFields()}
    return {
        "spawn_id": s.spawn_id,
        "pid": s.pid,
        "executable": {"path": s.executable.path, "sha256": s.executable.sha256},
        "outcome": common_pb2.Outcome.Name(e.outcome) if result.HasField("exited") else None,
        "exit_code": e.exit_code if e.HasField("exit_code") else None,
        "signal": e.signal_name or None,
        "message": e.message,
        "duration_s": e.duration_seconds,
        "stdout": _text(result.stdout),
        "stderr": _text(result.stderr),
        "stdout_dropped_bytes": e.stdout.dropped_bytes,
        "stderr_dropped_bytes": e.stderr.dropped_bytes,
        "rusage": {
            "user_s": e.rusage.user_seconds,
            "system_s": e.rusage.system_seconds,
            "max_rss_bytes": e.rusage.max_rss_bytes,
        },
        "peak_memory_bytes": e.peak_memory_bytes if e.HasField("peak_memory_bytes") else None,
        "failed_step": e.failed_step or None,
        "limits": limits,
        "protections": [p.name for p in s.protections if p.applied],
        "dry_run": s.dry_run,
    }


def cmd_run(args: argparse.Namespace) -> int:
    request = build_request(args)
    with channel(socket_of(args)) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        if request.detached and not args.dry_run:
            return _detach(stub, request, args.json)
        if request.stdin_open and not args.dry_run:
            return terminal.run_interactive(args, request)
        if args.json or args.dry_run:
            try:
                result = stub.Run(request)
            except grpc.RpcError as error:
                wire = wire_error(error)
                report_error(wire, as_json=True)
                return _refusal_status(wire.reason)
            print(json.dumps(run_json(result)))
            return exit_status(result.exited) if result.HasField("exited") else 0
        return _stream(stub, request)


def _detach(
    stub: process_pb2_grpc.ProcessServiceStub, request: process_pb2.SpawnRequest, as_json: bool
) -> int:
    try:
        result = stub.Run(request)
    except grpc.RpcError as error:
        wire = wire_error(error)
        report_error(wire, as_json=as_json)
        return _refusal_status(wire.reason)
    if result.HasField("exited"):  # it never ran (a set-up step failed)
        if as_json:
            print(json.dumps(run_json(result)))
        else:
            print(
                f"hostcapctl: {common_pb2.Outcome.Name(result.exited.outcome)}: {result.exited.message}",
                file=sys.stderr,
            )
        return exit_status(result.exited)
    if as_json:
        print(json.dumps({"spawn_id": result.started.spawn_id, "pid": result.started.pid}))
    else:
        print(result.started.spawn_id)
    return 0


def output_json(answer: process_pb2.ReadOutputResponse) -> dict[str, Any]:
    e = answer.exited
    ended = answer.HasField("exited")
    return {
        "stdout": _text(answer.stdout),
        "stderr": _text(answer.stderr),
        "next_offset": answer.next_offset,
        "dropped_bytes": answer.dropped_bytes,
        "running": answer.running,
        **(
            {
                "outcome": common_pb2.Outcome.Name(e.outcome),
                "exit_code": e.exit_code if e.HasField("exit_code") else None,
                "signal": e.signal_name or None,
                "message": e.message,
            }
            if ended
            else {}
        ),
    }


def cmd_output(args: argparse.Namespace) -> int:
    request = process_pb2.ReadOutputRequest(
        spawn_id=args.spawn_id, offset=args.offset, wait_ms=args.wait_ms
    )
    with channel(socket_of(args)) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            answer = stub.ReadOutput(request)
        except grpc.RpcError as error:
            return refused(error, as_json=args.json)
    if args.json:
        print(json.dumps(output_json(answer)))
        return 0
    sys.stdout.buffer.write(answer.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(answer.stderr)
    if answer.dropped_bytes:
        print(f"hostcapctl: [{answer.dropped_bytes} bytes dropped]", file=sys.stderr)
    state = "running" if answer.running else common_pb2.Outcome.Name(answer.exited.outcome)
    print(f"hostcapctl: next offset {answer.next_offset}, {state}", file=sys.stderr)
    return 0


def environment_json(info: process_pb2.EnvironmentInfo) -> dict[str, Any]:
    return {
        "id": info.environment_id,
        "tenant": info.tenant,
        "idle_timeout_s": info.idle_timeout_seconds,
        "lifetime_s": info.lifetime_seconds,
        "age_s": round(info.age_seconds, 3),
        "idle_s": round(info.idle_seconds, 3),
        "spawn_ids": list(info.spawn_ids),
        "labels": dict(info.labels),
    }


def _process_call(args: argparse.Namespace, method: str, request: Any) -> Any:
    """The answer of ProcessService.`method`, or the exit status of its refusal."""
    with channel(socket_of(args)) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            return getattr(stub, method)(request)
        except grpc.RpcError as error:
            return refused(error, as_json=args.json)


def cmd_env_open(args: argparse.Namespace) -> int:
    info = _process_call(
        args,
        "OpenEnvironment",
        process_pb2.OpenEnvironmentRequest(
            idle_timeout_seconds=args.idle_timeout,
            lifetime_seconds=args.lifetime,
            labels=_pairs(args.label, "--label"),
        ),
    )
    if isinstance(info, int):
        return info
    print(json.dumps(environment_json(info)) if args.json else info.environment_id)
    return 0


def cmd_env_list(args: argparse.Namespace) -> int:
    listed = _process_call(args, "ListEnvironments", process_pb2.ListEnvironmentsRequest())
    if isinstance(listed, int):
        return listed
    if args.json:
        print(json.dumps([environment_json(e) for e in listed.environments]))
        return 0
    print(f"{'ENVIRONMENT':<40} {'AGE':>8} {'IDLE':>8}  SPAWNS")
    for e in listed.environments:
        print(
            f"{e.environment_id:<40} {e.age_seconds:>7.0f}s {e.idle_seconds:>7.0f}s  {' '.join(e.spawn_ids)}"
        )
    return 0


def cmd_env_close(args: argparse.Namespace) -> int:
    closed = _process_call(
        args,
        "CloseEnvironment",
        process_pb2.CloseEnvironmentRequest(environment_id=args.environment_id),
    )
    if isinstance(closed, int):
        return closed
    if args.json:
        print(json.dumps({"id": closed.environment_id, "spawns_ended": list(closed.spawns_ended)}))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    request = process_pb2.SignalRequest(spawn_id=args.spawn_id, signal=9)
    with channel(socket_of(args)) as ch:
        stub = process_pb2_grpc.ProcessServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            stub.Signal(request)
        except grpc.RpcError as error:
            return refused(error, as_json=args.json)
    if args.json:
        print(json.dumps({"spawn_id": args.spawn_id, "stopped": True}))
    return 0


def _stream(stub: process_pb2_grpc.ProcessServiceStub, request: process_pb2.SpawnRequest) -> int:
    call = stub.Spawn(request)
    out, err = sys.stdout.buffer, sys.stderr.buffer
    try:
        for event in call:
            kind = event.WhichOneof("event")
            if kind == "output":
                target = out if event.output.stream == common_pb2.STDOUT else err
                target.write(event.output.data)
                target.flush()
            elif kind == "exited":
                e = event.exited
                print(
                    f"hostcapctl: {common_pb2.Outcome.Name(e.outcome)}: {e.message}",
                    file=sys.stderr,
                )
                return exit_status(e)
    except grpc.RpcError as error:
        wire = wire_error(error)
        report_error(wire, as_json=False)
        return _refusal_status(wire.reason)
    except KeyboardInterrupt:
        call.cancel()  # the daemon kills the tree
        return 130
    print("hostcapctl: the stream ended without an exit report", file=sys.stderr)
    return EXIT_REFUSED


def cmd_capabilities(args: argparse.Namespace) -> int:
    with channel(socket_of(args)) as ch:
        try:
            caps = host_pb2_grpc.HostServiceStub(ch).Capabilities(  # type: ignore[no-untyped-call]
                host_pb2.CapabilitiesRequest()
            )
        except grpc.RpcError as error:
            report_error(wire_error(error), as_json=args.json)
            return EXIT_REFUSED
    data = json_format.MessageToDict(
        caps, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    data["protections"] = [
        {"name": p.name, "applied": p.applied, "reason": p.reason, "required": p.required}
        for p in caps.protections
    ]
    if args.json:
        print(json.dumps(data))
        return 0
    print(
        f"tenant {caps.tenant} (hostcapd {caps.daemon_version}), children as uid {caps.run_as_uid} gid {caps.run_as_gid}"
    )
    for root in caps.roots:
        print(f"  root {root.path} ({host_pb2.Tier.Name(root.tier).lower().replace('_', '-')})")
    print(
        f"  memory limit by {caps.memory_limit_mechanism}; landlock ABI {caps.landlock_abi or 'none'};"
        f" cgroup {caps.cgroup_version or 'none'}"
    )
    for p in caps.protections:
        mark = "yes" if p.applied else "NO "
        print(f"  [{mark}] {p.name:16} {p.reason}")
    net = caps.network
    if net.mode == "proxy":
        running = "running" if net.proxy_running else "NOT running"
        print(f"  network: proxy at {net.proxy_url} ({running}); allow {list(net.allow)}")
        if net.deny:
            print(f"           deny {list(net.deny)}")
        if net.resolve:
            print(f"           resolve {list(net.resolve)}")
    else:
        print(f"  network: {net.mode or 'none'}")
    if caps.frontend_protections:
        print(f"  served by a front-end process as uid {caps.frontend_uid}:")
        for p in caps.frontend_protections:
            mark = "yes" if p.applied else "NO "
            print(f"  [{mark}] {p.name:16} {p.reason}")
    else:
        print("  served by the root process (no front-end process)")
    return 0
