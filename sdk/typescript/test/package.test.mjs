// The package: ESM with declarations for both entry points, and no runtime dependency (every import in dist/ is
// one of its own files; Node's crypto is reached through process.getBuiltinModule, never imported).
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const dist = new URL('../dist/', import.meta.url);

test('no runtime dependencies; ESM entry points with type declarations', () => {
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.dependencies, undefined);
  assert.equal(pkg.peerDependencies, undefined);
  for (const entry of ['.', './vercel-ai']) {
    const { types, import: js } = pkg.exports[entry];
    assert.ok(readFileSync(new URL(types, new URL('../', import.meta.url)), 'utf8').length > 0, types);
    assert.ok(readFileSync(new URL(js, new URL('../', import.meta.url)), 'utf8').length > 0, js);
  }
});

test('every import in dist/ is relative', () => {
  for (const file of readdirSync(dist).filter((f) => f.endsWith('.js'))) {
    const text = readFileSync(new URL(file, dist), 'utf8');
    const specifiers = [...text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+['"]([^'"]+)['"]/gm)].map((m) => m[1]);
    for (const s of specifiers) assert.ok(s.startsWith('./'), `${file} imports ${s}`);
    assert.ok(!/\brequire\(/.test(text) && !/import\(/.test(text), `${file} loads a module dynamically`);
  }
});

test('the self-reference resolves as a consumer sees it', async () => {
  const sdk = await import('loop-detector-sdk');
  const vercel = await import('loop-detector-sdk/vercel-ai');
  assert.equal(typeof sdk.LoopGuard, 'function');
  assert.equal(typeof vercel.loopGuardMiddleware, 'function');
});
