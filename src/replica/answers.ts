/**
 * The replica's answers as values: status, JSON body, extra headers. Bodies
 * use the service's shapes: a list page `{users, total, offset, limit}` with
 * each user as stored, a resolve as the bare User, `{"detail": "..."}` for
 * errors and FastAPI's 422 for a bad query.
 */
import type { Freshness, PageAnswer, ResolveAnswer } from '../../db/replica-reader.js';
import { parseListQuery, validationErrorBody } from '../service/wire.js';

export interface Answer {
  status: number;
  body: Buffer | string;
  /** Flat list (name, value, …). */
  headers: readonly string[];
}

const COMMA = Buffer.from(',');
const USERS_OPEN = Buffer.from('{"users":[');

export function detail(status: number, message: string, headers: readonly string[] = []): Answer {
  return { status, body: JSON.stringify({ detail: message }), headers };
}

export const UNAUTHORIZED = detail(401, 'Missing or invalid API key');
export const NOT_FOUND = detail(404, 'Not Found');
export const INTERNAL_ERROR = detail(500, 'Internal Server Error');

/** A valid query, or the 422 answer for it. */
export function listQueryOrAnswer(query: string, headers: () => readonly string[]): { offset: number; limit: number } | Answer {
  const q = parseListQuery(new URLSearchParams(query));
  if (q.ok) return q;
  return { status: 422, body: validationErrorBody(q.items), headers: headers() };
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

export function resolveAnswer(found: ResolveAnswer, verdict: FreshnessVerdict): Answer {
  return found.raw === undefined ? detail(404, 'User not found', verdict.headers) : { status: 200, body: found.raw, headers: verdict.headers };
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
  const headers = ['x-mirror-synced-at', f.syncedAt, 'x-mirror-run-id', String(f.runId)];
  const stale = !(ageMs <= maxStalenessMs);
  if (stale) headers.push('warning', STALE_WARNING);
  return {
    serving: true,
    ready: !stale,
    headers,
    ageSeconds: Math.round(ageMs / 1000),
    reason: stale ? `the last succeeded sync is older than ${Math.round(maxStalenessMs / 1000)} s` : 'ok',
  };
}
