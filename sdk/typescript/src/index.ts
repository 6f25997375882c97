/**
 * loop-detector's TypeScript SDK: ask the enforcement API before each model or tool call, and apply the
 * answer. No runtime dependency beyond `fetch`: Node >= 18, Deno, Bun, and edge runtimes.
 *
 *     import { LoopGuard, LoopBlockedError, pendingRequest } from 'loop-detector-sdk';
 *
 *     const guard = new LoopGuard({ endpoint: 'http://127.0.0.1:8080' });   // failOpen: true, timeoutMs: 500
 *     try {
 *       const instruction = await guard.beforeCall({ sessionId: 'run-42', pending: pendingRequest(model, messages) });
 *     } catch (err) {
 *       if (err instanceof LoopBlockedError) console.log(err.body.error.reason);
 *     }
 *
 * Every check can carry the app's fingerprints of the call (`pending.evidence`: hashes computed with the service's
 * own normalization and ClickHouse's hash functions, never the content): `pendingTool` and the Vercel AI SDK
 * middleware add them; `modelCallEvidence(model, fromSemconv(messages))` makes them for other callers.
 *
 * The Vercel AI SDK middleware is `loop-detector-sdk/vercel-ai`; the active OpenTelemetry span's trace for checks that
 * name none, `activeTraceId` of `loop-detector-sdk/otel` (`currentTraceId` option).
 */

export { type BlockEntry, LocalBlocklist, type Scope, type ScopeIds } from './blocklist.js';
export {
  API_TOKEN_ENV,
  type CheckIds,
  type CheckOptions,
  DEFAULT_INSTRUCTION,
  type FetchLike,
  type Logger,
  LoopGuard,
  type LoopGuardOptions,
} from './client.js';
export {
  canonicalJson,
  compareCodePoints,
  type Pending,
  pendingRequest,
  pendingTool,
  requestFingerprint,
} from './fingerprint.js';
export {
  EMPTY_NGRAM_SIMHASH,
  cityHash64,
  combine,
  hashPairs,
  hashStrings,
  intHash,
  ngramSimhashCI,
  utf8,
  wordShingleSimhashCI,
} from './evidence/clickhouse-hash.js';
export { documentRaw, numberText, objectPairs, type Pairs, pairsText, valueRaw } from './evidence/clickhouse-json.js';
export {
  type ModelCallEvidence,
  modelCallEvidence,
  newInputText,
  type Observation,
  observation,
  type PendingEvidence,
  type Reply,
  reply,
  requestFp,
  type ToolCallEvidence,
  type ToolEvidence,
  type ToolRunEvidence,
  toolCall,
  toolRun,
  toolRunEvidence,
  VERSION as EVIDENCE_VERSION,
} from './evidence/fingerprints.js';
export { argumentsText, fromSemconv, fromVercelPrompt, type Message, type Part, replyText } from './evidence/messages.js';
export {
  canonicalText, digitsMasked, firstLine, isAck, isEmptyObservation, isFailed, isPending, normalize, withoutKeys,
} from './evidence/normalize.js';
export { type Position, withInstruction } from './instruction.js';
export {
  type Action,
  type BlockedBody,
  blockBody,
  type Decision,
  decisionFromJson,
  LoopBlockedError,
  REASON_UNAVAILABLE,
  refusedDecision,
  type Source,
} from './models.js';
export { sha256Hex } from './sha256.js';
