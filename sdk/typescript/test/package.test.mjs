// The package: ESM with declarations for every entry point, and no runtime dependency (every import in dist/ is
// one of its own files; Node's crypto is reached through process.getBuiltinModule, never imported), but for
// `loop-detector-sdk/otel`, which alone imports its optional peer `@opentelemetry/api` and is imported by nothing.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const dist = new URL('../dist/', import.meta.url);

test('no runtime dependencies; ESM entry points with type declarations', () => {
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.dependencies, undefined);
  assert.deepEqual(pkg.peerDependencies, { '@opentelemetry/api': '^1.0.0' });
  assert.deepEqual(pkg.peerDependenciesMeta, { '@opentelemetry/api': { optional: true } });
  for (const entry of ['.', './vercel-ai', './otel']) {
    const { types, import: js } = pkg.exports[entry];
    assert.ok(readFileSync(new URL(types, new URL('../', import.meta.url)), 'utf8').length > 0, types);
    assert.ok(readFileSync(new URL(js, new URL('../', import.meta.url)), 'utf8').length > 0, js);
  }
});

test('every import in dist/ is relative, but the optional peer of the otel module', () => {
  for (const file of readdirSync(dist).filter((f) => f.endsWith('.js'))) {
    const text = readFileSync(new URL(file, dist), 'utf8');
    const specifiers = [...text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+['"]([^'"]+)['"]/gm)].map((m) => m[1]);
    const outside = specifiers.filter((s) => !s.startsWith('./'));
    assert.deepEqual(outside, file === 'otel.js' ? ['@opentelemetry/api'] : [], `${file} imports ${outside}`);
    assert.ok(!specifiers.includes('./otel.js'), `${file} imports the OpenTelemetry module`);
    assert.ok(!/\brequire\(/.test(text) && !/import\(/.test(text), `${file} loads a module dynamically`);
  }
});

test('the self-reference resolves as a consumer sees it', async () => {
  const sdk = await import('loop-detector-sdk');
  const vercel = await import('loop-detector-sdk/vercel-ai');
  const otel = await import('loop-detector-sdk/otel');
  assert.equal(typeof sdk.LoopGuard, 'function');
  assert.equal(typeof vercel.loopGuardMiddleware, 'function');
  assert.equal(typeof otel.activeTraceId, 'function');
});
