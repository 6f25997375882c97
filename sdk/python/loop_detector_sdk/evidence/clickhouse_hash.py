"""ClickHouse's hash functions, bit for bit, in plain Python: what the service's SQL computes from content, so
that a fingerprint computed in the app (where the content is) equals the one the service would compute from the
same text (``sdk/test-vectors/evidence.json``; checked against the real functions on chDB by
``tests/sdk/test_sdk_evidence_clickhouse.py``).

* :func:`city_hash64`: ``cityHash64(s)`` (CityHash v1.0.2, the version ClickHouse keeps for compatibility);
  :func:`combine` is how ``cityHash64(a, b, ...)`` folds its arguments (``Hash128to64``), :func:`int_hash` how it
  hashes an integer (an array's length, a ``UInt64`` element), so :func:`hash_strings` is ``cityHash64(a, b)``
  and :func:`hash_pairs` the ``cityHash64(name, arraySort(JSONExtractKeysAndValuesRaw(x)), rest)`` of a tool call;
* :func:`ngram_simhash_ci` / :func:`word_shingle_simhash_ci`: ``ngramSimHashCaseInsensitiveUTF8`` and
  ``wordShingleSimHashCaseInsensitiveUTF8`` with their default shingle size 3, quirks included: the
  case-insensitive variants set bit 5 of every byte (``x | 0x20``), the n-gram variant skips the first n-gram and
  gives the raw CRC of a text shorter than 3 code points (``0xFFFFFFFFFFFFFFFF`` for an empty one), words are runs
  of ASCII letters, digits and non-ASCII bytes, words under 4 bytes are skipped, and every shingle hash is a raw
  CRC-32C (initial value ``0xFFFFFFFF``, no final inversion), so a SimHash has its upper 32 bits clear.

Texts are hashed as UTF-8; a lone surrogate (which UTF-8 cannot carry) as U+FFFD, as JavaScript's
``TextEncoder`` writes it. Speed matters (the completion hook runs before every span ends): the CRC and SimHash
use table lookups and C-speed bulk operations on ``bytes`` where they can.
"""

from __future__ import annotations

import re
import struct
import sys
from array import array
from typing import Final

__all__ = [
    "EMPTY_NGRAM_SIMHASH", "city_hash64", "combine", "hash_pairs", "hash_strings", "int_hash", "ngram_simhash_ci",
    "utf8", "word_shingle_simhash_ci",
]

_M: Final = 0xFFFFFFFFFFFFFFFF
_K0: Final = 0xC3A5C85C97CB3127
_K1: Final = 0xB492B66FBE98F273
_K2: Final = 0x9AE16A3B2F90404F
_K3: Final = 0xC949D7C7509E6557
_KMUL: Final = 0x9DDFEA08EB382D69
_INT_SEED: Final = 0x4CF2D2BAAE6DA887  # IntHash64Impl: intHash64(x ^ seed)
EMPTY_NGRAM_SIMHASH: Final = _M  # ngramSimHash*('') in ClickHouse
_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate as U+FFFD (what JavaScript's ``TextEncoder`` writes)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode()


# -- CityHash64 v1.0.2 ------------------------------------------------------------------------------------------


def combine(low: int, high: int) -> int:
    """``Hash128to64(uint128(low, high))``: how ClickHouse folds the hashes of ``cityHash64``'s arguments."""
    a = ((low ^ high) * _KMUL) & _M
    a ^= a >> 47
    b = ((high ^ a) * _KMUL) & _M
    b ^= b >> 47
    return (b * _KMUL) & _M


def int_hash(x: int) -> int:
    """How ``cityHash64`` hashes an unsigned integer argument or array length (``intHash64(x ^ seed)``)."""
    x = (x ^ _INT_SEED) & _M
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M
    return x ^ (x >> 33)


def _rot(v: int, s: int) -> int:
    return ((v >> s) | (v << (64 - s))) & _M


def _len0to16(s: bytes, n: int) -> int:
    if n > 8:
        a = int.from_bytes(s[:8], "little")
        b = int.from_bytes(s[n - 8:], "little")
        return combine(a, _rot((b + n) & _M, n)) ^ b
    if n >= 4:
        a = int.from_bytes(s[:4], "little")
        return combine((n + (a << 3)) & _M, int.from_bytes(s[n - 4:], "little"))
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        v = ((y * _K2) ^ (z * _K3)) & _M
        return ((v ^ (v >> 47)) * _K2) & _M
    return _K2


def _len17to32(s: bytes, n: int) -> int:
    a = (int.from_bytes(s[:8], "little") * _K1) & _M
    b = int.from_bytes(s[8:16], "little")
    c = (int.from_bytes(s[n - 8:], "little") * _K2) & _M
    d = (int.from_bytes(s[n - 16:n - 8], "little") * _K0) & _M
    return combine((_rot((a - b) & _M, 43) + _rot(c, 30) + d) & _M, (a + _rot(b ^ _K3, 20) - c + n) & _M)


def _len33to64(s: bytes, n: int) -> int:
    f = struct.unpack_from
    z = f("<Q", s, 24)[0]
    a = (f("<Q", s, 0)[0] + (n + f("<Q", s, n - 16)[0]) * _K0) & _M
    b = _rot((a + z) & _M, 52)
    c = _rot(a, 37)
    a = (a + f("<Q", s, 8)[0]) & _M
    c = (c + _rot(a, 7)) & _M
    a = (a + f("<Q", s, 16)[0]) & _M
    vf = (a + z) & _M
    vs = (b + _rot(a, 31) + c) & _M
    a = (f("<Q", s, 16)[0] + f("<Q", s, n - 32)[0]) & _M
    z = f("<Q", s, n - 8)[0]
    b = _rot((a + z) & _M, 52)
    c = _rot(a, 37)
    a = (a + f("<Q", s, n - 24)[0]) & _M
    c = (c + _rot(a, 7)) & _M
    a = (a + f("<Q", s, n - 16)[0]) & _M
    wf = (a + z) & _M
    ws = (b + _rot(a, 31) + c) & _M
    r = ((vf + ws) * _K2 + (wf + vs) * _K0) & _M
    r ^= r >> 47
    r = (r * _K0 + vs) & _M
    return ((r ^ (r >> 47)) * _K2) & _M


def city_hash64(s: bytes) -> int:
    """``cityHash64(s)`` of one string argument (CityHash v1.0.2)."""
    n = len(s)
    if n <= 32:
        return _len0to16(s, n) if n <= 16 else _len17to32(s, n)
    if n <= 64:
        return _len33to64(s, n)
    m, k1 = _M, _K1
    tail = struct.unpack_from("<8Q", s, n - 64)
    x = int.from_bytes(s[:8], "little")
    y = tail[6] ^ k1
    z = tail[1] ^ _K0
    # v = WeakHashLen32WithSeeds(s + n - 64, n, y); w = WeakHashLen32WithSeeds(s + n - 32, n * k1, k0)
    a = (n + tail[0]) & m
    b = _rot((y + a + tail[3]) & m, 21)
    c = a
    a = (a + tail[1] + tail[2]) & m
    v0, v1 = (a + tail[3]) & m, (b + _rot(a, 44) + c) & m
    a = (n * k1 + tail[4]) & m
    b = _rot((_K0 + a + tail[7]) & m, 21)
    c = a
    a = (a + tail[5] + tail[6]) & m
    w0, w1 = (a + tail[7]) & m, (b + _rot(a, 44) + c) & m
    z = (z + (v1 ^ (v1 >> 47)) * k1) & m
    x = (_rot((z + x) & m, 39) * k1) & m
    y = (_rot(y, 33) * k1) & m
    words = struct.unpack_from(f"<{((n - 1) >> 6) * 8}Q", s)
    for i in range(0, len(words), 8):
        s0, s1, s2, s3, s4, s5, s6, s7 = words[i:i + 8]
        x = (((((x + y + v0 + s2) & m) >> 37) | ((x + y + v0 + s2) << 27)) & m) * k1 & m
        t = (y + v1 + s6) & m
        y = (((t >> 42) | (t << 22)) & m) * k1 & m
        x ^= w1
        y ^= v0
        t = z ^ w0
        z = ((t >> 33) | (t << 31)) & m
        # v = WeakHashLen32WithSeeds(s, v1 * k1, x + w0)
        a = (v1 * k1 + s0) & m
        t = ((x + w0) + a + s3) & m
        b = ((t >> 21) | (t << 43)) & m
        c = a
        a = (a + s1 + s2) & m
        v0, v1 = (a + s3) & m, (b + (((a >> 44) | (a << 20)) & m) + c) & m
        # w = WeakHashLen32WithSeeds(s + 32, z + w1, y)
        a = (z + w1 + s4) & m
        t = (y + a + s7) & m
        b = ((t >> 21) | (t << 43)) & m
        c = a
        a = (a + s5 + s6) & m
        w0, w1 = (a + s7) & m, (b + (((a >> 44) | (a << 20)) & m) + c) & m
        z, x = x, z
    return combine((combine(v0, w0) + (y ^ (y >> 47)) * k1 + z) & m, (combine(v1, w1) + x) & m)


def hash_strings(*parts: bytes) -> int:
    """``cityHash64(a, b, ...)`` of String arguments."""
    h = city_hash64(parts[0])
    for p in parts[1:]:
        h = combine(h, city_hash64(p))
    return h


def hash_pairs(name: bytes, pairs: list[tuple[bytes, bytes]], rest: bytes) -> int:
    """``cityHash64(name, pairs, rest)`` with ``pairs`` an ``Array(Tuple(String, String))`` (already sorted)."""
    h = combine(city_hash64(name), int_hash(len(pairs)))
    for key, value in pairs:
        h = combine(h, combine(city_hash64(key), city_hash64(value)))
    return combine(h, city_hash64(rest))


# -- CRC-32C shingles and SimHash -------------------------------------------------------------------------------

_POLY: Final = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        out.append(c)
    return out


_CRC: Final = _table()


def _crc(data: bytes, crc: int = 0xFFFFFFFF) -> int:
    """Raw CRC-32C (the SSE 4.2 instruction's): no final inversion."""
    t = _CRC
    for byte in data:
        crc = t[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


_LOWER_BIT: Final = bytes(b | 0x20 for b in range(256))  # the case-insensitive variants' "lowercase"
# ngrams of three ASCII bytes: crc(0xFFFFFFFF, b0 b1 b2) = _NG0[b0] ^ _NG1[b1] ^ _NG2[b2] (CRC is affine)
_NG0: Final = [_crc(bytes([b | 0x20, 0, 0])) for b in range(256)]
_NG1: Final = [_crc(bytes([0, b | 0x20, 0]), 0) for b in range(256)]
_NG2: Final = [_crc(bytes([0, 0, b | 0x20]), 0) for b in range(256)]
# bit j of a byte, as 0/1 (for counting set bits column by column at C speed)
_BIT: Final = [bytes((b >> j) & 1 for b in range(256)) for j in range(8)]
_LITTLE: Final = sys.byteorder == "little"


def _simhash(hashes: list[int]) -> int:
    """SimHash of 32-bit shingle hashes: bit i set when more than half of them have it (ClickHouse's finger
    vector: +1 per set bit, -1 per clear one, the bit set when the sum is positive). The upper 32 bits are clear
    in every shingle hash, so they are clear here."""
    n = len(hashes)
    packed = array("I", hashes)
    if not _LITTLE:
        packed.byteswap()
    data = packed.tobytes()
    out = 0
    for lane in range(4):
        column = data[lane::4]
        for j in range(8):
            if 2 * column.translate(_BIT[j]).count(1) > n:
                out |= 1 << (lane * 8 + j)
    return out


_NGRAM_CACHE: dict[str, int] = {}


def ngram_simhash_ci(text: str) -> int:
    """``ngramSimHashCaseInsensitiveUTF8(text)`` (n = 3 code points)."""
    if text.isascii():
        data = text.encode()
        n = len(data)
        if n < 3:
            return _crc(data.translate(_LOWER_BIT)) if n else EMPTY_NGRAM_SIMHASH
        if n == 3:
            return 0  # the first n-gram is never counted
        t0, t1, t2 = _NG0, _NG1, _NG2
        hashes = [t0[a] ^ t1[b] ^ t2[c] for a, b, c in zip(data[1:], data[2:], data[3:], strict=False)]
        return _simhash(hashes)
    if len(text) < 3:
        return _crc(utf8(text).translate(_LOWER_BIT))
    cache = _NGRAM_CACHE
    if len(cache) > 65536:
        cache.clear()
    hashes = []
    for i in range(1, len(text) - 2):
        gram = text[i:i + 3]
        h = cache.get(gram)
        if h is None:
            h = cache[gram] = _crc(utf8(gram).translate(_LOWER_BIT))
        hashes.append(h)
    return _simhash(hashes) if hashes else 0


_WORD = re.compile(rb"[0-9A-Za-z\x80-\xff]{4,}")  # words of 4 bytes or more (separators: other ASCII bytes)
_Tables = tuple[list[int], list[int], list[int], list[int]]
_WORD_CRC: dict[bytes, tuple[_Tables | None, int, int, bytes]] = {}
_SHIFT: dict[int, _Tables] = {}  # n -> the tables of "n zero bytes after"
_LONG_WORD: Final = 64  # a longer word is folded in byte by byte (no tables for every length)


def _shift_tables(n: int) -> _Tables:
    """CRC-32C is linear: the CRC of ``x`` followed by ``n`` zero bytes, for any 32-bit ``x``, is the XOR of four
    table entries, one per byte of ``x`` (built once per length ``n``: about a thousand steps)."""
    tables = _SHIFT.get(n)
    if tables is None:
        zeros = bytes(n)
        basis = [_crc(zeros, 1 << j) for j in range(32)]
        built = []
        for k in range(4):
            table = [0] * 256
            for b in range(1, 256):
                low = b & -b
                table[b] = table[b ^ low] ^ basis[8 * k + low.bit_length() - 1]
            built.append(table)
        tables = _SHIFT[n] = (built[0], built[1], built[2], built[3])
    return tables


def _word(word: bytes) -> tuple[_Tables | None, int, int, bytes]:
    """A word's shift tables (its length's), its CRC from the initial value and its CRC from 0, case-folded: the
    CRC after it from any state ``x`` is ``tables(x) ^ own`` (cached per word: words recur)."""
    entry = _WORD_CRC.get(word)
    if entry is None:
        lowered = word.translate(_LOWER_BIT)
        if len(word) > _LONG_WORD:  # no tables for every length, and not kept
            return (None, _crc(lowered), 0, lowered)
        if len(_WORD_CRC) > 65536:
            _WORD_CRC.clear()
        entry = _WORD_CRC[word] = (_shift_tables(len(word)), _crc(lowered), _crc(lowered, 0), lowered)
    return entry


def _after(x: int, entry: tuple[_Tables | None, int, int, bytes]) -> int:
    tables = entry[0]
    if tables is None:
        return _crc(entry[3], x)
    return tables[0][x & 0xFF] ^ tables[1][(x >> 8) & 0xFF] ^ tables[2][(x >> 16) & 0xFF] ^ tables[3][x >> 24] ^ entry[2]


def word_shingle_simhash_ci(text: str) -> int:
    """``wordShingleSimHashCaseInsensitiveUTF8(text)`` (shingles of 3 words)."""
    words = _WORD.findall(utf8(text))
    if not words:
        return 0
    if len(words) <= 3:
        return _simhash([_crc(b"".join(words).translate(_LOWER_BIT))])
    entries = [_word(w) for w in words]
    hashes = []
    for a, b, c in zip(entries, entries[1:], entries[2:], strict=False):
        bt, ct = b[0], c[0]
        if bt is None or ct is None:
            hashes.append(_after(_after(a[1], b), c))
            continue
        x = a[1]
        x = bt[0][x & 0xFF] ^ bt[1][(x >> 8) & 0xFF] ^ bt[2][(x >> 16) & 0xFF] ^ bt[3][x >> 24] ^ b[2]
        hashes.append(ct[0][x & 0xFF] ^ ct[1][(x >> 8) & 0xFF] ^ ct[2][(x >> 16) & 0xFF] ^ ct[3][x >> 24] ^ c[2])
    return _simhash(hashes)
