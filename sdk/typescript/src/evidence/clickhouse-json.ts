/**
 * JSON as ClickHouse's JSON functions read and re-serialize it (`JSONType`, `JSONExtractRaw`,
 * `JSONExtractKeysAndValuesRaw`, and `toString` of the sorted pairs): the Python SDK's
 * `loop_detector_sdk.evidence.clickhouse_json`, whose docstring lists the rules. A parser of its own, because
 * `JSON.parse` rounds long integers, keeps one of duplicate keys and moves integer-like keys first, all of which
 * ClickHouse keeps as the text has them.
 */

import { compareCodePoints } from '../code-points.js';

export type Pairs = Array<[string, string]>;

class Invalid extends Error {}

const I64_MIN = -(1n << 63n);
const U64_MAX = (1n << 64n) - 1n;

const SHORT: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** A string as ClickHouse writes it in JSON. */
function writeString(value: string): string {
  let out = '"';
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = value.charCodeAt(i + 1);
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        out += value[i] + value[i + 1];
        i++;
        continue;
      }
      throw new Invalid('lone surrogate');
    }
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += '\\\\';
    else if (c === 0x08) out += '\\b';
    else if (c === 0x0c) out += '\\f';
    else if (c === 0x0a) out += '\\n';
    else if (c === 0x0d) out += '\\r';
    else if (c === 0x09) out += '\\t';
    else if (c < 0x20 || c === 0x2028 || c === 0x2029) out += '\\u' + c.toString(16).toUpperCase().padStart(4, '0');
    else out += value[i];
  }
  return out + '"';
}

/** A double as ClickHouse writes it in JSON: ECMAScript's layout, the exponent without `+`, `-0` kept. */
export function numberText(value: number): string {
  if (value === 0) return Object.is(value, -0) ? '-0' : '0';
  return String(value).replace('e+', 'e');
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

class Parser {
  pos = 0;
  constructor(readonly text: string) {}

  ws(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  /** The next value, written as ClickHouse re-serializes it; `pairs` collects a top-level object's members. */
  value(pairs?: Pairs): string {
    this.ws();
    const t = this.text;
    const c = t[this.pos];
    if (c === '{') {
      this.pos++;
      const members: string[] = [];
      this.ws();
      if (t[this.pos] === '}') {
        this.pos++;
        return '{}';
      }
      for (;;) {
        this.ws();
        if (t[this.pos] !== '"') throw new Invalid('key');
        const key = this.string();
        this.ws();
        if (t[this.pos] !== ':') throw new Invalid(':');
        this.pos++;
        const item = this.value();
        const keyText = writeString(key);
        members.push(keyText + ':' + item);
        pairs?.push([key, item]);
        this.ws();
        if (t[this.pos] === ',') {
          this.pos++;
          continue;
        }
        if (t[this.pos] === '}') {
          this.pos++;
          return '{' + members.join(',') + '}';
        }
        throw new Invalid('object');
      }
    }
    if (c === '[') {
      this.pos++;
      const items: string[] = [];
      this.ws();
      if (t[this.pos] === ']') {
        this.pos++;
        return '[]';
      }
      for (;;) {
        items.push(this.value());
        this.ws();
        if (t[this.pos] === ',') {
          this.pos++;
          continue;
        }
        if (t[this.pos] === ']') {
          this.pos++;
          return '[' + items.join(',') + ']';
        }
        throw new Invalid('array');
      }
    }
    if (c === '"') return writeString(this.string());
    for (const literal of ['true', 'false', 'null']) {
      if (t.startsWith(literal, this.pos)) {
        this.pos += literal.length;
        return literal;
      }
    }
    NUMBER.lastIndex = this.pos;
    const m = NUMBER.exec(t);
    if (!m) throw new Invalid('value');
    this.pos += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      const big = BigInt(m[0]);
      return big >= I64_MIN && big <= U64_MAX ? big.toString() : '"' + m[0] + '"';
    }
    const value = Number(m[0]);
    if (!Number.isFinite(value)) throw new Invalid('number out of range');
    return numberText(value);
  }

  /** A string literal, decoded (escapes, surrogate pairs); a raw control character or lone surrogate is invalid. */
  string(): string {
    const t = this.text;
    this.pos++;
    let out = '';
    for (;;) {
      if (this.pos >= t.length) throw new Invalid('string');
      const c = t.charCodeAt(this.pos);
      if (c === 0x22) {
        this.pos++;
        return out;
      }
      if (c < 0x20) throw new Invalid('control character');
      if (c !== 0x5c) {
        out += t[this.pos++];
        continue;
      }
      const e = t[this.pos + 1];
      if (e === 'u') {
        const hex = t.slice(this.pos + 2, this.pos + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new Invalid('escape');
        out += String.fromCharCode(parseInt(hex, 16));
        this.pos += 6;
      } else if (e !== undefined && e in SHORT) {
        out += SHORT[e];
        this.pos += 2;
      } else {
        throw new Invalid('escape');
      }
    }
  }
}

function parseDocument(text: string, pairs?: Pairs): string {
  const parser = new Parser(text.startsWith('\ufeff') ? text.slice(1) : text);
  const raw = parser.value(pairs);
  parser.ws();
  if (parser.pos !== parser.text.length) throw new Invalid('trailing text');
  return raw;
}

/** `JSONExtractRaw(text)`: the document re-serialized; undefined when it is not one ClickHouse accepts. */
export function documentRaw(text: string): string | undefined {
  try {
    return parseDocument(text);
  } catch (err) {
    if (err instanceof Invalid || err instanceof RangeError) return undefined;
    throw err;
  }
}

/** `arraySort(JSONExtractKeysAndValuesRaw(text))` when `text` is a JSON object, else undefined. */
export function objectPairs(text: string): Pairs | undefined {
  const pairs: Pairs = [];
  let raw: string;
  try {
    raw = parseDocument(text, pairs);
  } catch (err) {
    if (err instanceof Invalid || err instanceof RangeError) return undefined;
    throw err;
  }
  if (!raw.startsWith('{')) return undefined;
  return pairs.sort((a, b) => compareCodePoints(a[0], b[0]) || compareCodePoints(a[1], b[1]));
}

const QUOTED: Record<string, string> = {
  '\\': '\\\\', "'": "\\'", '\0': '\\0', '\b': '\\b', '\t': '\\t', '\n': '\\n', '\f': '\\f', '\r': '\\r',
};

function quoted(text: string): string {
  return text.replace(/[\\'\0\b\t\n\f\r]/g, (c) => QUOTED[c]);
}

/** `toString` of an `Array(Tuple(String, String))`: `[('key','value'),...]`. */
export function pairsText(pairs: Pairs): string {
  return '[' + pairs.map(([k, v]) => `('${quoted(k)}','${quoted(v)}')`).join(',') + ']';
}

/** A JavaScript value as an instrumentation serializes it (`JSON.stringify`) and ClickHouse re-serializes it. */
export function valueRaw(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = JSON.stringify(String(value));
  }
  if (text === undefined) return 'null';
  return documentRaw(text) ?? text;
}
