/**
 * The service's normalization of content, in the app: the normalization's regular expressions
 * (`clickhouse/genai_calls_normalized.sql.tmpl`, step 2c), in the same order, so that a normalized text here is byte for byte
 * the one the SQL hashes. Every pattern is ASCII-only (no `u` flag: `\d`, `\w`, `\W`, `\b` are ASCII, as in RE2);
 * RE2's `\s` (`[\t\n\f\r ]`) is spelled out, and `$` (no `m` flag) is the end of the text, as RE2's. The Python
 * SDK's `loop_detector_sdk.evidence.normalize` is the same.
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
// The work in progress (the SQL's said_pending): a status word as a status, state or phase, or as the whole text;
// or, in a text that does not say it failed, a phrase.
const STATUS_WORDS = 'queued|pending|running|in[ _-]?progress|processing|started|starting|scheduled|waiting|not[ _-]?ready'
  + '|building|deploying|provisioning|creating|initializing|progressing|rolling out|updating|scaling|booting|accepted'
  + '|submitted|working|busy';
const PENDING = new RegExp(`\\b(status|state|phase)\\\\?"?${S}*[:=]${S}*\\\\?"?(${STATUS_WORDS})\\b`, 'i');
const PENDING_WORD = new RegExp(`^${S}*["']?(${STATUS_WORDS})(\\.|\\.\\.\\.)?["']?${S}*$`, 'i');
const PENDING_PHRASE = new RegExp(
  '\\b(not (yet )?ready|still (running|processing|pending|in progress|working|building|deploying|waiting|initializing'
  + '|starting|creating|provisioning|updating)|in progress|queued|waiting for)\\b'
  + `|\\bprogress\\W{0,3}\\d{1,3}(\\.\\d+)?${S}?%`, 'i');
const PENDING_WORDS = ['status', 'state', 'phase'];
const PENDING_PHRASE_WORDS = ['ready', 'still', 'progress', 'queued', 'waiting for'];

// What came back only acknowledges what was done (the SQL's observation_ack, whose comments give each alternative's
// examples), on its first line; and a whole text that is a JSON acknowledgement.
const ACK_VERBS = 'edited|updated|created|written|wrote|saved|modified|changed|applied|deleted|removed|added|inserted'
  + '|replaced|renamed|moved|uploaded|attached|installed|restarted|deployed|reverted|appended|overwritten|stored'
  + '|recorded|scheduled|committed|sent|posted|submitted|set';
const ACK_LINE_VERBS = 'edited|updated|created|written|wrote|saved|modified|changed|applied|deleted|removed|added'
  + '|inserted|replaced|renamed|moved|uploaded|attached|installed|restarted|deployed|reverted|appended|overwritten'
  + '|stored|recorded|committed';
const ACK = new RegExp('^\\W*(?:'
  + `(?:the${S}+|a${S}+)?(?:command|process|script|operation|task|job)${S}+(?:completed|finished|succeeded|ran)`
  + `(?:${S}+successfully)?(?:${S}+with${S}+exit${S}+code${S}+0)?\\W*$`
  + '|(?:ok|okay|done|true|success|succeeded|saved|updated|created|written|applied|deleted|removed|acknowledged'
  + `|accepted)[.!]?${S}*$`
  + `|[^\\n]*\\b(?:(?:has|have)${S}+been|was|were|successfully|(?:is|are)${S}+now)${S}+(?:${ACK_VERBS})\\b`
  + `|[^\\n]*\\b(?:${ACK_VERBS})${S}+successfully\\b`
  + `|(?:the${S}+)?(?:file|record|entry|item|settings?|config(?:uration)?|key|value|document|page|row)?${S}*`
  + `(?:${ACK_LINE_VERBS})\\b[^\\n]{0,160}$`
  + ')', 'i');
const JSON_ACK = new RegExp(`^${S}*\\{${S}*"(?:ok|success|acknowledged)"${S}*:${S}*true${S}*\\}${S}*$`, 'i');
const ASTRAL = /[\uD800-\uDBFF][\uDC00-\uDFFF]/g;

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

/** ASCII letters lowercased (ClickHouse's `lower`; the substring searches of the prefilters are ASCII-only). */
function asciiLower(text: string): string {
  return text.replace(/[A-Z]+/g, (c) => c.toLowerCase());
}

/** The text says the work is still in progress: a status word (queued, running, in progress...) as a status, state
 * or phase or as the whole text; or, unless the text says it failed, a phrase (not ready, still running, waiting
 * for, in progress, queued, a progress percentage). `failed`: `isFailed(text)`, when the caller has it. */
export function isPending(text: string, failed?: boolean): boolean {
  if (text === '') return false;
  const lowered = asciiLower(text);
  if (PENDING_WORDS.some((w) => lowered.includes(w)) && PENDING.test(text)) return true;
  if (PENDING_WORD.test(text)) return true;
  const line = firstLine(text); // a phrase on the first line only: further down, a log is a log, not a status
  if (!PENDING_PHRASE_WORDS.some((w) => asciiLower(line).includes(w)) || !PENDING_PHRASE.test(line)) return false;
  return !(failed ?? isFailed(text));
}

/** The first line of a text, leading whitespace (RE2's `\s`) skipped, at most 300 characters (code points: a
 * character beyond the BMP stands as one U+FFFD, the one character it is in RE2's and Python's matching). */
export function firstLine(text: string): string {
  let start = 0;
  while (start < text.length && '\t\n\f\r '.includes(text[start])) start++;
  let end = text.indexOf('\n', start);
  if (end < 0 || end > start + 600) end = Math.min(text.length, start + 600);  // 300 code points: 600 units at most
  return text.slice(start, end).replace(ASTRAL, '\uFFFD').slice(0, 300);
}

/** The text only acknowledges what was done: its first line says a file was created, a record updated, a command
 * completed with exit code 0 and nothing else, "True"...; or the whole text is `{"ok": true}` (`success`,
 * `acknowledged`). Never when that first line says it failed (what follows it may: an edit's snippet of code that
 * handles errors), nor when the text says the work is in progress (`pending`: `isPending` of the text, when the
 * caller has it). */
export function isAck(text: string, pending?: boolean): boolean {
  const line = firstLine(text);
  if (line === '') return false;
  if (!ACK.test(line) && !(line[0] === '{' && JSON_ACK.test(text))) return false;
  return !isFailed(line) && !(pending ?? isPending(text));
}
