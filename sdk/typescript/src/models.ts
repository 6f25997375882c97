/** The SDK's plain data: a decision, and the error a refused call throws. No dependencies. */

export type Action = 'allow' | 'warn' | 'throttle' | 'inject' | 'block';

/**
 * Where a decision came from: `server` (the enforcement API answered), `cache` (refused locally: the
 * scope is on the cached block list), `fail_open` / `fail_closed` (the API could not be reached in time).
 */
export type Source = 'server' | 'cache' | 'fail_open' | 'fail_closed';

export const REASON_UNAVAILABLE = 'enforcement_unavailable';

/** The HTTP 429 body of the spec: `{"error": {"reason": "loop_detected", ...}}`. */
export interface BlockedBody {
  error: {
    reason: string;
    session_id: string;
    confidence: number;
    dominant_signal: string;
    enforcement_level: 'hard_stop';
    scope?: string;
    rule_name?: string;
    [extra: string]: unknown;
  };
}

/**
 * What to do before the next call: `allow`, `warn`, `throttle` (wait `delaySeconds`), `inject` (add
 * `instruction` to the system prompt) or `block` (do not make the call).
 */
export interface Decision {
  action: Action;
  level: string;
  confidence: number;
  dominantSignal: string;
  detector: string;
  scope: string;
  reason: string;
  ruleName: string;
  delaySeconds: number;
  instruction: string;
  sessionId: string;
  source: Source;
  /** the `x-loop-warning` header, from warn up */
  warning?: string;
  /** for block: seconds, from `Retry-After` (none when refused on the client side for fail-closed) */
  retryAfter?: number;
  /** for block: the 429 body */
  error?: BlockedBody;
  /**
   * the service's answers only: how old its decisions were (seconds since its last detection cycle that
   * succeeded; growing while its store is unreachable). The answer is applied whatever it is.
   */
  staleSeconds?: number;
}

type Json = Record<string, unknown>;

const str = (v: unknown, d: string): string => (v === undefined || v === null ? d : String(v));
const num = (v: unknown, d: number): number => {
  const n = Number(v);
  return v === undefined || v === null || Number.isNaN(n) ? d : n;
};

/** A decision from a `200` body of `POST /v1/check`. */
export function decisionFromJson(data: Json, warning?: string): Decision {
  return {
    action: str(data.action, 'allow') as Action,
    level: str(data.level, 'none'),
    confidence: num(data.confidence, 0),
    dominantSignal: str(data.dominant_signal, 'none'),
    detector: str(data.detector, 'none'),
    scope: str(data.scope, 'session'),
    reason: str(data.reason, ''),
    ruleName: str(data.rule_name, ''),
    delaySeconds: num(data.delay_seconds, 0),
    instruction: str(data.instruction, ''),
    sessionId: str(data.session_id, ''),
    source: 'server',
    warning,
    staleSeconds: num(data.stale_seconds, 0),
  };
}

/** A `block` from a 429 body (`{"error": {...}}`); `retryAfter` null: none (refused on the client side). */
export function refusedDecision(body: BlockedBody, source: Source = 'server', retryAfter: number | null = 60,
                                warning?: string): Decision {
  const err = (body && typeof body === 'object' && body.error && typeof body.error === 'object'
    ? body.error : {}) as Json;
  return {
    action: 'block',
    level: err.reason === 'loop_detected' ? 'hard_stop' : 'none',
    confidence: num(err.confidence, 0),
    dominantSignal: str(err.dominant_signal, 'none'),
    detector: str(err.detector, ''),
    scope: str(err.scope, 'session'),
    reason: str(err.reason, ''),
    ruleName: str(err.rule_name, ''),
    delaySeconds: 0,
    instruction: '',
    sessionId: str(err.session_id, ''),
    source,
    warning,
    retryAfter: retryAfter ?? undefined,
    error: body,
    staleSeconds: num(err.stale_seconds, 0),
  };
}

/** A 429-shaped body for a call refused on the client side (cached block list, fail closed). */
export function blockBody(sessionId: string, reason: string, scope = 'session', ruleName = ''): BlockedBody {
  return {
    error: {
      reason, session_id: sessionId, confidence: 0, dominant_signal: 'none', enforcement_level: 'hard_stop',
      scope, rule_name: ruleName,
    },
  };
}

/** The call must not proceed. `body` is the HTTP 429 body (`{"error": {"reason": ...}}`). */
export class LoopBlockedError extends Error {
  readonly decision: Decision;
  readonly body: BlockedBody;
  readonly reason: string;
  readonly retryAfter?: number;

  constructor(decision: Decision) {
    const reason = decision.reason || 'blocked';
    super(`loop-detector refused the call: ${reason}`
      + (decision.ruleName ? ` (${decision.ruleName})` : '')
      + (decision.sessionId ? ` [session ${decision.sessionId}]` : ''));
    this.name = 'LoopBlockedError';
    this.decision = decision;
    this.body = decision.error ?? blockBody(decision.sessionId, reason);
    this.reason = decision.reason;
    this.retryAfter = decision.retryAfter;
  }
}
