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

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface Logger {
  warn(message: string, details?: Record<string, unknown>): void;
  info?(message: string, details?: Record<string, unknown>): void;
}

export interface LoopGuardOptions {
  /** the API's base URL, e.g. `http://127.0.0.1:8080` */
  endpoint: string;
  /** sent as `Authorization: Bearer ...` */
  apiKey?: string;
  /** per check (default 500 ms) */
  timeoutMs?: number;
  /** when the API cannot be reached: let the call proceed (true, the default) or refuse it */
  failOpen?: boolean;
  /** how old the cached block list may get before a check refreshes it (default 2000); null: no cache */
  blocklistIntervalMs?: number | null;
  /** ignore the cached block list once older than this (default 10 x the interval) */
  maxStaleMs?: number;
  /** the fetch to use (default: the global one) */
  fetch?: FetchLike;
  /** how a throttle waits (default: setTimeout) */
  sleep?: (ms: number) => Promise<void>;
  /** where warnings go (default: console.warn); null: nowhere */
  logger?: Logger | null;
}

/** The scopes of a check. `sessionId` is required; the others narrow or widen what may block it. */
export interface CheckIds {
  sessionId: string;
  traceId?: string;
  virtualKey?: string;
  feature?: string;
}

export interface CheckOptions extends CheckIds {
  /** the call about to be made (`pendingRequest(...)`, `pendingTool(...)`): an exact repeat is refused first */
  pending?: Pending;
}

const defaultLogger: Logger = { warn: (m, d) => console.warn(m, d ?? '') };
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
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: FetchLike;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly logger: Logger | null;
  private refreshing?: Promise<boolean>;
  private suppressed = 0;
  private lastWarned = -Infinity;
  private closed = false;

  constructor(options: LoopGuardOptions) {
    this.endpoint = options.endpoint.replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? 500;
    this.failOpen = options.failOpen ?? true;
    this.blocklistIntervalMs = options.blocklistIntervalMs === undefined ? 2000 : options.blocklistIntervalMs;
    this.blocklist = new LocalBlocklist(options.maxStaleMs ?? 10 * (this.blocklistIntervalMs ?? 3000));
    this.headers = { 'content-type': 'application/json' };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    const f = options.fetch;
    // never call a global fetch as a method of this object (edge runtimes reject an unbound `this`)
    this.fetchImpl = f ?? ((input, init) => fetch(input, init));
    this.sleep = options.sleep ?? defaultSleep;
    this.logger = options.logger === undefined ? defaultLogger : options.logger;
  }

  /** The decision for the call about to be made (never throws for a block: see `beforeCall`). */
  async check(options: CheckOptions): Promise<Decision> {
    const body = this.body(options);
    this.maybeRefresh();
    const entry = this.blocklist.match(options);
    if (entry) {
      return refusedDecision(blockBody(body.session_id as string, entry.reason, entry.scope, entry.ruleName), 'cache');
    }
    const sessionId = body.session_id as string;
    try {
      const answer = await this.request('/v1/check', {
        method: 'POST', headers: this.headers, body: JSON.stringify(body),
      }, this.timeoutMs);
      const warning = answer.headers.get('x-loop-warning') ?? undefined;
      if (answer.status === 200) {
        return decisionFromJson(JSON.parse(answer.text) as Record<string, unknown>, warning);
      }
      if (answer.status === 429) {
        const retry = Number(answer.headers.get('retry-after') ?? 60);
        return refusedDecision(JSON.parse(answer.text) as BlockedBody, 'server', Number.isFinite(retry) ? retry : 60,
          warning);
      }
      return this.unavailable(sessionId, `HTTP ${answer.status}`);
    } catch (err) {
      return this.unavailable(sessionId, err instanceof Error ? err.name : 'error');
    }
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
      const body = answer.status === 200 ? JSON.parse(answer.text) as Record<string, unknown> : undefined;
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
    if (!options || !options.sessionId) {
      throw new TypeError('sessionId is required');
    }
    const body: Record<string, unknown> = { session_id: options.sessionId };
    if (options.traceId) body.trace_id = options.traceId;
    if (options.virtualKey) body.virtual_key = options.virtualKey;
    if (options.feature) body.feature = options.feature;
    if (options.pending) {
      const pending: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(options.pending)) if (v !== undefined && v !== null) pending[k] = v;
      if (Object.keys(pending).length) body.pending = pending;
    }
    return body;
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

  private unavailable(sessionId: string, why: string): Decision {
    this.failures += 1;
    const t = monotonic();
    const mode = this.failOpen ? 'fail open: the call proceeds' : 'fail closed: the call is refused';
    if (t - this.lastWarned >= WARN_EVERY_MS) {
      this.logger?.warn(`loop-detector enforcement endpoint unavailable (${why}); ${mode}`,
        { endpoint: this.endpoint, sessionId, suppressed: this.suppressed });
      this.lastWarned = t;
      this.suppressed = 0;
    } else {
      this.suppressed += 1;
    }
    if (this.failOpen) {
      return {
        action: 'allow', level: 'none', confidence: 0, dominantSignal: 'none', detector: 'none', scope: 'session',
        reason: REASON_UNAVAILABLE, ruleName: '', delaySeconds: 0, instruction: '', sessionId, source: 'fail_open',
      };
    }
    return refusedDecision(blockBody(sessionId, REASON_UNAVAILABLE), 'fail_closed', null);
  }
}
