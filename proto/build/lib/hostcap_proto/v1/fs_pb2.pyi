from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_TYPE_UNSPECIFIED: _ClassVar[FileType]
    REGULAR: _ClassVar[FileType]
    DIRECTORY: _ClassVar[FileType]
    SYMLINK: _ClassVar[FileType]
    OTHER: _ClassVar[FileType]
FILE_TYPE_UNSPECIFIED: FileType
REGULAR: FileType
DIRECTORY: FileType
SYMLINK: FileType
OTHER: FileType

class ReadFileRequest(_message.Message):
    __slots__ = ("path", "offset", "max_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    max_bytes: int
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("path", "data", "size", "offset", "truncated", "is_binary", "media_type", "sha256", "file_sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    IS_BINARY_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FILE_SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    size: int
    offset: int
    truncated: bool
    is_binary: bool
    media_type: str
    sha256: str
    file_sha256: str
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ..., offset: _Optional[int] = ..., truncated: _Optional[bool] = ..., is_binary: _Optional[bool] = ..., media_type: _Optional[str] = ..., sha256: _Optional[str] = ..., file_sha256: _Optional[str] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("path", "data", "create_parents", "exclusive", "expected_sha256", "labels", "request_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SHA256_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    create_parents: bool
    exclusive: bool
    expected_sha256: str
    labels: _containers.ScalarMap[str, str]
    request_id: str
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., create_parents: _Optional[bool] = ..., exclusive: _Optional[bool] = ..., expected_sha256: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("path", "size", "sha256", "previous_sha256", "created")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SHA256_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    sha256: str
    previous_sha256: str
    created: bool
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., previous_sha256: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class ListDirectoryRequest(_message.Message):
    __slots__ = ("path", "max_entries", "depth", "include_hidden")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    path: str
    max_entries: int
    depth: int
    include_hidden: bool
    def __init__(self, path: _Optional[str] = ..., max_entries: _Optional[int] = ..., depth: _Optional[int] = ..., include_hidden: _Optional[bool] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "type", "size", "mtime", "target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: FileType
    size: int
    mtime: float
    target: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., size: _Optional[int] = ..., mtime: _Optional[float] = ..., target: _Optional[str] = ...) -> None: ...

class ListDirectoryResponse(_message.Message):
    __slots__ = ("path", "entries", "truncated")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    truncated: bool
    def __init__(self, path: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("path", "type", "size", "mode", "mtime", "writable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    type: FileType
    size: int
    mode: int
    mtime: float
    writable: bool
    def __init__(self, path: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., mtime: _Optional[float] = ..., writable: _Optional[bool] = ...) -> None: ...
