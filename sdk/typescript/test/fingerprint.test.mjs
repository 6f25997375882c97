// Pending fingerprints: the shared vectors (sdk/test-vectors/fingerprints.json, also read by the Python
// tests), SHA-256 against node:crypto, and code point ordering. No server needed.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  canonicalJson, compareCodePoints, pendingRequest, pendingTool, requestFingerprint, sha256Hex, toolRunEvidence,
} from '../dist/index.js';

const vectors = JSON.parse(readFileSync(new URL('../../test-vectors/fingerprints.json', import.meta.url), 'utf8'));

test('the shared vectors: canonical text and sha256', () => {
  assert.ok(vectors.vectors.length >= 10);
  for (const v of vectors.vectors) {
    const payload = { model: v.model, messages: v.messages };
    for (const [k, x] of Object.entries(v.extra ?? {})) if (x !== null) payload[k] = x;
    assert.equal(canonicalJson(payload), v.canonical, v.name);
    assert.equal(requestFingerprint(v.model, v.messages, v.extra ?? {}), v.sha256, v.name);
    assert.equal(sha256Hex(new TextEncoder().encode(v.canonical)), v.sha256, v.name); // the dependency-free hash
    assert.deepEqual(pendingRequest(v.model, v.messages, v.extra ?? {}), { request_fingerprint: v.sha256 });
  }
});

test('the shared tool-argument vectors: integral floats, integers beyond 2**53, beyond the doubles', () => {
  // `json` is the arguments as an agent wrote them (Python writes 1.0, JavaScript 1): parsed, then canonical
  assert.ok(vectors.tool_arguments.length >= 5);
  for (const v of vectors.tool_arguments) {
    assert.equal(canonicalJson(JSON.parse(v.json)), v.canonical, v.name);
  }
});

test('sha256 matches node:crypto on every length around the block boundaries, and on random data', () => {
  for (let n = 0; n < 300; n++) {
    const data = randomBytes(n);
    assert.equal(sha256Hex(data), createHash('sha256').update(data).digest('hex'), `length ${n}`);
  }
  const big = randomBytes(1 << 20);
  assert.equal(sha256Hex(big), createHash('sha256').update(big).digest('hex'));
});

test('keys sort by code point', () => {
  const keys = ['\uff61', '\u{1f600}', 'a', '\ue000', 'é', '\ud800', '\ud83d', '\ud83dz', ''];
  const byCodePoint = [...keys].sort((a, b) => {
    const x = [...a].map((c) => c.codePointAt(0)), y = [...b].map((c) => c.codePointAt(0));
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
    return x.length - y.length;
  });
  assert.deepEqual([...keys].sort(compareCodePoints), byCodePoint);
  assert.notDeepEqual([...keys].sort(), byCodePoint); // what a plain sort would get wrong
});

test('JSON.stringify semantics for what JSON has no form for', () => {
  assert.equal(canonicalJson({ b: undefined, a: () => 1, c: [undefined, Symbol('s')], d: NaN, e: -Infinity }),
    '{"c":[null,null],"d":null,"e":null}');
  assert.equal(canonicalJson({ when: new Date(0) }), '{"when":"1970-01-01T00:00:00.000Z"}');
  assert.equal(canonicalJson(12345678901234567890n), '12345678901234567000');
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => canonicalJson(cyclic), TypeError);
  assert.equal(requestFingerprint('m', [], { system: undefined }), requestFingerprint('m', []));
});

test('pendingTool: the tool call as its fingerprints, never its arguments', () => {
  const tool = pendingTool('read', { p: 1, q: 'a.py' });
  assert.deepEqual(Object.keys(tool).sort(), ['evidence', 'tool_name']);
  assert.deepEqual(tool, { tool_name: 'read', evidence: toolRunEvidence('read', { p: 1, q: 'a.py' }) });
  assert.deepEqual(pendingTool('read', '{"q": "a.py", "p": 1.0}'), tool); // a JSON string is read as JSON
  assert.notDeepEqual(pendingTool('read', { p: 2, q: 'a.py' }), tool);
  assert.deepEqual(pendingTool('noop'), { tool_name: 'noop', evidence: toolRunEvidence('noop', undefined) });
  assert.ok(!JSON.stringify(pendingTool('read', { secret: 'CANARY-7' })).includes('CANARY-7'));
});
