"""gRPC server reflection (`grpc.reflection.v1alpha.ServerReflection`), as a
front-end answers it.

    enable([service names], server)

The answers of grpcio-reflection's servicer, request for request and byte
for byte (tests/integration/bridge/test_reflection.py compares them),
without its import of `google.protobuf.descriptor_pb2`: it builds a
`FileDescriptorProto` to serialize each file, where a file's descriptor
already holds its serialized form (`serialized_pb`, what `CopyToProto`
parses). That module's message classes were 0.57 MiB of every idle
front-end's RSS, for a call that may never come (bench/README.md, "Issue
35, the idle front-end's RSS, ninth pass"); a front-end cannot import it on
the first call instead: once confined, it may not read the interpreter's
files.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

SERVICE_NAME: str = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name


def _error(request: Any, code: grpc.StatusCode) -> Any:
    return reflection_pb2.ServerReflectionResponse(
        error_response=reflection_pb2.ErrorResponse(
            error_code=code.value[0], error_message=code.value[1].encode()
        ),
        original_request=request,
    )


def _with_dependencies(descriptor: Any, seen: dict[str, Any]) -> dict[str, Any]:
    """The file and every file it imports, transitively, first seen first."""
    seen[descriptor.name] = descriptor
    for dependency in descriptor.dependencies:
        if dependency.name not in seen:
            _with_dependencies(dependency, seen)
    return seen


def _files(descriptor: Any, request: Any) -> Any:
    return reflection_pb2.ServerReflectionResponse(
        file_descriptor_response=reflection_pb2.FileDescriptorResponse(
            file_descriptor_proto=[
                d.serialized_pb for d in _with_dependencies(descriptor, {}).values()
            ]
        ),
        original_request=request,
    )


class Reflection(reflection_pb2_grpc.ServerReflectionServicer):  # type: ignore[misc]
    """The servicer: each request of the stream answered in turn."""

    def __init__(self, service_names: Iterable[str], pool: Any = None) -> None:
        self._service_names = tuple(sorted(service_names))
        self._pool = descriptor_pool.Default() if pool is None else pool

    async def ServerReflectionInfo(
        self, requests: AsyncIterable[Any], context: Any
    ) -> AsyncIterator[Any]:
        async for request in requests:
            yield self.answer(request)

    def answer(self, request: Any) -> Any:
        """The response to one request (NOT_FOUND for a name the pool does
        not have, INVALID_ARGUMENT for a request of no known kind)."""
        pool = self._pool
        try:
            if request.HasField("file_by_filename"):
                return _files(pool.FindFileByName(request.file_by_filename), request)
            if request.HasField("file_containing_symbol"):
                symbol = request.file_containing_symbol
                return _files(pool.FindFileContainingSymbol(symbol), request)
            if request.HasField("file_containing_extension"):
                asked = request.file_containing_extension
                extended = pool.FindMessageTypeByName(asked.containing_type)
                extension = pool.FindExtensionByNumber(extended, asked.extension_number)
                return _files(pool.FindFileContainingSymbol(extension.full_name), request)
            if request.HasField("all_extension_numbers_of_type"):
                extended = pool.FindMessageTypeByName(request.all_extension_numbers_of_type)
                numbers = sorted(e.number for e in pool.FindAllExtensions(extended))
                return reflection_pb2.ServerReflectionResponse(
                    all_extension_numbers_response=reflection_pb2.ExtensionNumberResponse(
                        base_type_name=extended.full_name, extension_number=numbers
                    ),
                    original_request=request,
                )
        except KeyError:
            return _error(request, grpc.StatusCode.NOT_FOUND)
        if request.HasField("list_services"):
            return reflection_pb2.ServerReflectionResponse(
                list_services_response=reflection_pb2.ListServiceResponse(
                    service=[
                        reflection_pb2.ServiceResponse(name=name) for name in self._service_names
                    ]
                ),
                original_request=request,
            )
        return _error(request, grpc.StatusCode.INVALID_ARGUMENT)


def enable(service_names: Iterable[str], server: Any) -> None:
    """Serve reflection of these services (give SERVICE_NAME among them to
    list reflection itself) on `server`."""
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(Reflection(service_names), server)
