// The Vercel AI SDK middleware with the real `ai` package (generateText, streamText, wrapLanguageModel,
// tools, stopWhen) around its own mock model (ai/test), against the live service.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { generateText, jsonSchema, stepCountIs, streamText, tool, wrapLanguageModel } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';

import { LoopBlockedError, LoopGuard } from '../dist/index.js';
import { blockedIn, guardTools, loopBlocked, loopGuardMiddleware } from '../dist/vercel-ai.js';
import { fixture, needsService, recordingLogger, uid } from './fixture.mjs';

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const finish = { unified: 'stop', raw: 'stop' };

function textModel(text = 'Deployed.') {
  return new MockLanguageModelV3({
    modelId: 'mock-model',
    doGenerate: async () => ({ content: [{ type: 'text', text }], finishReason: finish, usage, warnings: [] }),
    doStream: async () => ({
      stream: new ReadableStream({
        start(c) {
          c.enqueue({ type: 'stream-start', warnings: [] });
          c.enqueue({ type: 'text-start', id: 't' });
          c.enqueue({ type: 'text-delta', id: 't', delta: text });
          c.enqueue({ type: 'text-end', id: 't' });
          c.enqueue({ type: 'finish', finishReason: finish, usage });
          c.close();
        },
      }),
    }),
  });
}

/** A model stuck in a loop: every step asks for read_file({"path": "config.yaml"}). */
function loopingModel() {
  let n = 0;
  return new MockLanguageModelV3({
    modelId: 'mock-looper',
    doGenerate: async () => ({
      content: [{ type: 'tool-call', toolCallId: `call-${n++}`, toolName: 'read_file',
        input: JSON.stringify({ path: 'config.yaml' }) }],
      finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [],
    }),
  });
}

describe('Vercel AI SDK middleware', needsService, () => {
  const api = fixture?.api;

  test('generateText: each call checked with the prompt fingerprint; the fourth identical call never reaches the model', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const inner = textModel();
    const model = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({ guard, sessionId: uid('ai') }) });
    for (let i = 0; i < 3; i++) {
      assert.equal((await generateText({ model, system: 'You deploy.', prompt: 'Deploy again.' })).text, 'Deployed.');
    }
    await assert.rejects(generateText({ model, system: 'You deploy.', prompt: 'Deploy again.' }),
      (e) => e instanceof LoopBlockedError && e.reason === 'exact_prompt_repeat' && e.retryAfter === 60);
    assert.equal(inner.doGenerateCalls.length, 3);
    await generateText({ model, system: 'You deploy.', prompt: 'Check the logs.' }); // another request
    assert.equal(inner.doGenerateCalls.length, 4);
  });

  test('inject reaches the model in the system message; throttle waits; per-call ids from providerOptions', async () => {
    const slept = [];
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null, sleep: async (ms) => { slept.push(ms); } });
    const inner = textModel();
    const model = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({ guard, sessionId: uid('base') }) });
    await generateText({ model, system: 'Be brief.', prompt: 'hi',
      providerOptions: { loopDetector: { sessionId: fixture.sessions.inject } } });
    const prompt = inner.doGenerateCalls[0].prompt;
    assert.equal(prompt[0].role, 'system');
    assert.ok(prompt[0].content.startsWith('Be brief.\n\nLoop detected.'), prompt[0].content);
    await generateText({ model, prompt: 'no system prompt',
      providerOptions: { loopDetector: { sessionId: fixture.sessions.inject } } });
    assert.ok(inner.doGenerateCalls[1].prompt[0].content.startsWith('Loop detected.'));

    const prepend = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({
      guard, ids: () => ({ sessionId: fixture.sessions.inject }), position: 'prepend' }) });
    await generateText({ model: prepend, system: 'Be brief.', prompt: 'hi' });
    assert.ok(inner.doGenerateCalls[2].prompt[0].content.endsWith('\n\nBe brief.'));

    assert.deepEqual(slept, []);
    await generateText({ model, prompt: 'hi', providerOptions: { loopDetector: { sessionId: fixture.sessions.throttle } } });
    assert.equal(slept.length, 1);
    assert.ok(slept[0] > 0);
  });

  test('streamText: a blocked session is reported to onError and never reaches the model', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const inner = textModel();
    const model = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({ guard, sessionId: fixture.sessions.block }) });
    const errors = [];
    const result = streamText({ model, prompt: 'hi', onError: ({ error }) => errors.push(error) });
    let text = '';
    for await (const part of result.textStream) text += part;
    assert.equal(text, '');
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof LoopBlockedError, String(errors[0]));
    assert.equal(errors[0].body.error.reason, 'loop_detected');
    assert.equal(inner.doStreamCalls.length, 0);

    const ok = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({ guard, sessionId: uid('stream') }) });
    assert.equal(await streamText({ model: ok, prompt: 'hi' }).text, 'Deployed.');
    assert.equal(inner.doStreamCalls.length, 1);
  });

  test('guardTools + loopBlocked: the third identical tool call does not run and ends the run', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const sessionId = uid('tools');
    const ran = [];
    const tools = guardTools({
      read_file: tool({
        description: 'Read a file',
        inputSchema: jsonSchema({ type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }),
        execute: async ({ path }) => { ran.push(path); return 'port: 80'; },
      }),
    }, { guard, sessionId });
    const model = wrapLanguageModel({ model: loopingModel(), middleware: loopGuardMiddleware({ guard, sessionId }) });
    const result = await generateText({ model, prompt: 'Fix the config.', tools,
      stopWhen: [stepCountIs(10), loopBlocked] });
    assert.deepEqual(ran, ['config.yaml', 'config.yaml']);
    assert.equal(result.steps.length, 3);
    const blocked = blockedIn(result.steps);
    assert.ok(blocked instanceof LoopBlockedError);
    assert.equal(blocked.reason, 'failure_loop');
  });

  /** The Vercel agent with one guarded tool, against the service whose only rule is a blocking no_progress. */
  async function preflightRun(results, steps) {
    const guard = new LoopGuard({ endpoint: fixture.preflightApi, blocklistIntervalMs: null });
    const sessionId = uid('pre');
    const ran = [];
    const tools = guardTools({
      read_file: tool({
        description: 'Read a file',
        inputSchema: jsonSchema({ type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }),
        execute: async ({ path }) => { ran.push(path); return results[Math.min(ran.length, results.length) - 1]; },
      }),
    }, { guard, sessionId });
    const inner = loopingModel();
    const model = wrapLanguageModel({ model: inner, middleware: loopGuardMiddleware({ guard, sessionId }) });
    let blocked;
    try {
      const result = await generateText({ model, prompt: 'Fix the config.', tools,
        stopWhen: [stepCountIs(steps), loopBlocked] });
      blocked = blockedIn(result.steps);
    } catch (error) {
      blocked = error;
    }
    return { ran, blocked, modelCalls: inner.doGenerateCalls.length };
  }

  test('pre-flight progress: the same read bringing back the same is refused on the guards\' fingerprints alone', async () => {
    const { ran, blocked, modelCalls } = await preflightRun(['port: 80'], 12);
    assert.ok(blocked instanceof LoopBlockedError, String(blocked));
    assert.equal(blocked.reason, 'no_progress');
    // three wasted steps (reads 2-4 bring back what read 1 did) make the loop: 4 reads ran, and the 5th model call
    // is refused before it reaches the model (the checks decide, not spans: no telemetry reaches this service)
    assert.equal(ran.length, 4);
    assert.equal(modelCalls, 4);
  });

  test('pre-flight progress: the same read bringing back something new each time is never refused', async () => {
    const contents = ['the parser is a recursive descent one over tokens', 'the lexer is table driven and reads bytes',
      'settings come from a YAML file beside the binary', 'plugins are found through entry points at start',
      'the scheduler runs cron expressions in local time', 'metrics are Prometheus counters and histograms'];
    const { ran, blocked } = await preflightRun(contents, 6);
    assert.equal(blocked, undefined, String(blocked));
    assert.equal(ran.length, 6);
  });

  test('no content leaves the app: every check carries fingerprints, never the prompt, tool input or results', async () => {
    const CANARY = 'CANARY-ts-7f3a9';
    const bodies = [];
    const logger = recordingLogger();
    const recording = (input, init) => {
      if (init?.body) bodies.push(String(init.body));
      return fetch(input, init);
    };
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null, fetch: recording, logger });
    const sessionId = uid('canary');
    let n = 0;
    const looper = new MockLanguageModelV3({
      modelId: 'mock-looper',
      doGenerate: async () => ({
        content: [{ type: 'text', text: `Reading it again, ${CANARY}.` }, { type: 'tool-call', toolCallId: `c-${n++}`,
          toolName: 'read_file', input: JSON.stringify({ path: `config-${CANARY}.yaml` }) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [],
      }),
    });
    const tools = guardTools({
      read_file: tool({
        description: 'Read a file',
        inputSchema: jsonSchema({ type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }),
        execute: async () => `port: 80 # ${CANARY}`,
      }),
    }, { guard, sessionId });
    const model = wrapLanguageModel({ model: looper, middleware: loopGuardMiddleware({ guard, sessionId }) });
    const result = await generateText({ model, system: `You fix configs. ${CANARY}`, prompt: `Fix it. ${CANARY}`,
      tools, stopWhen: [stepCountIs(10), loopBlocked] });
    assert.equal(blockedIn(result.steps)?.reason, 'failure_loop'); // caught from the tool's fingerprints alone
    const checks = bodies.map((b) => JSON.parse(b));
    assert.ok(checks.length >= 5, String(checks.length));
    for (const body of bodies) assert.ok(!body.includes(CANARY), body);
    const modelChecks = checks.filter((c) => c.pending?.request_fingerprint);
    const toolChecks = checks.filter((c) => c.pending?.tool_name);
    assert.ok(modelChecks.length >= 3 && toolChecks.length >= 3);
    for (const c of modelChecks) assert.equal(c.pending.evidence.version, 3);
    for (const c of toolChecks) assert.deepEqual(Object.keys(c.pending).sort(), ['evidence', 'tool_name']);
    // the new input of the second call is the tool's result: fingerprinted, so a repeated result repeats its hash
    assert.equal(modelChecks[1].pending.evidence.input, modelChecks[2].pending.evidence.input);
    assert.notEqual(modelChecks[0].pending.evidence.input, modelChecks[1].pending.evidence.input);
    for (const m of [...logger.warnings, ...logger.infos]) assert.ok(!String(m).includes(CANARY), m);
  });

  test('the middleware shape for each AI SDK version', () => {
    const guard = new LoopGuard({ endpoint: 'http://127.0.0.1:1', blocklistIntervalMs: null });
    assert.equal(loopGuardMiddleware({ guard, sessionId: 's' }).specificationVersion, 'v3');
    const v2 = loopGuardMiddleware({ guard, sessionId: 's', specificationVersion: 'v2' });
    assert.equal(v2.middlewareVersion, 'v2');
    assert.equal(loopGuardMiddleware({ guard, sessionId: 's', specificationVersion: 'v4' }).specificationVersion, 'v4');
  });
});
