"""Server reflection on a tenant's socket and on the admin socket, as
grpcurl uses it: the services listed, each service's file with the files it
imports, a symbol's file, a file by name, NOT_FOUND for a name no file
has, INVALID_ARGUMENT for a request of no kind. Every answer is the one
grpcio-reflection's own servicer gives for the same request, byte for
byte, built in this process from the same descriptors: what the confined
front-end serves (the same library, confined) is what it gives here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from hostcap_proto.v1 import admin_pb2, fs_pb2, host_pb2, process_pb2
from support.daemon import Daemon

Request = reflection_pb2.ServerReflectionRequest

TENANT_SERVICES = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    process_pb2.DESCRIPTOR.services_by_name["ProcessService"].full_name,
    host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name,
    fs_pb2.DESCRIPTOR.services_by_name["FsService"].full_name,
]
ADMIN_SERVICES = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
]
assert health_pb2.DESCRIPTOR.services_by_name["Health"].full_name == TENANT_SERVICES[0]


async def ask(path: Path, requests: list[Any]) -> list[Any]:
    """One ServerReflectionInfo stream: each request, in order, and its answer."""
    async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        return [answer async for answer in stub.ServerReflectionInfo(iter(requests))]


def declared(answer: Any) -> list[Any]:
    """The files of a file descriptor answer, as FileDescriptorProtos."""
    return [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in answer.file_descriptor_response.file_descriptor_proto
    ]


def files_of(answer: Any) -> list[str]:
    return [f.name for f in declared(answer)]


def requests_for(services: list[str], message: str) -> list[Any]:
    return [
        Request(list_services=""),
        *(Request(file_containing_symbol=name) for name in services),
        Request(file_containing_symbol=message),
        Request(file_by_filename=process_pb2.DESCRIPTOR.name),
        Request(file_by_filename="hostcap_proto/v1/no_such.proto"),
        Request(file_containing_symbol="hostcap.v1.NoSuchMessage"),
        Request(all_extension_numbers_of_type=message),
        Request(all_extension_numbers_of_type="hostcap.v1.NoSuchMessage"),
        Request(
            file_containing_extension=reflection_pb2.ExtensionRequest(
                containing_type=message, extension_number=1000
            )
        ),
        Request(),
    ]


def library_answers(services: list[str], requests: list[Any]) -> list[Any]:
    """What grpcio-reflection's servicer answers (this process's pool holds
    the same files: every request names one of them, or none)."""
    servicer = reflection.ReflectionServicer(services)
    return list(servicer.ServerReflectionInfo(iter(requests), None))


@pytest.mark.parametrize("split", [True, False], ids=["front-end", "in-process"])
async def test_reflection_answers_as_grpcio_reflection_does(
    start_daemon: Callable[..., Daemon], split: bool
) -> None:
    daemon = start_daemon(daemon={"frontend_processes": split})
    message = process_pb2.DESCRIPTOR.message_types_by_name["SpawnRequest"].full_name
    for path, services in (
        (daemon.socket, TENANT_SERVICES),
        (daemon.admin_socket, ADMIN_SERVICES),
    ):
        requests = requests_for(services, message)
        answers = await ask(path, requests)

        listed = answers[0].list_services_response.service
        assert sorted(s.name for s in listed) == sorted(services)
        for service, answer in zip(services, answers[1:], strict=False):
            first = declared(answer)[0]  # the service's own file, then its imports
            package, _, name = service.rpartition(".")
            assert first.package == package
            assert name in [s.name for s in first.service]
        by_name = answers[len(services) + 2]
        assert files_of(by_name)[0] == process_pb2.DESCRIPTOR.name
        assert set(files_of(by_name)) > {process_pb2.DESCRIPTOR.name}  # with its imports
        for not_found in answers[len(services) + 3 : len(services) + 5]:
            assert not_found.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
        assert answers[-1].error_response.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]

        expected = library_answers(services, requests)
        assert [a.SerializeToString() for a in answers] == [e.SerializeToString() for e in expected]
