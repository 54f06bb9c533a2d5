from hostcap_proto.v1 import process_pb2 as _process_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListSpawnsRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListSpawnsResponse(_message.Message):
    __slots__ = ("spawns",)
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    spawns: _containers.RepeatedCompositeFieldContainer[_process_pb2.SpawnInfo]
    def __init__(self, spawns: _Optional[_Iterable[_Union[_process_pb2.SpawnInfo, _Mapping]]] = ...) -> None: ...

class KillRequest(_message.Message):
    __slots__ = ("spawn_id",)
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    def __init__(self, spawn_id: _Optional[str] = ...) -> None: ...

class KillResponse(_message.Message):
    __slots__ = ("spawn_id", "tenant")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    tenant: str
    def __init__(self, spawn_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class TailAuditRequest(_message.Message):
    __slots__ = ("lines", "follow")
    LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    lines: int
    follow: bool
    def __init__(self, lines: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class AuditLine(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("added", "removed", "changed")
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    added: _containers.RepeatedScalarFieldContainer[str]
    removed: _containers.RepeatedScalarFieldContainer[str]
    changed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, added: _Optional[_Iterable[str]] = ..., removed: _Optional[_Iterable[str]] = ..., changed: _Optional[_Iterable[str]] = ...) -> None: ...
