"""Registering servicers so that a request that does not decode gets a typed
refusal (INVALID_ARGUMENT) instead of grpcio's untyped UNKNOWN.

The generated add_*_to_server functions deserialize before any daemon code
runs; here each method receives raw bytes and parses them itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from google.rpc import error_details_pb2, status_pb2
from hostcap_proto.errors import DOMAIN, WireError

from hostcapd import metrics
from hostcapd.frontend.context import Context

MALFORMED = WireError("INVALID_ARGUMENT", "malformed request message")


def _serialize(message: protobuf_message.Message | bytes | Any) -> bytes:
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


#: (tenant, service, method) of a tenant socket's calls, for the metrics; None elsewhere.
Observed = tuple[str, str, str] | None


def call_result(context: Context, error: BaseException | None) -> str:
    """How a call ended, for the metrics: OK, CANCELLED, the hostcap reason
    it was refused with (from the status it aborted with), or its code."""
    if error is None:
        return "OK"
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    for key, value in context.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info) and info.domain == DOMAIN:
                    return str(info.reason)
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "INTERNAL"


def _observe(observed: Observed, context: Context, error: BaseException | None) -> None:
    if observed is not None:
        try:
            result = call_result(context, error)
        except Exception:
            result = "INTERNAL"
        metrics.rpc_finished(*observed, result)


def _unary(
    behaviour: Callable[..., Any], request_type: Any, observed: Observed
) -> Callable[..., Any]:
    async def handle(raw: bytes, context: Context) -> Any:
        try:
            reply = await behaviour(await _parse(raw, request_type, context), context)
        except BaseException as error:
            _observe(observed, context, error)
            raise
        _observe(observed, context, None)
        return reply

    return handle


def _streaming(
    behaviour: Callable[..., Any], request_type: Any, observed: Observed
) -> Callable[..., Any]:
    async def handle(raw: bytes, context: Context) -> AsyncIterator[Any]:
        try:
            async for item in behaviour(await _parse(raw, request_type, context), context):
                yield item
        except BaseException as error:
            _observe(observed, context, error)
            raise
        _observe(observed, context, None)

    return handle


def _handler(
    method: MethodDescriptor, behaviour: Callable[..., Any], tenant: str | None
) -> grpc.RpcMethodHandler[Any, Any]:
    request_type = GetMessageClass(method.input_type)
    observed = None if tenant is None else (tenant, method.containing_service.name, method.name)
    if method.client_streaming:
        raise ValueError(f"{method.full_name}: client streaming is not used by hostcap")
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(behaviour, request_type, observed), response_serializer=_serialize
        )
    return grpc.unary_unary_rpc_method_handler(
        _unary(behaviour, request_type, observed), response_serializer=_serialize
    )


def add_servicer(
    server: grpc.aio.Server, servicer: Any, service: ServiceDescriptor, tenant: str | None = None
) -> None:
    """Serve every method of `service` from the same-named method of
    `servicer`; with `tenant`, each call's result is counted in the metrics."""
    handlers = {m.name: _handler(m, getattr(servicer, m.name), tenant) for m in service.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
