from hostcap_proto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    READ_ONLY: _ClassVar[Tier]
    READ_WRITE: _ClassVar[Tier]
TIER_UNSPECIFIED: Tier
READ_ONLY: Tier
READ_WRITE: Tier

class CapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Root(_message.Message):
    __slots__ = ("path", "tier", "primary")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    path: str
    tier: Tier
    primary: bool
    def __init__(self, path: _Optional[str] = ..., tier: _Optional[_Union[Tier, str]] = ..., primary: _Optional[bool] = ...) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("tenant", "daemon_version", "run_as_uid", "run_as_gid", "roots", "path", "allowed_executable_dirs", "default_limits", "ceilings", "protections", "landlock_abi", "cgroup_version", "cgroup_controllers", "memory_limit_mechanism", "max_concurrent_spawns", "env_allowlist", "max_read_bytes", "max_write_bytes", "fs_protections", "socket_families", "cpu_weight", "cpu_max_cores", "disk_budget_bytes", "disk_budget_mechanism", "frontend_protections", "frontend_uid", "network")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_AS_UID_FIELD_NUMBER: _ClassVar[int]
    RUN_AS_GID_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_EXECUTABLE_DIRS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_LIMITS_FIELD_NUMBER: _ClassVar[int]
    CEILINGS_FIELD_NUMBER: _ClassVar[int]
    PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    LANDLOCK_ABI_FIELD_NUMBER: _ClassVar[int]
    CGROUP_VERSION_FIELD_NUMBER: _ClassVar[int]
    CGROUP_CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_MECHANISM_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_SPAWNS_FIELD_NUMBER: _ClassVar[int]
    ENV_ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    MAX_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FAMILIES_FIELD_NUMBER: _ClassVar[int]
    CPU_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CPU_MAX_CORES_FIELD_NUMBER: _ClassVar[int]
    DISK_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BUDGET_MECHANISM_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_UID_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    daemon_version: str
    run_as_uid: int
    run_as_gid: int
    roots: _containers.RepeatedCompositeFieldContainer[Root]
    path: _containers.RepeatedScalarFieldContainer[str]
    allowed_executable_dirs: _containers.RepeatedScalarFieldContainer[str]
    default_limits: _common_pb2.Limits
    ceilings: _common_pb2.Limits
    protections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Protection]
    landlock_abi: int
    cgroup_version: str
    cgroup_controllers: _containers.RepeatedScalarFieldContainer[str]
    memory_limit_mechanism: str
    max_concurrent_spawns: int
    env_allowlist: _containers.RepeatedScalarFieldContainer[str]
    max_read_bytes: int
    max_write_bytes: int
    fs_protections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Protection]
    socket_families: _containers.RepeatedScalarFieldContainer[str]
    cpu_weight: int
    cpu_max_cores: float
    disk_budget_bytes: int
    disk_budget_mechanism: str
    frontend_protections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Protection]
    frontend_uid: int
    network: Network
    def __init__(self, tenant: _Optional[str] = ..., daemon_version: _Optional[str] = ..., run_as_uid: _Optional[int] = ..., run_as_gid: _Optional[int] = ..., roots: _Optional[_Iterable[_Union[Root, _Mapping]]] = ..., path: _Optional[_Iterable[str]] = ..., allowed_executable_dirs: _Optional[_Iterable[str]] = ..., default_limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., ceilings: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., protections: _Optional[_Iterable[_Union[_common_pb2.Protection, _Mapping]]] = ..., landlock_abi: _Optional[int] = ..., cgroup_version: _Optional[str] = ..., cgroup_controllers: _Optional[_Iterable[str]] = ..., memory_limit_mechanism: _Optional[str] = ..., max_concurrent_spawns: _Optional[int] = ..., env_allowlist: _Optional[_Iterable[str]] = ..., max_read_bytes: _Optional[int] = ..., max_write_bytes: _Optional[int] = ..., fs_protections: _Optional[_Iterable[_Union[_common_pb2.Protection, _Mapping]]] = ..., socket_families: _Optional[_Iterable[str]] = ..., cpu_weight: _Optional[int] = ..., cpu_max_cores: _Optional[float] = ..., disk_budget_bytes: _Optional[int] = ..., disk_budget_mechanism: _Optional[str] = ..., frontend_protections: _Optional[_Iterable[_Union[_common_pb2.Protection, _Mapping]]] = ..., frontend_uid: _Optional[int] = ..., network: _Optional[_Union[Network, _Mapping]] = ...) -> None: ...

class Network(_message.Message):
    __slots__ = ("mode", "allow", "deny", "resolve", "proxy_url", "max_connections", "max_bytes", "connect_timeout_seconds", "proxy_protections", "proxy_running")
    MODE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_FIELD_NUMBER: _ClassVar[int]
    PROXY_URL_FIELD_NUMBER: _ClassVar[int]
    MAX_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROXY_PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    PROXY_RUNNING_FIELD_NUMBER: _ClassVar[int]
    mode: str
    allow: _containers.RepeatedScalarFieldContainer[str]
    deny: _containers.RepeatedScalarFieldContainer[str]
    resolve: _containers.RepeatedScalarFieldContainer[str]
    proxy_url: str
    max_connections: int
    max_bytes: int
    connect_timeout_seconds: float
    proxy_protections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Protection]
    proxy_running: bool
    def __init__(self, mode: _Optional[str] = ..., allow: _Optional[_Iterable[str]] = ..., deny: _Optional[_Iterable[str]] = ..., resolve: _Optional[_Iterable[str]] = ..., proxy_url: _Optional[str] = ..., max_connections: _Optional[int] = ..., max_bytes: _Optional[int] = ..., connect_timeout_seconds: _Optional[float] = ..., proxy_protections: _Optional[_Iterable[_Union[_common_pb2.Protection, _Mapping]]] = ..., proxy_running: _Optional[bool] = ...) -> None: ...
