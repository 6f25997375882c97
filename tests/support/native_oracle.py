"""An independent reader of ClickHouse's Native format at a protocol revision, for checking what our HTTP endpoint
writes: clickhouse-driver's own block reader (the native-protocol Python client, which decodes BlockInfo, the
custom-serialization byte and every column type itself), fed from bytes instead of a socket."""

from __future__ import annotations

from types import SimpleNamespace

from clickhouse_driver.bufferedreader import BufferedReader
from clickhouse_driver.context import Context
from clickhouse_driver.streams.native import BlockInputStream


class _BytesReader(BufferedReader):
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._given = False
        super().__init__(max(len(data), 1))

    def read_into_buffer(self) -> None:
        if self._given:
            raise EOFError("end of the Native data")
        self.buffer = bytearray(self._data)
        self.current_buffer_size = len(self._data)
        self._given = True


def read_native(data: bytes, revision: int) -> list[tuple[list[tuple[str, str]], list[tuple]]]:
    """Every block as (columns with types, rows)."""
    context = Context()
    context.server_info = SimpleNamespace(used_revision=revision, timezone="UTC", get_timezone=lambda: "UTC")
    context.settings = {}
    context.client_settings = {"use_numpy": False, "strings_as_bytes": False, "strings_encoding": "utf-8",
                               "input_format_null_as_default": False, "namedtuple_as_json": False}
    reader = _BytesReader(data)
    stream = BlockInputStream(reader, context)
    blocks = []
    consumed = 0
    while consumed < len(data):
        block = stream.read()
        blocks.append((block.columns_with_types, block.get_rows()))
        consumed = reader.position if hasattr(reader, "position") else len(data)
    return blocks
