"""ClickHouse's Native format for a client's protocol revision, from the revision-0 Native chDB writes.

Over HTTP, a client that sends ``client_protocol_version=N`` reads Native blocks as the server writes them for
revision N: a *BlockInfo* before each block when N > 0 (``01 00 02 ff ff ff ff 00``: is_overflows = 0,
bucket_num = -1, end), and after each column's type a ``has_custom`` byte (custom, e.g. sparse, serialization)
when N >= 54454 (``DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION``). clickhouse-go (the Grafana plugin's driver)
always asks for its revision; chDB, like ``clickhouse-local``, only writes revision 0 and takes no
``client_protocol_version``. The column data is the same at every revision, so :func:`for_revision` copies it
unchanged and only inserts the framing, walking each column's bytes by its type to find where it ends.

The walk knows the types of ClickHouse's stable serializations (numbers, strings, dates and times, decimals,
UUID, IPs, enums, Nullable, Array, Map, Tuple, Nested, LowCardinality, SimpleAggregateFunction, the geo
types); a column of another type (Variant, Dynamic, JSON, AggregateFunction...) raises :class:`NativeTypeError`:
such a result is asked for in another format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BLOCK_INFO", "CUSTOM_SERIALIZATION_REVISION", "NativeTypeError", "for_revision", "parse_type"]

BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"
CUSTOM_SERIALIZATION_REVISION = 54454

_FIXED = {
    "UInt8": 1, "Int8": 1, "Bool": 1, "Enum8": 1, "Nothing": 1,
    "UInt16": 2, "Int16": 2, "Date": 2, "Enum16": 2, "BFloat16": 2,
    "UInt32": 4, "Int32": 4, "Float32": 4, "DateTime": 4, "Date32": 4, "IPv4": 4, "Decimal32": 4, "Time": 4,
    "UInt64": 8, "Int64": 8, "Float64": 8, "DateTime64": 8, "Decimal64": 8, "Time64": 8,
    "UInt128": 16, "Int128": 16, "Decimal128": 16, "UUID": 16, "IPv6": 16,
    "UInt256": 32, "Int256": 32, "Decimal256": 32,
}
_GEO = {"Point": "Tuple(Float64, Float64)", "Ring": "Array(Point)", "LineString": "Array(Point)",
        "MultiLineString": "Array(LineString)", "Polygon": "Array(Ring)", "MultiPolygon": "Array(Polygon)"}
_NAMED_ELEMENT = re.compile(r"^(`(?:[^`\\]|\\.)*`|[A-Za-z_][A-Za-z0-9_]*)\s+(\S.*)$", re.S)


class NativeTypeError(ValueError):
    """A column type whose Native serialization this module does not walk."""


@dataclass(frozen=True, slots=True)
class DataType:
    name: str
    args: tuple[DataType, ...] = ()
    params: tuple[str, ...] = ()  # the raw arguments (numbers, quoted strings, named elements' types as text)


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments, respecting parentheses and quotes."""
    parts, depth, start, quote, i = [], 0, 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'`\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def parse_type(text: str) -> DataType:
    text = text.strip()
    if "(" not in text:
        return DataType(text)
    name, _, rest = text.partition("(")
    if not rest.endswith(")"):
        raise NativeTypeError(f"unreadable type {text!r}")
    params = tuple(_split_args(rest[:-1]))
    name = name.strip()
    if name in ("Tuple", "Nested"):
        elements = []
        for p in params:
            m = _NAMED_ELEMENT.match(p)
            elements.append(parse_type(m.group(2)) if m and not p.startswith(("LowCardinality", "Nullable")) else
                            parse_type(p))
        return DataType(name, tuple(elements), params)
    if name in ("Nullable", "Array", "LowCardinality", "Map"):
        return DataType(name, tuple(parse_type(p) for p in params), params)
    if name == "SimpleAggregateFunction":
        return DataType(name, (parse_type(", ".join(params[1:])),), params)
    return DataType(name, (), params)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise NativeTypeError("truncated Native data")
        self.pos += n

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise NativeTypeError("truncated Native data")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def uint64(self) -> int:
        self.skip(8)
        return int.from_bytes(self.data[self.pos - 8:self.pos], "little")

    def string(self) -> bytes:
        n = self.varint()
        self.skip(n)
        return self.data[self.pos - n:self.pos]


def _fixed_size(t: DataType) -> int | None:
    if t.name == "FixedString":
        return int(t.params[0])
    if t.name == "Decimal":
        precision = int(t.params[0])
        return 4 if precision <= 9 else 8 if precision <= 18 else 16 if precision <= 38 else 32
    if t.name.startswith("Interval"):
        return 8
    return _FIXED.get(t.name)


def _resolve(t: DataType) -> DataType:
    if t.name in _GEO:
        return _resolve(parse_type(_GEO[t.name]))
    if t.name == "SimpleAggregateFunction":
        return _resolve(t.args[0])
    if t.name == "Nested":
        return DataType("Array", (DataType("Tuple", t.args),))
    return t


def _skip_prefix(r: _Reader, t: DataType) -> None:
    """The serialization state prefixes, written for the whole column tree before its data."""
    t = _resolve(t)
    if t.name == "LowCardinality":
        r.skip(8)  # the keys serialization version
    elif t.name in ("Nullable", "Array", "Map", "Tuple"):
        for arg in t.args:
            _skip_prefix(r, arg)


_INDEX_SIZES = {0: 1, 1: 2, 2: 4, 3: 8}


def _skip_data(r: _Reader, t: DataType, rows: int) -> None:
    t = _resolve(t)
    size = _fixed_size(t)
    if size is not None:
        r.skip(size * rows)
    elif t.name == "String":
        for _ in range(rows):
            r.skip(r.varint())
    elif t.name == "Nullable":
        r.skip(rows)
        _skip_data(r, t.args[0], rows)
    elif t.name in ("Array", "Map"):
        r.skip(8 * rows)
        total = int.from_bytes(r.data[r.pos - 8:r.pos], "little") if rows else 0
        for arg in t.args:
            _skip_data(r, arg, total)
    elif t.name == "Tuple":
        for arg in t.args:
            _skip_data(r, arg, rows)
    elif t.name == "LowCardinality":
        inner = t.args[0]
        keys = inner.args[0] if inner.name == "Nullable" else inner
        done = 0
        while done < rows:
            flags = r.uint64()
            if flags & (1 << 8):
                raise NativeTypeError("LowCardinality with a global dictionary is not expected in Native output")
            if flags & (1 << 9):
                _skip_data(r, keys, r.uint64())
            count = r.uint64()
            r.skip(count * _INDEX_SIZES[flags & 0xFF])
            done += count
    else:
        raise NativeTypeError(f"the Native layout of {t.name} is not supported here")


def for_revision(data: bytes, revision: int) -> bytes:
    """Revision-0 Native blocks framed as a server writes them for a client of ``revision``."""
    if revision <= 0 or not data:
        return data
    custom = revision >= CUSTOM_SERIALIZATION_REVISION
    r = _Reader(data)
    out = bytearray()
    while r.pos < len(data):
        out += BLOCK_INFO
        start = r.pos
        columns = r.varint()
        rows = r.varint()
        out += data[start:r.pos]
        for _ in range(columns):
            start = r.pos
            r.string()
            type_text = r.string()
            out += data[start:r.pos]
            if custom:
                out.append(0)
            start = r.pos
            if rows:
                t = parse_type(type_text.decode())
                _skip_prefix(r, t)
                _skip_data(r, t, rows)
            out += data[start:r.pos]
    return bytes(out)
