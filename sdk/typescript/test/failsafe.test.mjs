// Fail safe against the live services: a cached block outlives an outage (the endpoint dead after the list was
// fetched, or a proxy in front answering 502 or garbage), however stale the copy, with failOpen: true; trace-only
// checks; the API token (a second service needs it; this process has it in $LOOP_DETECTOR_API_TOKEN).
import assert from 'node:assert/strict';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';

import { context as otelContext, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';

import { LoopBlockedError, LoopGuard, pendingTool } from '../dist/index.js';
import { activeTraceId } from '../dist/otel.js';
import { fixture, needsService, recordingLogger, uid } from './fixture.mjs';

const api = fixture?.api;

async function closedPort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return `http://127.0.0.1:${port}`;
}

/** A reverse proxy in front of the service, switchable to a broken upstream (502, a body that is not JSON, an array). */
async function proxy(upstream) {
  const state = { mode: 'forward' };
  const server = createHttpServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (state.mode === '502') {
      res.writeHead(502, { 'content-type': 'text/html' }).end('<html><h1>502 Bad Gateway</h1></html>');
      return;
    }
    if (state.mode === 'garbage' || state.mode === 'array') {
      res.writeHead(200, { 'content-type': 'text/html' }).end(state.mode === 'array' ? '[]' : '<html>maintenance</html>');
      return;
    }
    const headers = {};
    for (const k of ['authorization', 'content-type', 'if-none-match']) if (req.headers[k]) headers[k] = req.headers[k];
    const r = await fetch(upstream + req.url, { method: req.method, headers,
      body: req.method === 'POST' ? Buffer.concat(chunks) : undefined });
    const out = {};
    for (const k of ['content-type', 'etag', 'retry-after', 'x-loop-warning']) if (r.headers.get(k)) out[k] = r.headers.get(k);
    res.writeHead(r.status, out).end(Buffer.from(await r.arrayBuffer()));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${server.address().port}`;
  state.close = () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); });
  return state;
}

const makeStale = (...guards) => {
  for (const g of guards) g.blocklist.fetchedAt = performance.now() - g.blocklist.maxStaleMs - 1;
};

const refused = async (guard, ids) => {
  const err = await guard.beforeCall(ids).then(() => null, (e) => e);
  assert.ok(err instanceof LoopBlockedError, `not refused: ${JSON.stringify(ids)}`);
  return err;
};

function fullLogger() {
  const logger = recordingLogger();
  logger.errors = [];
  logger.error = (m) => logger.errors.push(m);
  return logger;
}

describe('fail safe against the live service', needsService, () => {
  test('a cached block outlives the endpoint going dead, however stale, with failOpen: true', async () => {
    const dead = await closedPort();
    let target = api;
    const fetchVia = (input, init) => fetch(input.replace(api, target), init);
    const logger = recordingLogger();
    const opts = { endpoint: api, timeoutMs: 300, blocklistIntervalMs: null, fetch: fetchVia, logger };
    const open = new LoopGuard({ ...opts, failOpen: true });
    const closed = new LoopGuard({ ...opts, failOpen: false });
    for (const g of [open, closed]) assert.equal(await g.refreshBlocklist(), true);
    makeStale(open); // while the service is up, a stale copy is not trusted: the service is asked
    assert.equal((await open.check({ sessionId: fixture.sessions.adminBlocked })).source, 'server');
    assert.equal(await open.refreshBlocklist(), true);
    target = dead; // from now on nothing listens there

    for (const g of [open, closed]) {
      const err = await refused(g, { sessionId: fixture.sessions.adminBlocked }); // fresh: no request at all
      assert.deepEqual([err.reason, err.decision.source, g.failures], ['session_blocked', 'cache', 0]);
    }
    makeStale(open, closed); // stale: the failed check falls back on it anyway
    for (const g of [open, closed]) {
      let err = await refused(g, { sessionId: fixture.sessions.adminBlocked });
      assert.deepEqual([err.reason, err.decision.source, g.failures], ['session_blocked', 'cache', 1]);
      assert.equal(err.body.error.session_id, fixture.sessions.adminBlocked);
      err = await refused(g, { sessionId: uid('other'), virtualKey: fixture.revokedKey });
      assert.deepEqual([err.reason, err.decision.scope], ['key_revoked', 'key']);
      err = await refused(g, { sessionId: uid('any'), feature: 'free' });
      assert.equal(err.reason, 'budget_exhausted');
      assert.equal(g.failures, 3);
    }
    assert.ok(logger.warnings.some((m) => m.includes('the cached block list still refuses the call (session_blocked)')),
      logger.warnings.join('\n'));

    const free = uid('free');
    const d = await open.check({ sessionId: free });
    assert.deepEqual([d.action, d.source, d.reason, d.sessionId], ['allow', 'fail_open', 'enforcement_unavailable', free]);
    assert.equal(await open.beforeCall({ sessionId: free }), undefined);
    const err = await refused(closed, { sessionId: free });
    assert.deepEqual([err.reason, err.decision.source], ['enforcement_unavailable', 'fail_closed']);
  });

  test('a cached block outlives a broken upstream: 502, a body that is not JSON, not an object', async () => {
    const p = await proxy(api);
    try {
      const logger = recordingLogger();
      const guard = new LoopGuard({ endpoint: p.url, timeoutMs: 2000, blocklistIntervalMs: null, logger });
      assert.equal(await guard.refreshBlocklist(), true);
      assert.equal((await guard.check({ sessionId: uid('ok') })).source, 'server');
      let n = 0;
      for (const mode of ['502', 'garbage', 'array']) {
        p.mode = mode;
        makeStale(guard);
        const err = await refused(guard, { sessionId: fixture.sessions.adminBlocked });
        assert.deepEqual([err.reason, err.decision.source], ['session_blocked', 'cache'], mode);
        assert.equal((await guard.check({ sessionId: uid('free') })).source, 'fail_open', mode);
        n += 2;
        assert.equal(guard.failures, n, mode);
        assert.equal(await guard.refreshBlocklist(), false, mode); // the copy stays as it was
        assert.ok(guard.blocklist.size >= 1);
      }
      assert.match(logger.warnings[0], /HTTP 502/);
    } finally {
      await p.close();
    }
  });

  test("a check that names no trace takes the active OpenTelemetry span's (currentTraceId: activeTraceId)", async () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    assert.ok(otelContext.setGlobalContextManager(manager));
    try {
      const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null, currentTraceId: activeTraceId });
      await assert.rejects(guard.check({}), /sessionId or traceId is required/); // no span: no trace
      const inSpan = (traceId, fn) => otelContext.with(
        trace.setSpanContext(otelContext.active(), { traceId, spanId: '00f067aa0ba902b7', traceFlags: 1 }), fn);
      const blocked = await inSpan(fixture.traces.block, () => guard.check({}));
      assert.deepEqual([blocked.action, blocked.source, blocked.sessionId], ['block', 'server', fixture.sessions.block]);
      const unknown = '4bf92f3577b34da6a3ce929d0e0e4736';
      const own = await inSpan(unknown, () => guard.check({})); // after an await, still the span's (async context)
      assert.deepEqual([own.action, own.sessionId], ['allow', unknown]);
      const named = await inSpan(fixture.traces.block, () => guard.check({ traceId: unknown })); // given: it wins
      assert.equal(named.sessionId, unknown);
      await assert.rejects(inSpan('0'.repeat(32), () => guard.check({})), /sessionId or traceId is required/);
      const throwing = new LoopGuard({ endpoint: api, blocklistIntervalMs: null,
        currentTraceId: () => { throw new Error('no tracer'); } });
      await assert.rejects(throwing.check({}), /sessionId or traceId is required/); // a lookup that throws: none
      assert.equal((await throwing.check({ sessionId: uid('lookup-throws') })).action, 'allow');
    } finally {
      otelContext.disable();
    }
  });

  test('a trace id alone is enough', async () => {
    const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null });
    await assert.rejects(guard.check({}), /sessionId or traceId is required/);
    const unknown = uid('trace');
    const d = await guard.check({ traceId: unknown }); // a trace the service has not seen: its own session
    assert.deepEqual([d.action, d.source, d.sessionId], ['allow', 'server', unknown]);
    const blocked = await guard.check({ traceId: fixture.traces.block }); // scored: its session's decision
    assert.deepEqual([blocked.action, blocked.source, blocked.sessionId], ['block', 'server', fixture.sessions.block]);

    const trace = uid('trace'); // the pending calls of a trace are a window of their own
    assert.equal(await guard.beforeCall({ traceId: trace, pending: pendingTool('read_file', { path: 'a.py', line: 1 }) }), undefined);
    assert.equal(await guard.beforeCall({ traceId: trace, pending: pendingTool('read_file', '{"line": 1.0, "path": "a.py"}') }), undefined);
    const err = await refused(guard, { traceId: trace, pending: pendingTool('read_file', { line: 1, path: 'a.py' }) });
    assert.deepEqual([err.reason, err.body.error.session_id], ['failure_loop', trace]);

    const down = new LoopGuard({ endpoint: await closedPort(), timeoutMs: 200, failOpen: false, blocklistIntervalMs: null,
      logger: null });
    const e = await refused(down, { traceId: 't-down' }); // down: the fail mode names the trace
    assert.deepEqual([e.body.error.session_id, e.decision.source], ['t-down', 'fail_closed']);
  });

  test('the API token: from $LOOP_DETECTOR_API_TOKEN, with checks and block list refreshes', async () => {
    const logger = fullLogger();
    const guard = new LoopGuard({ endpoint: fixture.tokenApi, blocklistIntervalMs: null, logger });
    assert.equal((await guard.check({ sessionId: uid('env') })).source, 'server');
    assert.equal(await guard.refreshBlocklist(), true);
    assert.equal(await guard.refreshBlocklist(), true); // 304: sent again with If-None-Match
    assert.equal(guard.blocklist.notModified, 1);
    assert.deepEqual([guard.authFailures, logger.warnings, logger.errors], [0, [], []]);
  });

  for (const [what, apiKey, status, given] of [
    ['missing', '', 'HTTP 401', 'a missing API token'],
    ['wrong', 'not-the-api-token-0123456789', 'HTTP 403', 'the API token it was sent'],
  ]) {
    test(`the API token ${what}: a configuration error, then the fail mode`, async () => {
      const logger = fullLogger();
      const guard = new LoopGuard({ endpoint: fixture.tokenApi, apiKey, blocklistIntervalMs: null, logger });
      const d = await guard.check({ sessionId: uid('s') });
      assert.deepEqual([d.action, d.source, d.reason], ['allow', 'fail_open', 'enforcement_unavailable']);
      assert.deepEqual([guard.failures, guard.authFailures], [1, 1]);
      assert.equal(await guard.refreshBlocklist(), false);
      assert.equal(guard.authFailures, 2);
      const closed = new LoopGuard({ endpoint: fixture.tokenApi, apiKey, failOpen: false, blocklistIntervalMs: null,
        logger });
      assert.equal((await refused(closed, { sessionId: uid('s') })).decision.source, 'fail_closed');

      assert.ok(logger.errors.length >= 2, logger.errors.join('\n'));
      for (const m of logger.errors) assert.match(m, /configuration error, not an outage/);
      assert.ok(logger.errors[0].includes(status) && logger.errors[0].includes(given), logger.errors[0]);
      assert.ok(logger.errors[0].includes('LOOP_DETECTOR_API_TOKEN') && logger.errors[0].includes('fail open'));
      assert.deepEqual(logger.warnings, []); // not reported as an outage
      const text = logger.errors.join('\n');
      assert.ok(!text.includes(process.env.LOOP_DETECTOR_API_TOKEN) && (!apiKey || !text.includes(apiKey)));
    });
  }
});
