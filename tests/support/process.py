"""A thin test client of ProcessService over the wire contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from hostcap_proto.errors import from_rpc_error
from hostcap_proto.v1 import common_pb2, process_pb2, process_pb2_grpc


class Client:
    def __init__(self, socket: Path) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{socket}")
        self.stub = process_pb2_grpc.ProcessServiceStub(self.channel)  # type: ignore[no-untyped-call]

    async def run(self, *argv: str, **kwargs: Any) -> process_pb2.RunResult:
        result: process_pb2.RunResult = await self.stub.Run(request(list(argv), **kwargs))
        return result

    async def refusal(self, *argv: str, **kwargs: Any) -> str:
        """Run expecting a refusal; return its ErrorInfo reason."""
        try:
            await self.run(*argv, **kwargs)
        except grpc.aio.AioRpcError as error:
            wire = from_rpc_error(error)
            assert wire is not None, f"no ErrorInfo in {error}"
            return wire.reason
        raise AssertionError("the daemon did not refuse")

    async def close(self) -> None:
        await self.channel.close(None)


def request(
    argv: list[str], limits: dict[str, Any] | None = None, **kwargs: Any
) -> process_pb2.SpawnRequest:
    return process_pb2.SpawnRequest(argv=argv, limits=common_pb2.Limits(**(limits or {})), **kwargs)


def outcome(result: process_pb2.RunResult) -> str:
    return common_pb2.Outcome.Name(result.exited.outcome)
