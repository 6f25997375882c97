// The live service the tests run against: tests/test_sdk_typescript.py starts `loop-detector serve`'s
// service on free ports, drives sessions to each decision with real spans, and passes what it made in
// LOOP_DETECTOR_TS_FIXTURE (a JSON file). Without it the tests that need the service are skipped.
import { readFileSync } from 'node:fs';

const path = process.env.LOOP_DETECTOR_TS_FIXTURE;
export const fixture = path ? JSON.parse(readFileSync(path, 'utf8')) : undefined;
export const needsService = fixture ? {} : { skip: 'no live service (run tests/test_sdk_typescript.py)' };

let n = 0;
export const uid = (prefix) => `${prefix}-ts-${process.pid}-${Date.now().toString(36)}-${n++}`;

/** A fetch that records the paths it was asked for. */
export function countingFetch() {
  const paths = [];
  const f = (input, init) => {
    paths.push(new URL(input).pathname);
    return fetch(input, init);
  };
  return { fetch: f, paths };
}

export function recordingLogger() {
  const warnings = [];
  const infos = [];
  return { warnings, infos, warn: (m) => warnings.push(m), info: (m) => infos.push(m) };
}
