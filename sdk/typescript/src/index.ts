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
