// LoopGuard against a real running service: every action applied, pending fingerprints refusing a
// repeat before it is sent (also one started by the Python SDK), the cached block list with ETag, and
// the endpoint down or hung (fail open, fail closed).
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';

import {
  DEFAULT_INSTRUCTION, LoopBlockedError, LoopGuard, pendingRequest, pendingTool, requestFingerprint,
} from '../dist/index.js';
import { countingFetch, fixture, needsService, recordingLogger, uid } from './fixture.mjs';

const api = fixture?.api;
const messages = [{ role: 'system', content: 'You fix builds.' }, { role: 'user', content: 'retry' }];

describe('against the live service', needsService, () => {
  test('allow for an unknown session; a session id is required', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const d = await guard.check({ sessionId: uid('new') });
    assert.equal(d.action, 'allow');
    assert.equal(d.source, 'server');
    assert.equal(await guard.beforeCall({ sessionId: uid('new') }), undefined);
    await assert.rejects(guard.check({}), TypeError);
  });

  test('warn, throttle (sleeps the delay), inject (the instruction), block (throws with the 429 body)', async () => {
    const slept = [];
    const logger = recordingLogger();
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null, logger,
      sleep: async (ms) => { slept.push(ms); } });
    const s = fixture.sessions;

    const warn = await guard.check({ sessionId: s.warn });
    assert.equal(warn.action, 'warn');
    assert.ok(warn.warning && warn.warning.endsWith(warn.dominantSignal), warn.warning);
    assert.equal(await guard.beforeCall({ sessionId: s.warn }), undefined);
    assert.equal(logger.infos.length, 1);

    const throttle = await guard.check({ sessionId: s.throttle });
    assert.equal(throttle.action, 'throttle');
    assert.equal(await guard.beforeCall({ sessionId: s.throttle }), undefined);
    assert.deepEqual(slept, [throttle.delaySeconds * 1000]);
    assert.ok(throttle.delaySeconds > 0);

    const instruction = await guard.beforeCall({ sessionId: s.inject });
    assert.ok(instruction.startsWith('Loop detected.'), instruction);

    const err = await guard.beforeCall({ sessionId: s.block }).then(() => null, (e) => e);
    assert.ok(err instanceof LoopBlockedError, String(err));
    assert.equal(err.body.error.reason, 'loop_detected');
    assert.equal(err.body.error.enforcement_level, 'hard_stop');
    assert.equal(err.body.error.session_id, s.block);
    assert.equal(typeof err.body.error.confidence, 'number');
    assert.equal(err.retryAfter, 60);
    assert.equal(err.decision.source, 'server');
    assert.equal(err.decision.level, 'hard_stop');
    assert.match(err.message, /loop-detector refused the call: loop_detected/);
  });

  test('a pending fingerprint refuses the exact repeat before it is sent', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const ids = { sessionId: uid('repeat'), traceId: uid('trace') };
    const pending = pendingRequest('gpt-4o-mini', messages);
    for (let i = 0; i < 3; i++) assert.notEqual((await guard.check({ ...ids, pending })).action, 'block'); // 3rd: warn (notify rule)
    const d = await guard.check({ ...ids, pending });
    assert.equal(d.action, 'block');
    assert.equal(d.reason, 'exact_prompt_repeat');
    assert.equal(d.error.error.rule_name, 'stop-repeat');
    const other = pendingRequest('gpt-4o-mini', [...messages, { role: 'user', content: '?' }]);
    assert.equal((await guard.check({ ...ids, pending: other })).action, 'allow');

    const tools = { sessionId: uid('tools'), traceId: uid('trace') };
    const tool = pendingTool('read_file', { path: 'a.py' });
    assert.equal(await guard.beforeCall({ ...tools, pending: tool }), undefined);
    assert.equal(await guard.beforeCall({ ...tools, pending: tool }), undefined);
    await assert.rejects(guard.beforeCall({ ...tools, pending: tool }),
      (e) => e instanceof LoopBlockedError && e.reason === 'failure_loop');
  });

  test('the same request fingerprinted by the Python SDK: the fourth, sent from TypeScript, is refused', async () => {
    const x = fixture.crossLanguage;
    assert.equal(requestFingerprint(x.model, x.messages), x.fingerprint);
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    const d = await guard.check({ sessionId: x.sessionId, traceId: x.traceId,
      pending: pendingRequest(x.model, x.messages) });
    assert.equal(d.action, 'block');
    assert.equal(d.reason, 'exact_prompt_repeat');
  });

  test('the cached block list answers without a round trip; If-None-Match gives 304', async () => {
    const { fetch, paths } = countingFetch();
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: 60_000, fetch });
    assert.equal(await guard.refreshBlocklist(), true);
    assert.equal(guard.blocklist.fetches, 1);
    assert.ok(guard.blocklist.etag);
    assert.equal(await guard.refreshBlocklist(), true);
    assert.equal(guard.blocklist.notModified, 1);
    const before = paths.filter((p) => p === '/v1/check').length;

    const d = await guard.check({ sessionId: fixture.sessions.adminBlocked });
    assert.equal(d.action, 'block');
    assert.equal(d.source, 'cache');
    assert.equal(d.reason, 'session_blocked');
    await assert.rejects(guard.beforeCall({ sessionId: fixture.sessions.adminBlocked }), LoopBlockedError);
    const budget = await guard.beforeCall({ sessionId: uid('any'), feature: 'free' }).then(() => null, (e) => e);
    assert.equal(budget.reason, 'budget_exhausted');
    assert.equal(budget.decision.source, 'cache');
    assert.equal(paths.filter((p) => p === '/v1/check').length, before); // none of them asked the API

    assert.equal((await guard.check({ sessionId: uid('other') })).source, 'server');
    assert.equal(paths.filter((p) => p === '/v1/check').length, before + 1);
  });

  test('a check refreshes a stale copy in the background (no timers)', async () => {
    const { fetch, paths } = countingFetch();
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: 60_000, fetch });
    const stale = () => { guard.blocklist.fetchedAt = performance.now() - 61_000; }; // as if a minute went by
    assert.equal((await guard.check({ sessionId: fixture.sessions.adminBlocked })).source, 'server'); // no copy yet
    await guard.settled();
    assert.equal(guard.blocklist.fetches, 1);
    assert.equal((await guard.check({ sessionId: fixture.sessions.adminBlocked })).source, 'cache');
    assert.equal(paths.filter((p) => p === '/v1/blocklist').length, 1); // fresh: not fetched again
    stale();
    await guard.check({ sessionId: uid('x') });
    await guard.settled();
    assert.equal(guard.blocklist.fetches + guard.blocklist.notModified, 2); // refreshed (a 304 unless it changed)
    guard.close();
    stale();
    await guard.check({ sessionId: uid('x') });
    assert.equal(paths.filter((p) => p === '/v1/blocklist').length, 2); // closed: no more refreshes
  });
});

// -- endpoint down or hung -------------------------------------------------------------------------------
async function closedPort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return `http://127.0.0.1:${port}`;
}

async function hungServer() {
  const sockets = [];
  const server = createServer((s) => sockets.push(s)); // accepts, never answers
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const close = () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(r); });
  return { url: `http://127.0.0.1:${server.address().port}`, close };
}

for (const where of ['down', 'hung']) {
  test(`fail open and fail closed when the endpoint is ${where}`, async () => {
    const hung = where === 'hung' ? await hungServer() : undefined;
    const endpoint = hung ? hung.url : await closedPort();
    try {
      const logger = recordingLogger();
      const open = new LoopGuard({ endpoint, timeoutMs: 200, blocklistIntervalMs: null, logger });
      const d = await open.check({ sessionId: 's1' });
      assert.deepEqual([d.action, d.source, d.reason], ['allow', 'fail_open', 'enforcement_unavailable']);
      assert.equal(await open.beforeCall({ sessionId: 's1' }), undefined);
      assert.equal(open.failures, 2);
      assert.equal(logger.warnings.length, 1); // at most one warning per 10 s
      assert.match(logger.warnings[0], /fail open/);

      const closed = new LoopGuard({ endpoint, timeoutMs: 200, failOpen: false, blocklistIntervalMs: null, logger });
      const c = await closed.check({ sessionId: 's1' });
      assert.deepEqual([c.action, c.source], ['block', 'fail_closed']);
      const err = await closed.beforeCall({ sessionId: 's1' }).then(() => null, (e) => e);
      assert.ok(err instanceof LoopBlockedError);
      assert.equal(err.body.error.reason, 'enforcement_unavailable');
      assert.equal(err.retryAfter, undefined);
      assert.match(logger.warnings[1], /fail closed/);
    } finally {
      await hung?.close();
    }
  });
}

test('an unexpected status is unavailable; the API key is sent', async () => {
  const seen = [];
  const fetch503 = async (input, init) => {
    seen.push(init.headers.authorization);
    return new Response('maintenance', { status: 503 });
  };
  const guard = new LoopGuard({ endpoint: 'http://loop.invalid/', apiKey: 'k1', fetch: fetch503,
    blocklistIntervalMs: null, logger: null });
  const d = await guard.check({ sessionId: 's' });
  assert.equal(d.source, 'fail_open');
  assert.equal(guard.failures, 1);
  assert.deepEqual(seen, ['Bearer k1']);
  assert.ok(DEFAULT_INSTRUCTION.startsWith('Loop detected.'));
});
