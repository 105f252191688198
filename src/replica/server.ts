/**
 * The replica's HTTP server: routing, the key check, headers. The two read
 * endpoints of the service (list, resolve) in its wire format, the mirror's
 * change feed (GET /mirror/v1/changes?after=CURSOR&limit=N, behind the same
 * key; db/change-feed.ts), plus
 * /healthz (liveness), /readyz (a succeeded sync no older than
 * REPLICA_MAX_STALENESS_S) and /metrics (./metrics.ts); see ./answers.ts for
 * the headers. The connection cap and the header and idle timeouts keep one
 * client's slow or many connections from locking the others out
 * (./connection-guard.ts).
 *
 * Only REPLICA_API_KEY opens the data routes, in one of the headers of
 * ./settings.ts replicaKeyHeaders (the 401 names them); a 401 reads nothing from the mirror and carries no mirror headers. Probes
 * need no key. Nothing a client sends is ever echoed in an error or a log.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as HttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Registry } from 'prom-client';
import type { ReplicaReader } from '../../db/replica-reader.js';
import { logError } from '../runtime/log-error.js';
import { closeNow, listen } from '../runtime/lifecycle.js';
import { decodeSegment } from '../service/path-segment.js';
import { keyDigest, offeredKeyMatches } from '../service/server-wire.js';
import { CHANGES_PATH } from '../service/change-feed-route.js';
import {
  type Answer,
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
  rememberedJudge,
  resolveAnswer,
  unauthorized,
} from './answers.js';
import type { ReplicaSettings } from './settings.js';
import { ConnectionGuard, type Shed } from './connection-guard.js';
import { createReplicaMetrics } from './metrics.js';
import { readTlsPair, watchTlsFiles, type TlsWatch } from './tls.js';
import type { Logger } from 'pino';

export interface ReplicaServerOptions {
  settings: ReplicaSettings;
  reader: ReplicaReader;
  logger: Logger;
  now?: () => number;
  /** Why the mirror opened is no longer the one at MIRROR_DB (./start.ts); undefined while it is. */
  lost?: () => string | undefined;
  /** The daemon's registry, to show the replica's metrics in as well. */
  metricsAlsoIn?: Registry;
}

export interface ReplicaServer {
  port: number;
  close(): Promise<void>;
}

/** How often Node sweeps its connections for the header timeout (its default, 30 s, would let one run to 40 s). */
const CHECK_TIMEOUTS_MS = 1_000;
/** A connection waiting less than this is not closed to make room at the cap (./connection-guard.ts). */
const EVICT_AFTER_MS = 1_000;

export async function startReplicaServer(options: ReplicaServerOptions): Promise<ReplicaServer> {
  const { settings, logger: log } = options;
  const shedLog = throttledShedLog(log, settings.maxConnections);
  let guard: ConnectionGuard | undefined;
  // Checked at start already (./settings.ts); read again here, a moment later, for the server.
  const files = settings.tls;
  const pair = files === undefined ? undefined : readTlsPair(files);
  let tlsWatch: TlsWatch | undefined;
  const metrics = createReplicaMetrics({
    max: settings.maxConnections,
    open: () => guard?.open ?? 0,
    ...(pair === undefined ? {} : { certificateValidTo: () => (tlsWatch?.current() ?? pair).validTo.getTime() }),
    ...(options.metricsAlsoIn === undefined ? {} : { alsoIn: options.metricsAlsoIn }),
  });
  guard = new ConnectionGuard({
    max: settings.maxConnections,
    graceMs: EVICT_AFTER_MS,
    onShed: (how) => {
      metrics.shed(how);
      shedLog(how);
    },
  });
  const connections = guard;
  const handler = requestHandler(options, metrics.registry);
  // One listener for every response (a response closes once): no closure and no once-wrapper per request.
  function responseClosed(this: ServerResponse): void {
    connections.requestEnded(this.req.socket);
  }
  const httpOptions = {
    // The replica takes no request bodies: the whole request is its headers.
    headersTimeout: settings.headersTimeoutMs,
    requestTimeout: settings.headersTimeoutMs,
    keepAliveTimeout: settings.idleTimeoutMs,
    connectionsCheckingInterval: CHECK_TIMEOUTS_MS,
    noDelay: true,
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    connections.requestStarted(req.socket);
    res.on('close', responseClosed);
    let answer: Answer | Promise<Answer>;
    try {
      answer = handler(req);
    } catch (err) {
      logError(log, 'error', { event: 'replica.error', err }, 'replica request failed');
      answer = INTERNAL_ERROR;
    }
    if (!(answer instanceof Promise)) return send(res, answer);
    answer.then(
      (a) => send(res, a),
      (err: unknown) => {
        logError(log, 'error', { event: 'replica.error', err }, 'replica request failed');
        send(res, INTERNAL_ERROR);
      },
    );
  };
  let server: HttpServer | HttpsServer;
  if (files === undefined || pair === undefined) {
    server = createServer(httpOptions, onRequest);
    server.on('connection', (socket: Socket) => connections.admit(socket));
  } else {
    const tlsServer = createTlsServer(
      { ...httpOptions, cert: pair.cert, key: pair.key, handshakeTimeout: settings.headersTimeoutMs },
      onRequest,
    );
    // Over TLS the guard holds the TLS socket, the one requests name: a connection counts from its handshake's
    // end; one still in its handshake is bounded by the handshake timeout (REPLICA_HEADERS_TIMEOUT_MS).
    tlsServer.on('secureConnection', (socket: Socket) => connections.admit(socket));
    tlsServer.on('tlsClientError', () => metrics.clientError('tls'));
    tlsWatch = watchTlsFiles(files, pair, (p) => tlsServer.setSecureContext({ cert: p.cert, key: p.key }), log);
    server = tlsServer;
  }
  // Node's own answer to a client error, counted: 408 for headers not in time, 400 for a malformed request.
  // One count per connection: a client that goes on sending after its 408 makes the parser fail again.
  const erred = new WeakSet<Socket>();
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (erred.has(socket)) {
      socket.destroy();
      return;
    }
    erred.add(socket);
    const reason = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'headers_timeout' : err.code?.startsWith('HPE_') ? 'malformed' : 'reset';
    metrics.clientError(reason);
    if (reason === 'reset' || !socket.writable || !connections.isWaiting(socket)) {
      socket.destroy();
      return;
    }
    const status =
      reason === 'headers_timeout'
        ? '408 Request Timeout'
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? '431 Request Header Fields Too Large'
          : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  });
  const port = await listen(server, settings.port, settings.host).catch((err: unknown) => {
    tlsWatch?.stop();
    throw err;
  });
  server.on('error', (err) => logError(log, 'error', { event: 'replica.server_error', err }, 'replica server error'));
  log.info(
    {
      event: 'replica.listening',
      host: settings.host,
      port,
      keyHeaders: settings.apiKeyHeaders,
      maxConnections: settings.maxConnections,
      headersTimeoutMs: settings.headersTimeoutMs,
      idleTimeoutMs: settings.idleTimeoutMs,
      ...(pair === undefined ? {} : { tls: { serial: pair.serial, validTo: pair.validTo } }),
    },
    `replica on ${pair === undefined ? 'http' : 'https'}://${settings.host}:${port}`,
  );
  return {
    port,
    close: () => {
      tlsWatch?.stop();
      return closeNow(server);
    },
  };
}

/** How often at most the cap's log line is written; sheds in between are counted into the next one. */
const SHED_LOG_EVERY_MS = 60_000;

/** One warning when the cap first bites, then at most one a minute with the counts since the last. */
function throttledShedLog(log: Logger, max: number): (how: Shed) => void {
  const counts = { refused: 0, evicted: 0 };
  let lastAt = -Infinity;
  let pending: NodeJS.Timeout | undefined;
  const write = () => {
    pending = undefined;
    lastAt = Date.now();
    log.warn(
      { event: 'replica.connections_capped', max, refused: counts.refused, evicted: counts.evicted },
      `replica at its connection cap (${max}, REPLICA_MAX_CONNECTIONS): ${counts.evicted} waiting connection(s) closed, ${counts.refused} new one(s) refused`,
    );
    counts.refused = 0;
    counts.evicted = 0;
  };
  return (how) => {
    counts[how] += 1;
    if (pending !== undefined) return;
    const wait = lastAt + SHED_LOG_EVERY_MS - Date.now();
    if (wait <= 0) write();
    else pending = setTimeout(write, wait).unref();
  };
}

function requestHandler(options: ReplicaServerOptions, registry: Registry): (req: IncomingMessage) => Answer | Promise<Answer> {
  const { settings, reader } = options;
  const now = options.now ?? Date.now;
  const expectedKey = keyDigest(settings.apiKey);
  const refused = unauthorized(settings.apiKeyHeaders);
  const judge = rememberedJudge(settings.maxStalenessMs, now);

  return (req) => {
    const route: ReplicaRoute = matchReplicaRoute(req.method ?? 'GET', req.url ?? '/');
    if (route.name !== 'healthz' && route.name !== 'method-not-allowed') {
      // A file deleted or replaced under us: what it holds is no longer the mirror; nothing is served from it.
      const lost = options.lost?.();
      if (lost !== undefined) return detail(503, `Mirror not ready: ${lost}`);
    }
    switch (route.name) {
      case 'healthz':
        return { status: 200, body: '{"status":"ok"}', headers: judge(reader.freshness()).headers };
      case 'readyz': {
        const f = reader.freshness();
        return readinessAnswer(judgeFreshness(f, now(), settings.maxStalenessMs), settings.maxStalenessMs, f.runId, f.syncedAt);
      }
      case 'metrics':
        return registry.metrics().then((body) => ({ status: 200, body, headers: [], contentType: registry.contentType }));
      case 'method-not-allowed':
        return detail(405, 'Method Not Allowed', ['allow', route.allow]);
      default:
    }
    if (!keyOffered(req, settings.apiKeyHeaders, expectedKey)) return refused;
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
        if ('status' in q) return q;
        // The turn's snapshot first, so the feed page and its freshness headers agree.
        const fresh = judge(reader.freshness()).headers;
        const a = changesAnswer(reader.changes(q.after, q.limit));
        return { ...a, headers: [...a.headers, ...fresh] };
      }
      default:
        return NOT_FOUND;
    }
  };
}

/** Whether one of `headers` holds the key (each compared in constant time). */
function keyOffered(req: IncomingMessage, headers: readonly string[], expectedKey: Buffer): boolean {
  for (const h of headers) if (offeredKeyMatches(req.headers[h], expectedKey)) return true;
  return false;
}

function send(res: ServerResponse, answer: Answer): void {
  const length = typeof answer.body === 'string' ? Buffer.byteLength(answer.body) : answer.body.length;
  res.writeHead(answer.status, [
    'content-type',
    answer.contentType ?? 'application/json',
    'content-length',
    String(length),
    ...answer.headers,
  ]);
  const body = answer.body;
  if (typeof body === 'string' || body.length > ONE_WRITE_MAX) res.end(body);
  else res.end(body.toString('latin1'), 'latin1');
}

/**
 * Bodies up to this size go out as latin1 text: Node then sends the head and
 * the body as one string in one write, where a Buffer body is a second chunk
 * (cork, writev of two). latin1 maps each byte to one character and back,
 * so the bytes on the wire are the stored ones, whatever they are.
 */
const ONE_WRITE_MAX = 16 * 1024;

/**
 * The replica's routes, matched on the raw request target. The resolve id is
 * the raw segment after `/v2/user/resolve/`, decoded exactly once (see
 * ../service/path-segment.ts), so `%2F`, `%3F`, `%25`, spaces and non-ASCII
 * round-trip and a `/` in the raw path never reaches the id.
 */
type ReplicaRoute =
  | { name: 'list'; query: string }
  | { name: 'changes'; query: string }
  | { name: 'resolve'; clientUserId: string }
  | { name: 'healthz' }
  | { name: 'readyz' }
  | { name: 'metrics' }
  | { name: 'not-found' }
  | { name: 'method-not-allowed'; allow: string };

const RESOLVE_PREFIX = '/v2/user/resolve/';

function matchReplicaRoute(method: string, target: string): ReplicaRoute {
  const queryAt = target.indexOf('?');
  const path = queryAt === -1 ? target : target.slice(0, queryAt);
  const route = byPath(path, queryAt === -1 ? '' : target.slice(queryAt + 1));
  if (route.name === 'not-found') return route;
  const allow = route.name === 'healthz' || route.name === 'readyz' || route.name === 'metrics' ? 'GET, HEAD' : 'GET';
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
  if (path === '/metrics') return { name: 'metrics' };
  return { name: 'not-found' };
}
