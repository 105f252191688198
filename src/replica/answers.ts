/**
 * The replica's answers as values: status, JSON body, extra headers. Bodies
 * use the service's shapes: a list page `{users, total, offset, limit}` with
 * each user as stored, a resolve as the bare User, `{"detail": "..."}` for
 * errors and FastAPI's 422 for a bad query.
 */
import type { FeedPage } from '../../db/change-feed.js';
import type { Freshness, PageAnswer, ResolveAnswer } from '../../db/replica-reader.js';
import { failedItems, parseListQuery, queryInt, validationErrorBody, type ValidationItem } from '../service/server-wire.js';
import { clipEchoed } from '../runtime/line-text.js';
import type { LineageFreshness } from '../../db/lineage-freshness.js';
import { SOURCE_HEADERS } from '../service/source-freshness.js';
import { CHANGES_DEFAULT_LIMIT, CHANGES_MAX_LIMIT } from '../service/change-feed-route.js';

export interface Answer {
  status: number;
  body: Buffer | string;
  /** Flat list (name, value, …). */
  headers: readonly string[];
  /** Unset: application/json. */
  contentType?: string;
}

const COMMA = Buffer.from(',');
const USERS_OPEN = Buffer.from('{"users":[');
const EVENTS_OPEN = Buffer.from('{"events":[');

export function detail(status: number, message: string, headers: readonly string[] = []): Answer {
  return { status, body: JSON.stringify({ detail: message }), headers };
}

/** The 401: names the header(s) the key was expected in, never what the client sent. */
export function unauthorized(headers: readonly string[]): Answer {
  return detail(401, `Missing or invalid API key (expected in the header ${headers.join(' or ')})`);
}
export const NOT_FOUND = detail(404, 'Not Found');
export const INTERNAL_ERROR = detail(500, 'Internal Server Error');

/** A valid query, or the 422 answer for it. */
export function listQueryOrAnswer(query: string, headers: () => readonly string[]): { offset: number; limit: number } | Answer {
  const q = parseListQuery(new URLSearchParams(query));
  if (q.ok) return q;
  return { status: 422, body: validationErrorBody(clipped(q.items)), headers: headers() };
}

export function notServing(verdict: FreshnessVerdict): Answer {
  return detail(503, `Mirror not ready: ${verdict.reason}`, ['retry-after', '30']);
}

export function pageAnswer(page: PageAnswer, offset: number, limit: number, verdict: FreshnessVerdict): Answer {
  const parts: Buffer[] = [USERS_OPEN];
  page.users.forEach((user, i) => {
    if (i > 0) parts.push(COMMA);
    parts.push(user);
  });
  parts.push(Buffer.from(`],"total":${page.total},"offset":${offset},"limit":${limit}}`));
  return { status: 200, body: Buffer.concat(parts), headers: verdict.headers };
}

/** A valid `after` (undefined: from the oldest held) and `limit`, or the 422 answer. */
export function changesQueryOrAnswer(query: string): { after: number | undefined; limit: number } | Answer {
  const params = new URLSearchParams(query);
  const after = queryInt(params, 'after', { default: -1, ge: 0 });
  const limit = queryInt(params, 'limit', { default: CHANGES_DEFAULT_LIMIT, ge: 1, le: CHANGES_MAX_LIMIT });
  if (after.ok && limit.ok) return { after: after.value < 0 ? undefined : after.value, limit: limit.value };
  return { status: 422, body: validationErrorBody(clipped(failedItems([after, limit]))), headers: [] };
}

/** FastAPI echoes a bad value whole; the replica echoes at most its head (src/runtime/line-text.ts). */
function clipped(items: readonly ValidationItem[]): ValidationItem[] {
  return items.map((item) => (typeof item.input === 'string' ? { ...item, input: clipEchoed(item.input) } : item));
}

/** `{"events": [...], "next": CURSOR}`, the stored bodies as they are; 410 with the oldest good cursor when retention dropped events after `after`. */
export function changesAnswer(page: FeedPage | undefined): Answer {
  if (page === undefined)
    return detail(503, 'Mirror not ready: this mirror has no change feed yet; it starts with the next sync', ['retry-after', '30']);
  if (page.gone && page.restore !== undefined) {
    const r = page.restore;
    const body = JSON.stringify({
      detail: `Cursor from a mirror file that was replaced: the mirror was restored from a backup whose feed ends at cursor ${r.backupCursor}; resume after it`,
      oldest: page.oldest,
      restored: { at: r.at, backup_at: r.backupAt, backup_cursor: r.backupCursor },
    });
    return { status: 410, body, headers: [] };
  }
  if (page.gone) {
    const body = JSON.stringify({
      detail: 'Cursor older than the change feed retention: events after it were dropped',
      oldest: page.oldest,
    });
    return { status: 410, body, headers: [] };
  }
  const parts: Buffer[] = [EVENTS_OPEN];
  page.events.forEach((e, i) => {
    if (i > 0) parts.push(COMMA);
    parts.push(Buffer.from(e.body));
  });
  parts.push(Buffer.from(`],"next":${page.next}}`));
  return { status: 200, body: Buffer.concat(parts), headers: [] };
}

export function resolveAnswer(found: ResolveAnswer, verdict: FreshnessVerdict): Answer {
  return found.raw === undefined
    ? detail(404, 'User not found', verdict.headers)
    : { status: 200, body: found.raw, headers: verdict.headers };
}

export function readinessAnswer(verdict: FreshnessVerdict, maxStalenessMs: number, runId: number | null, syncedAt: string | null): Answer {
  const body = {
    ready: verdict.ready,
    reason: verdict.reason,
    syncedAt,
    runId,
    ageSeconds: verdict.ageSeconds ?? null,
    maxStalenessSeconds: Math.round(maxStalenessMs / 1000),
  };
  return { status: verdict.ready ? 200 : 503, body: JSON.stringify(body), headers: verdict.headers };
}

/**
 * How fresh the replica's answer is, decided from the mirror's sync runs:
 * the headers every answer that read the mirror carries, and readiness.
 *
 *   X-Mirror-Synced-At  when the latest succeeded (complete) sync finished
 *   X-Mirror-Run-Id     the latest run that published (succeeded or partial):
 *                       the state of the mirror the answer was read from
 *   X-Mirror-Published-At, -Source-At, -Epoch, -Restored-At
 *                       what a follower mirror needs of its leader
 *                       (src/service/source-freshness.ts, docs/followers.md)
 *   Warning             `110 - "Response is Stale"` (RFC 7234) when that
 *                       succeeded sync is older than REPLICA_MAX_STALENESS_S
 *
 * A mirror that never completed a sync serves nothing (503): its 404s would
 * claim users do not exist.
 */
export const STALE_WARNING = '110 - "Response is Stale"';

export interface FreshnessVerdict {
  /** False when no sync ever succeeded: data routes answer 503. */
  serving: boolean;
  /** Serving and not past the max staleness: /readyz says 200. */
  ready: boolean;
  /** Flat header list (name, value, …) for `writeHead`. */
  headers: string[];
  ageSeconds: number | undefined;
  reason: string;
}

export function judgeFreshness(f: Freshness, nowMs: number, maxStalenessMs: number): FreshnessVerdict {
  if (f.syncedAt === null || f.runId === null) {
    return { serving: false, ready: false, headers: [], ageSeconds: undefined, reason: 'the mirror has not completed a sync yet' };
  }
  const ageMs = Math.max(0, nowMs - Date.parse(f.syncedAt));
  const headers = ['x-mirror-synced-at', f.syncedAt, 'x-mirror-run-id', String(f.runId), ...lineageHeaders(f.lineage)];
  const stale = !withinStaleness(ageMs, maxStalenessMs);
  if (stale) headers.push('warning', STALE_WARNING);
  return {
    serving: true,
    ready: !stale,
    headers,
    ageSeconds: Math.round(ageMs / 1000),
    reason: stale ? `the last succeeded sync is older than ${Math.round(maxStalenessMs / 1000)} s` : 'ok',
  };
}

/** The headers a follower reads (src/service/source-freshness.ts); none before the first publish. */
function lineageHeaders(l: LineageFreshness | undefined): string[] {
  if (l === undefined) return [];
  const h = [SOURCE_HEADERS.publishedAt, l.publishedAt, SOURCE_HEADERS.sourceAt, l.sourceAt, SOURCE_HEADERS.epoch, l.epoch];
  if (l.restoredAt !== undefined) h.push(SOURCE_HEADERS.restoredAt, l.restoredAt);
  if (l.cursor !== undefined) h.push(SOURCE_HEADERS.cursor, String(l.cursor));
  return h;
}

function withinStaleness(ageMs: number, maxStalenessMs: number): boolean {
  return ageMs <= maxStalenessMs;
}

/**
 * judgeFreshness for the data routes, remembered: the last verdict is reused
 * while the freshness is the same and the clock is on the same side of its
 * staleness bound, the only inputs its headers, `serving`, `ready` and
 * `reason` depend on. So a busy server builds one header array per state of
 * the mirror, not one per request. Its `ageSeconds` is as old as the
 * verdict: /readyz, which shows the age, judges afresh.
 */
export function rememberedJudge(maxStalenessMs: number, now: () => number): (f: Freshness) => FreshnessVerdict {
  let last: { f: Freshness; syncedMs: number; within: boolean; verdict: FreshnessVerdict } | undefined;
  return (f) => {
    const at = now();
    if (last !== undefined && (last.f === f || sameFreshness(last.f, f))) {
      if (withinStaleness(Math.max(0, at - last.syncedMs), maxStalenessMs) === last.within) return last.verdict;
    }
    const syncedMs = f.syncedAt === null ? NaN : Date.parse(f.syncedAt);
    const verdict = judgeFreshness(f, at, maxStalenessMs);
    last = { f, syncedMs, within: withinStaleness(Math.max(0, at - syncedMs), maxStalenessMs), verdict };
    return verdict;
  };
}

/** Every field the headers are built from. */
function sameFreshness(a: Freshness, b: Freshness): boolean {
  const x = a.lineage;
  const y = b.lineage;
  if (a.runId !== b.runId || a.syncedAt !== b.syncedAt) return false;
  if (x === undefined || y === undefined) return x === y;
  return (
    x.publishedAt === y.publishedAt &&
    x.sourceAt === y.sourceAt &&
    x.epoch === y.epoch &&
    x.restoredAt === y.restoredAt &&
    x.cursor === y.cursor
  );
}
