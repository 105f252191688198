/**
 * The replica's HTTP server: routing, the key check, headers. The two read
 * endpoints of the service (list, resolve) in its wire format, the mirror's
 * change feed (GET /mirror/v1/changes?after=CURSOR&limit=N, behind the same
 * key; db/change-feed.ts), plus
 * /healthz (liveness) and /readyz (a succeeded sync no older than
 * REPLICA_MAX_STALENESS_S); see ./answers.ts for the headers.
 *
 * Only REPLICA_API_KEY opens the data routes, in one of the headers of
 * ./settings.ts replicaKeyHeaders (the 401 names them); a 401 reads nothing from the mirror and carries no mirror headers. Probes
 * need no key. Nothing a client sends is ever echoed in an error or a log.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Freshness, ReplicaReader } from '../../db/replica-reader.js';
import { logError, type Logger } from '../runtime/log-error.js';
import { closeNow, listen } from '../runtime/lifecycle.js';
import { decodeSegment } from '../service/path-segment.js';
import { keyDigest, offeredKeyMatches } from '../service/server-wire.js';
import {
  type Answer,
  CHANGES_PATH,
  changesAnswer,
  changesQueryOrAnswer,
  detail,
  type FreshnessVerdict,
  INTERNAL_ERROR,
  judgeFreshness,
  listQueryOrAnswer,
  NOT_FOUND,
  notServing,
  pageAnswer,
  readinessAnswer,
  resolveAnswer,
  unauthorized,
} from './answers.js';
import type { ReplicaSettings } from './settings.js';

export interface ReplicaServerOptions {
  settings: ReplicaSettings;
  reader: ReplicaReader;
  logger: Logger;
  now?: () => number;
}

export interface ReplicaServer {
  port: number;
  close(): Promise<void>;
}

/** Longer than common client pools keep an idle socket (undici: 4 s), so the client closes first. */
const KEEP_ALIVE_MS = 65_000;

export async function startReplicaServer(options: ReplicaServerOptions): Promise<ReplicaServer> {
  const { settings, logger: log } = options;
  const handler = requestHandler(options);
  const server = createServer({ keepAliveTimeout: KEEP_ALIVE_MS, noDelay: true }, (req, res) => {
    let answer: Answer;
    try {
      answer = handler(req);
    } catch (err) {
      logError(log, 'error', { event: 'replica.error', err }, 'replica request failed');
      answer = INTERNAL_ERROR;
    }
    send(res, answer);
  });
  const port = await listen(server, settings.port, settings.host);
  server.on('error', (err) => logError(log, 'error', { event: 'replica.server_error', err }, 'replica server error'));
  log.info(
    { event: 'replica.listening', host: settings.host, port, keyHeaders: settings.apiKeyHeaders },
    `replica on http://${settings.host}:${port}`,
  );
  return {
    port,
    close: () => closeNow(server),
  };
}

function requestHandler(options: ReplicaServerOptions): (req: IncomingMessage) => Answer {
  const { settings, reader } = options;
  const now = options.now ?? Date.now;
  const expectedKey = keyDigest(settings.apiKey);
  const refused = unauthorized(settings.apiKeyHeaders);
  // Judged once per turn and freshness, as the reader reads once per turn (db/replica-reader.ts):
  // the headers of a busy turn's answers are one array, built once.
  let judged: { f: Freshness; verdict: FreshnessVerdict } | undefined;
  const forget = () => (judged = undefined);
  const judge = (f: Freshness): FreshnessVerdict => {
    if (judged !== undefined && judged.f.runId === f.runId && judged.f.syncedAt === f.syncedAt) return judged.verdict;
    if (judged === undefined) setImmediate(forget);
    judged = { f, verdict: judgeFreshness(f, now(), settings.maxStalenessMs) };
    return judged.verdict;
  };

  return (req) => {
    const route: ReplicaRoute = matchReplicaRoute(req.method ?? 'GET', req.url ?? '/');
    switch (route.name) {
      case 'healthz':
        return { status: 200, body: '{"status":"ok"}', headers: judge(reader.freshness()).headers };
      case 'readyz': {
        const f = reader.freshness();
        return readinessAnswer(judge(f), settings.maxStalenessMs, f.runId, f.syncedAt);
      }
      case 'method-not-allowed':
        return detail(405, 'Method Not Allowed', ['allow', route.allow]);
      default:
    }
    if (!settings.apiKeyHeaders.some((h) => offeredKeyMatches(req.headers[h], expectedKey))) return refused;
    switch (route.name) {
      case 'resolve': {
        const found = reader.resolve(route.clientUserId);
        const verdict = judge(found);
        return verdict.serving ? resolveAnswer(found, verdict) : notServing(verdict);
      }
      case 'list': {
        let verdict: FreshnessVerdict | undefined;
        const q = listQueryOrAnswer(route.query, () => (verdict ??= judge(reader.freshness())).headers);
        if ('status' in q) return q;
        const page = reader.page(q.offset, q.limit);
        verdict = judge(page);
        return verdict.serving ? pageAnswer(page, q.offset, q.limit, verdict) : notServing(verdict);
      }
      case 'changes': {
        const q = changesQueryOrAnswer(route.query);
        return 'status' in q ? q : changesAnswer(reader.changes(q.after, q.limit));
      }
      default:
        return NOT_FOUND;
    }
  };
}

function send(res: ServerResponse, answer: Answer): void {
  const length = typeof answer.body === 'string' ? Buffer.byteLength(answer.body) : answer.body.length;
  res.writeHead(answer.status, ['content-type', 'application/json', 'content-length', String(length), ...answer.headers]);
  res.end(answer.body);
}

/**
 * The replica's routes, matched on the raw request target. The resolve id is
 * the raw segment after `/v2/user/resolve/`, decoded exactly once (see
 * ../service/path-segment.ts), so `%2F`, `%3F`, `%25`, spaces and non-ASCII
 * round-trip and a `/` in the raw path never reaches the id.
 */
export type ReplicaRoute =
  | { name: 'list'; query: string }
  | { name: 'changes'; query: string }
  | { name: 'resolve'; clientUserId: string }
  | { name: 'healthz' }
  | { name: 'readyz' }
  | { name: 'not-found' }
  | { name: 'method-not-allowed'; allow: string };

const RESOLVE_PREFIX = '/v2/user/resolve/';

export function matchReplicaRoute(method: string, target: string): ReplicaRoute {
  const queryAt = target.indexOf('?');
  const path = queryAt === -1 ? target : target.slice(0, queryAt);
  const route = byPath(path, queryAt === -1 ? '' : target.slice(queryAt + 1));
  if (route.name === 'not-found') return route;
  const allow = route.name === 'healthz' || route.name === 'readyz' ? 'GET, HEAD' : 'GET';
  return method === 'GET' || (method === 'HEAD' && allow !== 'GET') ? route : { name: 'method-not-allowed', allow };
}

function byPath(path: string, query: string): ReplicaRoute {
  if (path.startsWith(RESOLVE_PREFIX)) {
    const segment = path.slice(RESOLVE_PREFIX.length);
    return segment === '' || segment.includes('/') ? { name: 'not-found' } : { name: 'resolve', clientUserId: decodeSegment(segment) };
  }
  if (path === '/v2/user' || path === '/v2/user/') return { name: 'list', query };
  if (path === CHANGES_PATH) return { name: 'changes', query };
  if (path === '/healthz') return { name: 'healthz' };
  if (path === '/readyz') return { name: 'readyz' };
  return { name: 'not-found' };
}
