// The app's fingerprints (the evidence helpers) against the shared vectors, which ClickHouse made
// (sdk/test-vectors/evidence.json; the Python SDK is tested against the same file), and the Vercel AI SDK prompt
// reader. No server needed.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  argumentsText, fromSemconv, fromVercelPrompt, modelCallEvidence, newInputText, normalize, observation, reply,
  replyText, requestFp, toolCall, toolRun, withoutKeys,
} from '../dist/index.js';

const doc = JSON.parse(readFileSync(new URL('../../test-vectors/evidence.json', import.meta.url), 'utf8'));
const s = (x) => x.toString();

test('the shared vectors: texts -> normalized -> observation and reply', () => {
  assert.ok(doc.texts.length >= 15 && doc.version === 3);
  assert.ok(doc.texts.some((v) => v.observation.ack) && doc.texts.some((v) => v.observation.pending));
  for (const v of doc.texts) {
    assert.equal(normalize(v.text), v.normalized, v.name);
    assert.equal(normalize(withoutKeys(v.text)), v.normalized_without_keys, v.name);
    const o = observation(v.text);
    assert.deepEqual({ fp: s(o.fp), simhash: s(o.simhash), empty: o.empty, chars: o.chars, failed: o.failed,
      shape: s(o.shape), pending: o.pending, ack: o.ack }, v.observation, v.name);
    const r = reply(v.text);
    assert.deepEqual({ fp: s(r.fp), simhash: s(r.simhash) }, v.reply, v.name);
  }
});

test('the shared vectors: tool calls -> canonical arguments -> call and run', () => {
  assert.ok(doc.tool_calls.length >= 10);
  for (const v of doc.tool_calls) {
    const canonical = argumentsText(v.arguments);
    assert.equal(canonical, v.canonical, v.name);
    assert.equal(normalize(canonical), v.normalized, v.name);
    const call = toolCall(v.tool, canonical);
    assert.deepEqual({ fp: s(call.fp), simhash: s(call.simhash) }, v.call, v.name);
    const run = toolRun(v.tool, canonical);
    assert.deepEqual({ fp: s(run.fp), args_fp: s(run.argsFp), args_simhash: s(run.argsSimhash) }, v.run, v.name);
  }
});

test('the shared vectors: whole calls -> new input, reply, request, evidence', () => {
  assert.ok(doc.calls.length >= 4);
  for (const v of doc.calls) {
    const inputs = fromSemconv(v.inputs);
    const outputs = fromSemconv(v.outputs);
    assert.equal(newInputText(inputs), v.new_input, v.name);
    assert.equal(replyText(outputs), v.reply_text, v.name);
    assert.equal(s(requestFp(v.model, inputs)), v.request, v.name);
    assert.deepEqual(modelCallEvidence(v.model, inputs), {
      version: 3, request: v.request, input: v.observation.fp, input_simhash: v.observation.simhash,
      input_empty: v.observation.empty, input_chars: v.observation.chars, input_failed: v.observation.failed,
      input_shape: v.observation.shape, input_pending: v.observation.pending, input_ack: v.observation.ack }, v.name);
    const calls = outputs.flatMap((m) => m.parts.filter((p) => p.kind === 'tool_call'))
      .map((p) => toolCall(p.name, p.arguments)).map((c) => ({ fp: s(c.fp), simhash: s(c.simhash) }));
    assert.deepEqual(calls, v.tool_calls, v.name);
  }
});

test('a Vercel AI SDK prompt reads as the same conversation in the semantic conventions', () => {
  const prompt = [
    { role: 'system', content: 'You fix builds.' },
    { role: 'user', content: [{ type: 'text', text: 'Fix it.' }] },
    { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'c1', toolName: 'read_file',
      input: { path: 'a.py' } }] },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c1', toolName: 'read_file',
      output: { type: 'text', value: 'import os' } }, { type: 'tool-result', toolCallId: 'c2', toolName: 'ls',
      output: { type: 'json', value: { files: ['a.py'] } } }] },
  ];
  const semconv = [
    { role: 'system', parts: [{ type: 'text', content: 'You fix builds.' }] },
    { role: 'user', parts: [{ type: 'text', content: 'Fix it.' }] },
    { role: 'assistant', parts: [{ type: 'tool_call', name: 'read_file', arguments: { path: 'a.py' }, id: 'c1' }] },
    { role: 'tool', parts: [{ type: 'tool_call_response', response: 'import os', id: 'c1' },
      { type: 'tool_call_response', response: { files: ['a.py'] }, id: 'c2' }] },
  ];
  assert.deepEqual(fromVercelPrompt(prompt), fromSemconv(semconv));
  assert.equal(newInputText(fromVercelPrompt(prompt)), 'import os {"files":["a.py"]}');
  assert.deepEqual(modelCallEvidence('m', fromVercelPrompt(prompt)), modelCallEvidence('m', fromSemconv(semconv)));
});
