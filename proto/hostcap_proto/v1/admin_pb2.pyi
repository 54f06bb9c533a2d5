import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
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
    __slots__ = ("spawns", "environments")
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    spawns: _containers.RepeatedCompositeFieldContainer[_process_pb2.SpawnInfo]
    environments: _containers.RepeatedCompositeFieldContainer[_process_pb2.EnvironmentInfo]
    def __init__(self, spawns: _Optional[_Iterable[_Union[_process_pb2.SpawnInfo, _Mapping]]] = ..., environments: _Optional[_Iterable[_Union[_process_pb2.EnvironmentInfo, _Mapping]]] = ...) -> None: ...

class KillRequest(_message.Message):
    __slots__ = ("spawn_id",)
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    def __init__(self, spawn_id: _Optional[str] = ...) -> None: ...

class KillResponse(_message.Message):
    __slots__ = ("spawn_id", "tenant", "exited")
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    spawn_id: str
    tenant: str
    exited: _process_pb2.Exited
    def __init__(self, spawn_id: _Optional[str] = ..., tenant: _Optional[str] = ..., exited: _Optional[_Union[_process_pb2.Exited, _Mapping]] = ...) -> None: ...

class TailAuditRequest(_message.Message):
    __slots__ = ("lines", "follow")
    LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    lines: int
    follow: bool
    def __init__(self, lines: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class QueryAuditRequest(_message.Message):
    __slots__ = ("tenant", "since", "until", "event", "outcome", "spawn_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SPAWN_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    event: str
    outcome: str
    spawn_id: str
    def __init__(self, tenant: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event: _Optional[str] = ..., outcome: _Optional[str] = ..., spawn_id: _Optional[str] = ...) -> None: ...

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
