/**
 * Fingerprints of the call about to be made: stable hashes, never the content itself.
 *
 * `requestFingerprint(model, messages)` is the SHA-256 (hex) of the canonical JSON of
 * `{model, messages, ...extra}`: byte for byte the text the Python SDK hashes
 * (`loop_detector_sdk.fingerprint`), so a request has the same fingerprint in either language
 * (`sdk/test-vectors/fingerprints.json` is read by both test suites). The canonical form is what
 * `JSON.stringify` writes, with object keys sorted by Unicode code point (not by UTF-16 unit, which
 * is what `Array.prototype.sort` would do) and no whitespace. Numbers are doubles as `JSON.stringify`
 * writes them (a `bigint` is rounded to one, as Python rounds an integer beyond 2**53); `undefined`,
 * functions and symbols are left out of objects and are `null` in arrays; `toJSON` is honoured.
 */

import { type PendingEvidence, toolRunEvidence } from './evidence/fingerprints.js';
import { compareCodePoints } from './code-points.js';
import { sha256Hex } from './sha256.js';

export { compareCodePoints };

type NodeCrypto = { createHash(algorithm: string): { update(data: Uint8Array): { digest(enc: 'hex'): string } } };

/**
 * Node's own SHA-256 when the runtime offers it without an import (`process.getBuiltinModule`, Node >= 20.16),
 * about 5x faster on a large request; else (Node 18, Deno, Bun, edge runtimes) the dependency-free one.
 */
const nodeCrypto: NodeCrypto | undefined = (() => {
  try {
    const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
    return proc?.getBuiltinModule?.('node:crypto') as NodeCrypto | undefined;
  } catch {
    return undefined;
  }
})();

function digestHex(data: Uint8Array): string {
  return nodeCrypto ? nodeCrypto.createHash('sha256').update(data).digest('hex') : sha256Hex(data);
}

/** The pending call of a check, in the wire format of `POST /v1/check`. */
export interface Pending {
  request_fingerprint?: string;
  tool_name?: string;
  /** the tool's arguments themselves (older SDKs sent them; this one sends `evidence` instead) */
  tool_arguments?: Record<string, unknown> | unknown[] | string;
  /** the app's fingerprints of the call (`loop-detector-sdk`'s `evidence` helpers): hashes, never the content */
  evidence?: PendingEvidence;
}

const WIDE = /[\ud800-\uffff]/;

function writeValue(value: unknown, key: string, out: string[], stack: unknown[]): boolean {
  let v = value;
  if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') {
    v = (v as { toJSON: (k: string) => unknown }).toJSON(key);
  }
  switch (typeof v) {
    case 'string':
      out.push(JSON.stringify(v)); // escapes exactly what Python's json does, and lone surrogates as \udxxx
      return true;
    case 'number':
      out.push(Number.isFinite(v) ? String(v) : 'null');
      return true;
    case 'bigint': {
      const n = Number(v);
      out.push(Number.isFinite(n) ? String(n) : 'null');
      return true;
    }
    case 'boolean':
      out.push(v ? 'true' : 'false');
      return true;
    case 'object':
      break;
    default: // undefined, function, symbol
      return false;
  }
  if (v === null) {
    out.push('null');
    return true;
  }
  if (stack.includes(v)) throw new TypeError('canonicalJson: a cyclic structure has no JSON form');
  stack.push(v);
  if (Array.isArray(v)) {
    out.push('[');
    for (let i = 0; i < v.length; i++) {
      if (i) out.push(',');
      if (!writeValue(v[i], String(i), out, stack)) out.push('null');
    }
    out.push(']');
  } else {
    const obj = v as Record<string, unknown>;
    const keys = Object.keys(obj);
    // UTF-16 order is code point order unless a key has a surrogate or a character from U+E000 up
    if (keys.length > 1) keys.sort(keys.some((k) => WIDE.test(k)) ? compareCodePoints : undefined);
    out.push('{');
    let first = true;
    for (const k of keys) {
      const mark = out.length;
      out.push(first ? '' : ',', JSON.stringify(k), ':');
      if (writeValue(obj[k], k, out, stack)) first = false;
      else out.length = mark; // a key whose value has no JSON form is left out, as JSON.stringify does
    }
    out.push('}');
  }
  stack.pop();
  return true;
}

/** The canonical JSON text of `value` (see the module's comment); the same as the Python SDK's. */
export function canonicalJson(value: unknown): string {
  const out: string[] = [];
  if (!writeValue(value, '', out, [])) return 'null';
  return out.join('');
}

const encoder = new TextEncoder();

/**
 * SHA-256 (hex) of the canonical `{model, messages, ...extra}`. Extras that are `undefined` or `null`
 * are left out (as the Python SDK leaves out `None`), so `requestFingerprint(m, msgs, { system: undefined })`
 * is `requestFingerprint(m, msgs)`.
 */
export function requestFingerprint(model: string | null | undefined, messages: unknown,
                                   extra: Record<string, unknown> = {}): string {
  const payload: Record<string, unknown> = { model: model ?? null, messages: messages ?? null };
  for (const [k, v] of Object.entries(extra)) {
    if (v !== undefined && v !== null) payload[k] = v;
  }
  return digestHex(encoder.encode(canonicalJson(payload)));
}

/** The `pending` of a check for a model call. */
export function pendingRequest(model: string | null | undefined, messages: unknown,
                               extra: Record<string, unknown> = {}): Pending {
  return { request_fingerprint: requestFingerprint(model, messages, extra) };
}

/**
 * The `pending` of a check for a tool call: its name and the app's fingerprints of it (name + canonical argument
 * values, and the normalized arguments: `evidence`), never the arguments themselves. A JSON string is read as
 * JSON, so `'{"path": "a.py"}'` and `{ path: 'a.py' }` are the same call (in either SDK).
 */
export function pendingTool(name: string, args?: unknown): Pending {
  const out: Pending = { tool_name: name };
  try {
    out.evidence = toolRunEvidence(name, args);
  } catch {
    // a value no fingerprint can be made of: the check goes without (never the check's failure)
  }
  return out;
}
