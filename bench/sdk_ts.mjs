// The TypeScript half of bench/sdk.py (run by it): the SDK's per-call cost against a running service,
// beside a bare fetch of the same request in the same process, interleaved round by round.
//
//   node bench/sdk_ts.mjs <api> <blocked-session> <rounds> <network-calls> <cached-calls>
//
// Prints one JSON object: per figure, the per-round medians (microseconds) of each measured call.
import { LoopGuard, pendingRequest, requestFingerprint } from '../sdk/typescript/dist/index.js';

const [api, blocked, rounds, networkCalls, cachedCalls] = process.argv.slice(2);
const ROUNDS = Number(rounds), N = Number(networkCalls), CACHED = Number(cachedCalls);

const messages = JSON.parse(process.env.BENCH_MESSAGES);
const model = 'gpt-4o-mini';
const now = () => performance.now() * 1000;
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

/** base(i) and fn(i) timed alternately (drift hits both alike): their medians, and the median difference. */
async function paired(n, base, fn) {
  const a = [], b = [], d = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    await base(i);
    const t1 = now();
    await fn(i);
    const t2 = now();
    a.push(t1 - t0); b.push(t2 - t1); d.push((t2 - t1) - (t1 - t0));
  }
  return [median(a), median(b), median(d)];
}

const guard = new LoopGuard({ endpoint: api, blocklistIntervalMs: null, timeoutMs: 2000 });
const body = (i) => JSON.stringify({ session_id: `ts-bare-${i}` });
const result = {};
const keep = (key, base, [x, y, d]) => {
  for (const [k, v] of [[base, x], [key, y], [`${key}Added`, d]]) (result[k] ??= []).push(v);
};
const post = async (b) => {
  const res = await fetch(`${api}/v1/check`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
  await res.text();
};

// warm-up: connections, JIT
for (let i = 0; i < 200; i++) {
  await post(body(i));
  await guard.check({ sessionId: `warm-${i}` });
}

let k = 0;
for (let r = 0; r < ROUNDS; r++) {
  keep('check', 'bare', await paired(N, (i) => post(body(`${r}-${i}`)),
    (i) => guard.check({ sessionId: `ts-check-${r}-${i}` })));
  keep('beforeCallPending', 'pendingBare', await paired(N,
    (i) => post(JSON.stringify({ session_id: `ts-pb-${r}-${i}`, pending: { request_fingerprint: 'f'.repeat(64) } })),
    (i) => guard.beforeCall({ sessionId: `ts-pending-${r}-${i}`, pending: pendingRequest(model, messages) })));
  const fps = [];
  for (let i = 0; i < N; i++) {
    const t0 = now();
    k += requestFingerprint(model, messages).length;
    fps.push(now() - t0);
  }
  (result.fingerprint ??= []).push(median(fps));
  if (!(await guard.refreshBlocklist())) throw new Error('block list'); // older than maxStaleMs it would be ignored
  const t0 = now();
  for (let i = 0; i < CACHED; i++) await guard.check({ sessionId: blocked });
  (result.cached ??= []).push((now() - t0) / CACHED);
  const d = await guard.check({ sessionId: blocked });
  if (d.source !== 'cache') throw new Error(`expected a cached block, got ${d.source}`);
}
if (k === 0) throw new Error('no fingerprints');
console.log(JSON.stringify({ node: process.version, ...result }));
