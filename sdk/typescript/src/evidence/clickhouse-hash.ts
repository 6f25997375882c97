/**
 * ClickHouse's hash functions, bit for bit: `cityHash64` (CityHash v1.0.2, and how it folds several arguments, an
 * array, an integer), `ngramSimHashCaseInsensitiveUTF8` and `wordShingleSimHashCaseInsensitiveUTF8` (shingles of 3,
 * raw CRC-32C per shingle). The same functions as the Python SDK's `loop_detector_sdk.evidence.clickhouse_hash`,
 * checked against the same vectors (`sdk/test-vectors/evidence.json`, made by ClickHouse itself).
 *
 * Texts are hashed as UTF-8 (`TextEncoder`: a lone surrogate as U+FFFD). 64-bit values are `bigint`.
 */

const M = (1n << 64n) - 1n;
const K0 = 0xc3a5c85c97cb3127n;
const K1 = 0xb492b66fbe98f273n;
const K2 = 0x9ae16a3b2f90404fn;
const K3 = 0xc949d7c7509e6557n;
const KMUL = 0x9ddfea08eb382d69n;
const INT_SEED = 0x4cf2d2baae6da887n;
/** `ngramSimHash*('')` in ClickHouse. */
export const EMPTY_NGRAM_SIMHASH = M;

const encoder = new TextEncoder();

/** The UTF-8 bytes of a text. */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** `Hash128to64(uint128(low, high))`: how `cityHash64` folds the hashes of its arguments. */
export function combine(low: bigint, high: bigint): bigint {
  let a = ((low ^ high) * KMUL) & M;
  a ^= a >> 47n;
  let b = ((high ^ a) * KMUL) & M;
  b ^= b >> 47n;
  return (b * KMUL) & M;
}

/** How `cityHash64` hashes an unsigned integer argument or an array's length. */
export function intHash(value: bigint | number): bigint {
  let x = (BigInt(value) ^ INT_SEED) & M;
  x ^= x >> 33n;
  x = (x * 0xff51afd7ed558ccdn) & M;
  x ^= x >> 33n;
  x = (x * 0xc4ceb9fe1a85ec53n) & M;
  return x ^ (x >> 33n);
}

function rot(v: bigint, s: bigint): bigint {
  return ((v >> s) | (v << (64n - s))) & M;
}

function shiftMix(v: bigint): bigint {
  return v ^ (v >> 47n);
}

function f64(view: DataView, i: number): bigint {
  return view.getBigUint64(i, true);
}

function f32(view: DataView, i: number): bigint {
  return BigInt(view.getUint32(i, true));
}

function len0to16(s: Uint8Array, view: DataView, n: number): bigint {
  const len = BigInt(n);
  if (n > 8) {
    const a = f64(view, 0);
    const b = f64(view, n - 8);
    return combine(a, rot((b + len) & M, len)) ^ b;
  }
  if (n >= 4) {
    const a = f32(view, 0);
    return combine((len + (a << 3n)) & M, f32(view, n - 4));
  }
  if (n > 0) {
    const y = BigInt(s[0] + (s[n >> 1] << 8));
    const z = BigInt(n + (s[n - 1] << 2));
    return (shiftMix(((y * K2) ^ (z * K3)) & M) * K2) & M;
  }
  return K2;
}

function len17to32(view: DataView, n: number): bigint {
  const a = (f64(view, 0) * K1) & M;
  const b = f64(view, 8);
  const c = (f64(view, n - 8) * K2) & M;
  const d = (f64(view, n - 16) * K0) & M;
  return combine((rot((a - b) & M, 43n) + rot(c, 30n) + d) & M, (a + rot(b ^ K3, 20n) - c + BigInt(n)) & M);
}

function len33to64(view: DataView, n: number): bigint {
  let z = f64(view, 24);
  let a = (f64(view, 0) + (BigInt(n) + f64(view, n - 16)) * K0) & M;
  let b = rot((a + z) & M, 52n);
  let c = rot(a, 37n);
  a = (a + f64(view, 8)) & M;
  c = (c + rot(a, 7n)) & M;
  a = (a + f64(view, 16)) & M;
  const vf = (a + z) & M;
  const vs = (b + rot(a, 31n) + c) & M;
  a = (f64(view, 16) + f64(view, n - 32)) & M;
  z = f64(view, n - 8);
  b = rot((a + z) & M, 52n);
  c = rot(a, 37n);
  a = (a + f64(view, n - 24)) & M;
  c = (c + rot(a, 7n)) & M;
  a = (a + f64(view, n - 16)) & M;
  const wf = (a + z) & M;
  const ws = (b + rot(a, 31n) + c) & M;
  const r = shiftMix(((vf + ws) * K2 + (wf + vs) * K0) & M);
  return (shiftMix((r * K0 + vs) & M) * K2) & M;
}

function weak(view: DataView, i: number, a0: bigint, b0: bigint): [bigint, bigint] {
  const w = f64(view, i);
  const x = f64(view, i + 8);
  const y = f64(view, i + 16);
  const z = f64(view, i + 24);
  let a = (a0 + w) & M;
  let b = rot((b0 + a + z) & M, 21n);
  const c = a;
  a = (a + x + y) & M;
  b = (b + rot(a, 44n)) & M;
  return [(a + z) & M, (b + c) & M];
}

/** `cityHash64(s)` of one string argument. */
export function cityHash64(s: Uint8Array): bigint {
  const n = s.length;
  const view = new DataView(s.buffer, s.byteOffset, s.byteLength);
  if (n <= 32) return n <= 16 ? len0to16(s, view, n) : len17to32(view, n);
  if (n <= 64) return len33to64(view, n);
  const len = BigInt(n);
  let x = f64(view, 0);
  let y = f64(view, n - 16) ^ K1;
  let z = f64(view, n - 56) ^ K0;
  let v = weak(view, n - 64, len, y);
  let w = weak(view, n - 32, (len * K1) & M, K0);
  z = (z + shiftMix(v[1]) * K1) & M;
  x = (rot((z + x) & M, 39n) * K1) & M;
  y = (rot(y, 33n) * K1) & M;
  const end = (n - 1) & ~63;
  for (let i = 0; i < end; i += 64) {
    x = (rot((x + y + v[0] + f64(view, i + 16)) & M, 37n) * K1) & M;
    y = (rot((y + v[1] + f64(view, i + 48)) & M, 42n) * K1) & M;
    x ^= w[1];
    y ^= v[0];
    z = rot(z ^ w[0], 33n);
    v = weak(view, i, (v[1] * K1) & M, (x + w[0]) & M);
    w = weak(view, i + 32, (z + w[1]) & M, y);
    [z, x] = [x, z];
  }
  return combine((combine(v[0], w[0]) + shiftMix(y) * K1 + z) & M, (combine(v[1], w[1]) + x) & M);
}

/** `cityHash64(a, b, ...)` of String arguments. */
export function hashStrings(...parts: Uint8Array[]): bigint {
  let h = cityHash64(parts[0]);
  for (let i = 1; i < parts.length; i++) h = combine(h, cityHash64(parts[i]));
  return h;
}

/** `cityHash64(name, pairs, rest)`, `pairs` an `Array(Tuple(String, String))` (already sorted). */
export function hashPairs(name: Uint8Array, pairs: ReadonlyArray<readonly [Uint8Array, Uint8Array]>,
                          rest: Uint8Array): bigint {
  let h = combine(cityHash64(name), intHash(pairs.length));
  for (const [key, value] of pairs) h = combine(h, combine(cityHash64(key), cityHash64(value)));
  return combine(h, cityHash64(rest));
}

// -- CRC-32C shingles and SimHash -------------------------------------------------------------------------------

const CRC = (() => {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    table[i] = c >>> 0;
  }
  return table;
})();

/** Raw CRC-32C (initial 0xFFFFFFFF, no final inversion) of `data[start, end)`, every byte with bit 5 set. */
function crcLower(data: Uint8Array, start: number, end: number): number {
  let crc = 0xffffffff;
  for (let i = start; i < end; i++) crc = CRC[(crc ^ (data[i] | 0x20)) & 0xff] ^ (crc >>> 8);
  return crc >>> 0;
}

function simhash(hashes: ArrayLike<number>): bigint {
  const n = hashes.length;
  const counts = new Int32Array(32);
  for (let i = 0; i < n; i++) {
    const h = hashes[i];
    for (let bit = 0; bit < 32; bit++) if ((h >>> bit) & 1) counts[bit]++;
  }
  let out = 0n;
  for (let bit = 0; bit < 32; bit++) if (2 * counts[bit] > n) out |= 1n << BigInt(bit);
  return out;
}

/** The length of the UTF-8 sequence a byte starts (ClickHouse's `UTF8::seqLength`). */
function seqLength(byte: number): number {
  if (byte < 0x80 || byte >= 0xf8) return 1;
  if (byte >= 0xf0) return 4;
  if (byte >= 0xe0) return 3;
  if (byte >= 0xc0) return 2;
  return 1;
}

/** `ngramSimHashCaseInsensitiveUTF8(text)` (n = 3 code points; the first n-gram is never counted). */
export function ngramSimhashCI(text: string): bigint {
  const data = utf8(text);
  const end = data.length;
  let wordEnd = 0;
  for (let i = 0; i < 3; i++) {
    if (wordEnd >= end) return end ? BigInt(crcLower(data, 0, end)) : EMPTY_NGRAM_SIMHASH;
    wordEnd = Math.min(wordEnd + seqLength(data[wordEnd]), end);
  }
  let wordStart = 0;
  const hashes: number[] = [];
  while (wordEnd < end) {
    wordStart = Math.min(wordStart + seqLength(data[wordStart]), wordEnd);
    wordEnd = Math.min(wordEnd + seqLength(data[wordEnd]), end);
    hashes.push(crcLower(data, wordStart, wordEnd));
  }
  return simhash(hashes);
}

function isWordByte(c: number): boolean {
  return c >= 0x80 || (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

/** `wordShingleSimHashCaseInsensitiveUTF8(text)` (shingles of 3 words of 4 bytes or more). */
export function wordShingleSimhashCI(text: string): bigint {
  const data = utf8(text);
  const words: Uint8Array[] = [];
  let i = 0;
  while (i < data.length) {
    while (i < data.length && !isWordByte(data[i])) i++;
    const start = i;
    while (i < data.length && isWordByte(data[i])) i++;
    if (i - start >= 4) words.push(data.subarray(start, i));
  }
  if (!words.length) return 0n;
  const shingle = (list: Uint8Array[]): number => {
    let size = 0;
    for (const w of list) size += w.length;
    const joined = new Uint8Array(size);
    let at = 0;
    for (const w of list) {
      joined.set(w, at);
      at += w.length;
    }
    return crcLower(joined, 0, size);
  };
  if (words.length <= 3) return simhash([shingle(words)]);
  const hashes: number[] = [];
  for (let k = 0; k + 3 <= words.length; k++) hashes.push(shingle(words.slice(k, k + 3)));
  return simhash(hashes);
}
