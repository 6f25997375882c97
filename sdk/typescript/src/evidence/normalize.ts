/**
 * The service's normalization of content, in the app: the normalization's regular expressions
 * (`clickhouse/genai_calls_normalized.sql.tmpl`, step 2c), in the same order, so that a normalized text here is byte for byte
 * the one the SQL hashes. Every pattern is ASCII-only (no `u` flag: `\d`, `\w`, `\b` are ASCII, as in RE2); RE2's
 * `\s` (`[\t\n\f\r ]`) is spelled out. The Python SDK's `loop_detector_sdk.evidence.normalize` is the same.
 */

import { objectPairs, pairsText } from './clickhouse-json.js';

const S = '[\\t\\n\\f\\r ]';
const UUID = /[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/g;
const TIMESTAMP = /\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?|\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b/g;
const DURATION = new RegExp(`(took|elapsed|duration|latency)(_ms|_s|_us)?(['"]*${S}*[:=,]${S}*['"]*)\\d+(\\.\\d+)?`
  + `|\\b\\d+(\\.\\d+)?${S}?(ms|us|ns|s|secs?|seconds|minutes)\\b`, 'g');
const ID = /(0x)?[0-9a-fA-F]{8,}|[A-Za-z_][\w-]*\d[\w-]*|\d+[A-Za-z_][\w-]*/g;
const SPACES = new RegExp(`${S}+`, 'g');
const KEY = new RegExp(`\\\\?"[\\w .\\-]{1,64}\\\\?"${S}*:${S}*`, 'g');
const DIGITS = /\d+/g;
const EMPTY = new RegExp(
  `"(results|items|hits|matches|documents|records|entries|rows|data)"${S}*:${S}*\\[${S}*\\]`
  + `|"(total|count|hits|total_count|num_results)"${S}*:${S}*0\\b`
  + '|\\bno (results?|matches|documents?|items?|records?|entries|hits|data)\\b|\\bnot found\\b|\\bnothing (found|matched)\\b'
  + `|^${S}*(null|none|\\[${S}*\\]|\\{${S}*\\})?${S}*$`);

// What came back says it failed (observation_failed) / that the work is still in progress (observation_pending):
// RE2's `(?i)` as the `i` flag without `u` (ASCII case folding; RE2 also folds the Kelvin sign and the long s).
const FAILED = new RegExp(
  "\\b(error|exception|traceback|fatal|failed|failure|denied|not found|no such|cannot|can't|could not|unable to"
  + '|invalid|unexpected|refused|timed out|not recognized)\\b|\\busage:|<returncode>[1-9]', 'i');
const PENDING = new RegExp(
  `\\b(status|state|phase)\\\\?"?${S}*[:=]${S}*\\\\?"?(queued|pending|running|in[ _-]?progress|processing|started`
  + '|scheduled|waiting|not[ _-]?ready|building|deploying|provisioning|creating|initializing)\\b', 'i');

/** A JSON object as its sorted key/value pairs; any other text as it is. */
export function canonicalText(text: string): string {
  if (/^[{ \t\n\r\ufeff]/.test(text)) {
    const pairs = objectPairs(text);
    if (pairs !== undefined) return pairsText(pairs);
  }
  return text;
}

/** Incidental variation (UUIDs, timestamps, durations, hex runs, ids mixing letters and digits) replaced,
 * whitespace collapsed, a JSON object canonical. */
export function normalize(text: string): string {
  return canonicalText(text)
    .replace(UUID, '<uuid>')
    .replace(TIMESTAMP, '<ts>')
    .replace(DURATION, '$1$2$3<dur>')
    .replace(ID, '<id>')
    .replace(SPACES, ' ')
    .replace(/^ +| +$/g, '');
}

/** The text without its JSON keys (`"name":`). */
export function withoutKeys(text: string): string {
  return text.replace(KEY, '');
}

/** Every run of digits as `#`. */
export function digitsMasked(text: string): string {
  return text.replace(DIGITS, '#');
}

/** The observation says "nothing" (no results, not found, empty, null); ASCII-only lowercase, as ClickHouse's. */
export function isEmptyObservation(text: string): boolean {
  return text !== '' && EMPTY.test(text.replace(/[A-Z]+/g, (c) => c.toLowerCase()));
}

/** The text says it failed: an error, a traceback, a refusal, a non-zero return code. */
export function isFailed(text: string): boolean {
  return text !== '' && FAILED.test(text);
}

/** The text says the work is still in progress: a status of queued, running... */
export function isPending(text: string): boolean {
  return text !== '' && PENDING.test(text);
}
