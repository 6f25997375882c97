/**
 * A local copy of the service's block list (`GET /v1/blocklist`), refreshed with `If-None-Match` (a `304`
 * costs no body), so a check for a blocked scope is refused without a network round trip. Entries expire
 * on their own `expires_at`.
 *
 * Staleness is asymmetric. Before a check, the copy is trusted only while at most `maxStaleMs` old: a list
 * that old may miss an unblock, and the service can be asked instead. After a check that *failed* (the
 * service unreachable, slow or answering nonsense), any copy still blocks, however old (`staleOk`): a block
 * is lifted by an admin or by its own expiry, never by an outage.
 */

export type Scope = 'session' | 'trace' | 'key' | 'feature';

export interface BlockEntry {
  scope: Scope;
  id: string;
  reason: string;
  ruleName: string;
  detector: string;
  /** unix seconds */
  expiresAt?: number;
}

const GROUPS: ReadonlyArray<[string, Scope]> = [
  ['sessions', 'session'], ['traces', 'trace'], ['keys', 'key'], ['features', 'feature'],
];

export interface ScopeIds {
  sessionId?: string;
  traceId?: string;
  virtualKey?: string;
  feature?: string;
}

const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

export class LocalBlocklist {
  etag?: string;
  /** `performance.now()` of the last 200 or 304 */
  fetchedAt?: number;
  fetches = 0;
  notModified = 0;
  private byScope: Record<Scope, Map<string, BlockEntry>> = {
    session: new Map(), trace: new Map(), key: new Map(), feature: new Map(),
  };

  constructor(public maxStaleMs = 30_000) {}

  get fresh(): boolean {
    return this.fetchedAt !== undefined && now() - this.fetchedAt <= this.maxStaleMs;
  }

  /** Milliseconds since the last usable answer (Infinity before the first). */
  get ageMs(): number {
    return this.fetchedAt === undefined ? Infinity : now() - this.fetchedAt;
  }

  /** Take a `/v1/blocklist` answer; returns whether it was usable (200 or 304). */
  apply(status: number, etag: string | null | undefined, body: Record<string, unknown> | undefined): boolean {
    if (status === 304) {
      this.fetchedAt = now();
      this.notModified += 1;
      return true;
    }
    if (status !== 200 || !body) return false;
    const fresh: Record<Scope, Map<string, BlockEntry>> = {
      session: new Map(), trace: new Map(), key: new Map(), feature: new Map(),
    };
    for (const [group, scope] of GROUPS) {
      const entries = body[group];
      if (!Array.isArray(entries)) continue;
      for (const e of entries as Array<Record<string, unknown>>) {
        const id = String(e.id);
        const expires = e.expires_at;
        fresh[scope].set(id, {
          scope, id, reason: String(e.reason ?? ''), ruleName: String(e.rule_name ?? ''),
          detector: String(e.detector ?? ''),
          expiresAt: typeof expires === 'number' ? expires : undefined,
        });
      }
    }
    this.byScope = fresh;
    this.etag = etag ?? undefined;
    this.fetchedAt = now();
    this.fetches += 1;
    return true;
  }

  /**
   * The entry that blocks a call in these scopes (an id, or `*` for every id of a scope), if any.
   * `staleOk`: consult the copy however old it is (the service could not be asked: see the module).
   */
  match(ids: ScopeIds, nowSeconds: number = Date.now() / 1000, staleOk = false): BlockEntry | undefined {
    if (this.fetchedAt === undefined || !(staleOk || this.fresh)) return undefined;
    const pairs: Array<[Scope, string | undefined]> = [
      ['session', ids.sessionId], ['trace', ids.traceId], ['key', ids.virtualKey], ['feature', ids.feature],
    ];
    for (const [scope, id] of pairs) {
      if (!id) continue;
      const entries = this.byScope[scope];
      if (entries.size === 0) continue;
      const entry = entries.get(id) ?? entries.get('*');
      if (entry && (entry.expiresAt === undefined || entry.expiresAt > nowSeconds)) return entry;
    }
    return undefined;
  }

  get size(): number {
    let n = 0;
    for (const m of Object.values(this.byScope)) n += m.size;
    return n;
  }
}
