"""Registering servicers so that a request that does not decode gets a typed
refusal (INVALID_ARGUMENT) instead of grpcio's untyped UNKNOWN.

The generated add_*_to_server functions deserialize before any daemon code
runs; here each method receives raw bytes and parses them itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from hostcap_proto.errors import WireError

from hostcapd.frontend.context import Context

MALFORMED = WireError("INVALID_ARGUMENT", "malformed request message")


def _serialize(message: protobuf_message.Message | bytes) -> bytes:
    # A servicer may answer with wire bytes it encoded itself (Spawn's Output
    # events, the bulk of a stream): they go out as they are.
    if isinstance(message, bytes):
        return message
    return message.SerializeToString()


async def _parse(raw: bytes, request_type: Any, context: Context) -> Any:
    try:
        return request_type.FromString(raw)
    except protobuf_message.DecodeError:
        await context.abort_with_status(MALFORMED.to_status())  # type: ignore[attr-defined]
        raise AssertionError("abort_with_status returned") from None


def _unary(behaviour: Callable[..., Any], request_type: Any) -> Callable[..., Any]:
    async def handle(raw: bytes, context: Context) -> Any:
        return await behaviour(await _parse(raw, request_type, context), context)

    return handle


def _streaming(behaviour: Callable[..., Any], request_type: Any) -> Callable[..., Any]:
    async def handle(raw: bytes, context: Context) -> AsyncIterator[Any]:
        async for item in behaviour(await _parse(raw, request_type, context), context):
            yield item

    return handle


def _handler(
    method: MethodDescriptor, behaviour: Callable[..., Any]
) -> grpc.RpcMethodHandler[Any, Any]:
    request_type = GetMessageClass(method.input_type)
    if method.client_streaming:
        raise ValueError(f"{method.full_name}: client streaming is not used by hostcap")
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(behaviour, request_type), response_serializer=_serialize
        )
    return grpc.unary_unary_rpc_method_handler(
        _unary(behaviour, request_type), response_serializer=_serialize
    )


def add_servicer(server: grpc.aio.Server, servicer: Any, service: ServiceDescriptor) -> None:
    """Serve every method of `service` from the same-named method of `servicer`."""
    handlers = {m.name: _handler(m, getattr(servicer, m.name)) for m in service.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
