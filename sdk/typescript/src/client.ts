/**
 * `LoopGuard`: ask loop-detector before each model or tool call, and apply the answer.
 *
 *     const guard = new LoopGuard({ endpoint: 'http://127.0.0.1:8080' });
 *     const instruction = await guard.beforeCall({ sessionId: 'run-42', pending: pendingRequest(model, messages) });
 *     // allow/warn: undefined; throttle: slept the delay; inject: the text to add to the system prompt;
 *     // block: threw LoopBlockedError (its .body is the 429 body)
 *
 * When the enforcement endpoint cannot be reached within `timeoutMs` (down, slow, an unexpected status),
 * `failOpen: true` (the default) lets the call proceed and `failOpen: false` refuses it; either way it is
 * logged (a warning at most every 10 s per guard, with the count of further failures).
 *
 * The guard keeps a local copy of the block list (`GET /v1/blocklist` with `ETag`), so a check for a
 * blocked scope is refused locally, with no round trip. There is no timer (edge runtimes allow none
 * outside a request): a check that finds the copy older than `blocklistIntervalMs` starts a refresh in the
 * background and answers from the copy it has. `blocklistIntervalMs: null` turns the cache off.
 */

import { LocalBlocklist } from './blocklist.js';
import type { Pending } from './fingerprint.js';
import {
  type BlockedBody,
  blockBody,
  type Decision,
  decisionFromJson,
  LoopBlockedError,
  REASON_UNAVAILABLE,
  refusedDecision,
} from './models.js';

export const DEFAULT_INSTRUCTION = 'Loop detected. You are repeating the same actions without progress. Stop the '
  + 'current approach, summarize what you have tried, and propose a fundamentally different strategy.';
export const WARN_EVERY_MS = 10_000;
/** The environment variable the service reads its API token from; the guard reads it too (Node). */
export const API_TOKEN_ENV = 'LOOP_DETECTOR_API_TOKEN';

type FailureKind = 'outage' | 'auth';

/** `$LOOP_DETECTOR_API_TOKEN` where the runtime has an environment (guarded: edge runtimes have no `process`,
 * Deno throws without the permission). */
function envToken(): string | undefined {
  try {
    const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
    const value = proc?.env?.[API_TOKEN_ENV];
    return typeof value === 'string' && value ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The service answered, but not with a body this SDK understands. */
class Undecodable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Undecodable';
  }
}

function parseObject(text: string, status: number): Record<string, unknown> {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new Undecodable(`HTTP ${status}, a body that is not JSON`);
  }
  if (!data || typeof data !== 'object' || Array.isArray(data)) {
    throw new Undecodable(`HTTP ${status}, a body that is not a JSON object`);
  }
  return data as Record<string, unknown>;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface Logger {
  warn(message: string, details?: Record<string, unknown>): void;
  info?(message: string, details?: Record<string, unknown>): void;
  /** a configuration error (the API token refused); default: `warn` */
  error?(message: string, details?: Record<string, unknown>): void;
}

export interface LoopGuardOptions {
  /** the API's base URL, e.g. `http://127.0.0.1:8080` */
  endpoint: string;
  /**
   * the service's API token (`api.api_token`, `$LOOP_DETECTOR_API_TOKEN` or `<data-dir>/api-token` on its side;
   * needed when its API listens beyond loopback), sent as `Authorization: Bearer ...` with every check and
   * block list refresh; default: `process.env.LOOP_DETECTOR_API_TOKEN` where there is one; `''`: none
   */
  apiKey?: string;
  /** per check (default 500 ms) */
  timeoutMs?: number;
  /**
   * when the API cannot be asked and the cached block list does not block the scope: let the call proceed
   * (true, the default) or refuse it
   */
  failOpen?: boolean;
  /** how old the cached block list may get before a check refreshes it (default 2000); null: no cache */
  blocklistIntervalMs?: number | null;
  /** before a check, ignore the cached block list once older than this (default 10 x the interval); after a
   * failed check it still blocks */
  maxStaleMs?: number;
  /** the fetch to use (default: the global one) */
  fetch?: FetchLike;
  /** how a throttle waits (default: setTimeout) */
  sleep?: (ms: number) => Promise<void>;
  /** where warnings go (default: console.warn); null: nowhere */
  logger?: Logger | null;
  /**
   * the trace of a check that names none, e.g. `activeTraceId` from `loop-detector-sdk/otel` (the active
   * OpenTelemetry span's); default: none (a check then needs `sessionId` or `traceId`)
   */
  currentTraceId?: () => string | undefined;
}

/**
 * The scopes of a check. `sessionId` or `traceId` is required (a trace alone: the service uses the session
 * it knows for it); the others narrow or widen what may block it.
 */
export interface CheckIds {
  sessionId?: string;
  traceId?: string;
  virtualKey?: string;
  feature?: string;
}

export interface CheckOptions extends CheckIds {
  /** the call about to be made (`pendingRequest(...)`, `pendingTool(...)`): an exact repeat is refused first */
  pending?: Pending;
}

const defaultLogger: Logger = { warn: (m, d) => console.warn(m, d ?? ''), error: (m, d) => console.error(m, d ?? '') };
const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const monotonic = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

export class LoopGuard {
  readonly endpoint: string;
  readonly timeoutMs: number;
  readonly failOpen: boolean;
  readonly blocklistIntervalMs: number | null;
  readonly blocklist: LocalBlocklist;
  /** how many checks found the API unavailable */
  failures = 0;
  /** how many checks (and block list refreshes) were refused for the API token: 401/403 */
  authFailures = 0;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: FetchLike;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly logger: Logger | null;
  private refreshing?: Promise<boolean>;
  private suppressed: Record<FailureKind, number> = { outage: 0, auth: 0 };
  private lastWarned: Record<FailureKind, number> = { outage: -Infinity, auth: -Infinity };
  private closed = false;
  private readonly currentTraceId?: () => string | undefined;

  constructor(options: LoopGuardOptions) {
    this.endpoint = options.endpoint.replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? 500;
    this.failOpen = options.failOpen ?? true;
    this.blocklistIntervalMs = options.blocklistIntervalMs === undefined ? 2000 : options.blocklistIntervalMs;
    this.blocklist = new LocalBlocklist(options.maxStaleMs ?? 10 * (this.blocklistIntervalMs ?? 3000));
    this.headers = { 'content-type': 'application/json' };
    const token = options.apiKey ?? envToken();
    if (token) this.headers.authorization = `Bearer ${token}`;
    const f = options.fetch;
    // never call a global fetch as a method of this object (edge runtimes reject an unbound `this`)
    this.fetchImpl = f ?? ((input, init) => fetch(input, init));
    this.sleep = options.sleep ?? defaultSleep;
    this.logger = options.logger === undefined ? defaultLogger : options.logger;
    this.currentTraceId = options.currentTraceId;
  }

  /** The decision for the call about to be made (never throws for a block: see `beforeCall`). */
  async check(options: CheckOptions): Promise<Decision> {
    const body = this.body(options);
    this.maybeRefresh();
    const cached = this.cached(body, false);
    if (cached) return cached;
    let answer: Answer;
    try {
      answer = await this.request('/v1/check', {
        method: 'POST', headers: this.headers, body: JSON.stringify(body),
      }, this.timeoutMs);
    } catch (err) {
      return this.unavailable(body, err instanceof Error ? err.name : 'error');
    }
    const warning = answer.headers.get('x-loop-warning') ?? undefined;
    try {
      if (answer.status === 200) return decisionFromJson(parseObject(answer.text, 200), warning);
      if (answer.status === 429) {
        const retry = Number(answer.headers.get('retry-after') ?? 60);
        return refusedDecision(parseObject(answer.text, 429) as unknown as BlockedBody, 'server',
          Number.isFinite(retry) ? retry : 60, warning);
      }
    } catch (err) {
      return this.unavailable(body, err instanceof Error ? err.message : 'undecodable body');
    }
    if (answer.status === 401 || answer.status === 403) return this.unavailable(body, `HTTP ${answer.status}`, 'auth');
    return this.unavailable(body, `HTTP ${answer.status}`);
  }

  /**
   * Check and apply: throws `LoopBlockedError` on block, sleeps the delay on throttle, returns the
   * instruction to add to the system prompt on inject (else undefined).
   */
  async beforeCall(options: CheckOptions): Promise<string | undefined> {
    return this.apply(await this.check(options));
  }

  async apply(d: Decision): Promise<string | undefined> {
    if (d.action === 'throttle' && d.delaySeconds > 0) await this.sleep(d.delaySeconds * 1000);
    if (d.action === 'block') throw new LoopBlockedError(d);
    if (d.action === 'warn' && d.warning) this.logger?.info?.(`loop warning: ${d.warning}`, { sessionId: d.sessionId });
    if (d.action === 'inject') return d.instruction || DEFAULT_INSTRUCTION;
    return undefined;
  }

  /** Fetch the block list now (`If-None-Match`); false when the service could not be reached. */
  async refreshBlocklist(): Promise<boolean> {
    const headers: Record<string, string> = {};
    if (this.headers.authorization) headers.authorization = this.headers.authorization;
    if (this.blocklist.etag) headers['if-none-match'] = this.blocklist.etag;
    try {
      const answer = await this.request('/v1/blocklist', { method: 'GET', headers }, Math.max(1000, this.timeoutMs));
      if (answer.status === 401 || answer.status === 403) {
        this.authFailures += 1;
        this.logFailure('auth', `HTTP ${answer.status} for the block list`, 'the block list is not cached', '');
        return false;
      }
      const body = answer.status === 200 ? parseObject(answer.text, 200) : undefined;
      return this.blocklist.apply(answer.status, answer.headers.get('etag'), body);
    } catch {
      return false;
    }
  }

  /** Stop refreshing the block list (checks still work, against the API). */
  close(): void {
    this.closed = true;
  }

  private maybeRefresh(): void {
    const interval = this.blocklistIntervalMs;
    if (interval === null || this.closed || this.refreshing || this.blocklist.ageMs < interval) return;
    this.refreshing = this.refreshBlocklist().finally(() => { this.refreshing = undefined; });
  }

  /** Wait for a block-list refresh in flight, if any (tests, and a process about to exit). */
  async settled(): Promise<void> {
    await this.refreshing;
  }

  private body(options: CheckOptions): Record<string, unknown> {
    const traceId = options?.traceId || this.traceOfContext();
    if (!options || (!options.sessionId && !traceId)) {
      throw new TypeError('sessionId or traceId is required (or a currentTraceId that finds one)');
    }
    const body: Record<string, unknown> = {};
    if (options.sessionId) body.session_id = options.sessionId;
    if (traceId) body.trace_id = traceId;
    if (options.virtualKey) body.virtual_key = options.virtualKey;
    if (options.feature) body.feature = options.feature;
    if (options.pending) {
      const pending: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(options.pending)) if (v !== undefined && v !== null) pending[k] = v;
      if (Object.keys(pending).length) body.pending = pending;
    }
    return body;
  }

  /** The trace `currentTraceId` finds; a lookup that throws finds none (it must never fail the check). */
  private traceOfContext(): string | undefined {
    try {
      return this.currentTraceId?.() || undefined;
    } catch {
      return undefined;
    }
  }

  /** One request, its body read within the same deadline (headers then a stall is a hung endpoint too). */
  private async request(path: string, init: RequestInit, timeoutMs: number): Promise<Answer> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    try {
      const response = await this.fetchImpl(this.endpoint + path, { ...init, signal: controller.signal });
      return { status: response.status, headers: response.headers, text: await response.text() };
    } finally {
      clearTimeout(timer);
    }
  }

  /** The id a locally made answer names: the session, else the trace. */
  private static scopeId(body: Record<string, unknown>): string {
    return String(body.session_id ?? body.trace_id ?? '');
  }

  private cached(body: Record<string, unknown>, staleOk: boolean): Decision | undefined {
    const entry = this.blocklist.match({
      sessionId: body.session_id as string | undefined, traceId: body.trace_id as string | undefined,
      virtualKey: body.virtual_key as string | undefined, feature: body.feature as string | undefined,
    }, Date.now() / 1000, staleOk);
    if (!entry) return undefined;
    return refusedDecision(blockBody(LoopGuard.scopeId(body), entry.reason, entry.scope, entry.ruleName), 'cache');
  }

  /** The check failed: the cached block list (however stale), then the fail mode. */
  private unavailable(body: Record<string, unknown>, why: string, kind: FailureKind = 'outage'): Decision {
    this.failures += 1;
    if (kind === 'auth') this.authFailures += 1;
    const scopeId = LoopGuard.scopeId(body);
    const cached = this.cached(body, true);
    let mode: string;
    if (cached) mode = `the cached block list still refuses the call (${cached.reason})`;
    else mode = this.failOpen ? 'fail open: the call proceeds' : 'fail closed: the call is refused';
    this.logFailure(kind, why, mode, scopeId);
    if (cached) return cached;
    if (this.failOpen) {
      return {
        action: 'allow', level: 'none', confidence: 0, dominantSignal: 'none', detector: 'none', scope: 'session',
        reason: REASON_UNAVAILABLE, ruleName: '', delaySeconds: 0, instruction: '', sessionId: scopeId,
        source: 'fail_open',
      };
    }
    return refusedDecision(blockBody(scopeId, REASON_UNAVAILABLE), 'fail_closed', null);
  }

  private logFailure(kind: FailureKind, why: string, mode: string, sessionId: string): void {
    const t = monotonic();
    if (t - this.lastWarned[kind] < WARN_EVERY_MS) {
      this.suppressed[kind] += 1;
      return;
    }
    const details = { endpoint: this.endpoint, sessionId, suppressed: this.suppressed[kind] };
    if (kind === 'auth') {
      const given = this.headers.authorization ? 'the API token it was sent' : 'a missing API token';
      const message = `loop-detector refused ${given} (${why}): a configuration error, not an outage. Pass the `
        + `service's API token as apiKey or set $${API_TOKEN_ENV} (the service's api.api_token, $${API_TOKEN_ENV} `
        + `or <data-dir>/api-token); until then: ${mode}`;
      if (this.logger?.error) this.logger.error(message, details);
      else this.logger?.warn(message, details);
    } else {
      this.logger?.warn(`loop-detector enforcement endpoint unavailable (${why}); ${mode}`, details);
    }
    this.lastWarned[kind] = t;
    this.suppressed[kind] = 0;
  }
}
