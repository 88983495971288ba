"""Types of the native record path (kafka_actors/protocol/records/_crecords.c)."""

from collections.abc import Callable, Iterator
from typing import Any, overload

CRC32C_IMPLEMENTATION: str

class LazyRecords:
    """A partition's records as spans, each built into a ConsumerRecord when read."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int, /) -> Any: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def offset_at(self, index: int, /) -> int: ...

def decode_into(
    buf: bytes | memoryview,
    out: Any,
    fetch_offset: int,
    check_crcs: bool,
    read_committed: bool,
    aborted: list[tuple[int, int]],
    decompress: Callable[[int, memoryview], bytes],
    columnar: bool = False,
    /,
) -> None: ...
def records(decoded: Any, start: int, end: int, /) -> list[Any]: ...
def set_column_limit(n: int, /) -> None: ...
def crc32c(data: bytes | bytearray | memoryview, crc: int = 0, /) -> int: ...
def setup(
    record_type: type,
    create_time: object,
    log_append_time: object,
    corrupt_error: type[BaseException],
    unsupported_error: type[BaseException],
    internal_corrupt: type[BaseException],
    malformed_types: tuple[type[BaseException], ...],
    internal_too_large: type[BaseException],
    too_large_error: type[BaseException],
    /,
) -> None: ...
