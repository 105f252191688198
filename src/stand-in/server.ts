/**
 * The HTTP plumbing of the stand-in: per request, authenticate, count the
 * call, apply the fault decision, answer, then log. Faults apply only to
 * authenticated requests, so a test's failNext is never eaten by a probe
 * without a key.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  answer,
  authorizeManagement,
  authorizeTeam,
  type AuthOutcome,
  type Domain,
  faultReply,
  type Keys,
  matchRoute,
  type Route,
} from './routes.js';
import type { Churn } from './churn.js';
import { control } from './control.js';
import { chooseEncoding, compress, COMPRESS_MIN_BYTES } from './compression.js';
import { Link, LINK_CHUNK_BYTES } from './link.js';
import { detailReply, type Reply } from './reply.js';
import type { FaultDecision, Faults, SlowBody } from './faults.js';
import { flattenHeaders, type RequestLog, type RequestLogEntry, type RouteCounts } from './request-log.js';

export interface ServerDeps extends Domain {
  keys: Keys;
  faults: Faults;
  churn: Churn;
  requests: RequestLog;
  counts: RouteCounts;
  onRequest?: (entry: RequestLogEntry) => void;
  /** Compress answers for clients that ask (./compression.ts); default true. */
  compress?: boolean;
  /** The link every answer crosses when the plan limits bandwidth. */
  link: Link;
}

export interface StandInServer {
  server: Server;
  /** Stops listening, cuts open connections and pending slow answers. */
  shutdown: () => Promise<void>;
}

type Outcome = { status: number; fault: RequestLogEntry['fault'] };

export function createStandInServer(deps: ServerDeps): StandInServer {
  const stopping = new AbortController();
  const server = createServer((req, res) => {
    handle(deps, req, res, stopping.signal).catch((err: unknown) => failInternally(res, err));
  });
  const shutdown = () =>
    new Promise<void>((resolve) => {
      stopping.abort();
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return { server, shutdown };
}

/** One request in flight: what the steps below share. */
interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  route: Route;
  method: string;
  /** Raw, escapes intact. */
  path: string;
  query: string;
  signal: AbortSignal;
  /** The coding this answer gets (./compression.ts), or undefined: plain. */
  encoding: string | undefined;
  /** The shared link and its bandwidth, when limited (./link.ts). */
  pace: { link: Link; mbps: number } | undefined;
}

async function handle(deps: ServerDeps, req: IncomingMessage, res: ServerResponse, signal: AbortSignal): Promise<void> {
  const started = performance.now();
  const method = req.method ?? 'GET';
  const target = req.url ?? '/';
  const queryAt = target.indexOf('?');
  const path = queryAt === -1 ? target : target.slice(0, queryAt);
  const query = queryAt === -1 ? '' : target.slice(queryAt + 1);
  const route = matchRoute(method, path);
  // Control routes read their body; every other route ignores it.
  if (route.name !== 'control') req.resume();
  const encoding = deps.compress === false ? undefined : chooseEncoding(req.headers['accept-encoding']);
  const mbps = deps.faults.plan.bandwidthMbps;
  const pace = mbps > 0 && route.name !== 'control' ? { link: deps.link, mbps } : undefined;
  const outcome = await respond(deps, { req, res, route, method, path, query, signal, encoding, pace });
  const entry: RequestLogEntry = {
    method,
    path,
    query,
    headers: flattenHeaders(req.headers),
    route: route.name,
    status: outcome.status,
    durationMs: performance.now() - started,
  };
  if (outcome.fault !== undefined) entry.fault = outcome.fault;
  deps.requests.push(entry);
  deps.counts.increment(route.name, outcome.status);
  deps.onRequest?.(entry);
}

async function respond(deps: ServerDeps, ex: Exchange): Promise<Outcome> {
  const { route } = ex;
  if (route.name === 'control') return send(ex, await control(deps.directory, route, ex.req), { kind: 'whole' });
  const auth = authorize(route, ex.req, deps.keys);
  if (auth !== 'ok') return send(ex, authReply(auth), { kind: 'whole' });
  if (ex.route.name === 'delete-member') deps.members.recordDeleteCall(ex.route.orgId, ex.route.memberId);
  const decision = deps.faults.decide(ex.method, ex.path);
  if (decision.delayMs > 0) await sleep(decision.delayMs, undefined, { signal: ex.signal });
  const { action } = decision;
  if (action.kind === 'reset') {
    resetConnection(ex.req);
    return { status: 0, fault: 'reset' };
  }
  if (action.kind === 'status') {
    return send(ex, faultReply(action.status, action.retryAfter, action.body), deliveryFor(decision), 'status');
  }
  const listing = route.name === 'list' ? deps.faults.listing(ex.path) : undefined;
  const reply = answer(deps, route, new URLSearchParams(ex.query), listing);
  if (ex.route.name === 'list' && reply.status === 200) churn(deps);
  return send(ex, reply, deliveryFor(decision));
}

function churn(deps: ServerDeps): void {
  const plan = deps.faults.plan;
  deps.churn.apply(deps.directory, { add: plan.churnAddPerPage, delete: plan.churnDeletePerPage, update: plan.churnUpdatePerPage });
}

async function send(ex: Exchange, reply: Reply, delivery: Delivery, fault?: Outcome['fault']): Promise<Outcome> {
  const paced = delivery.kind === 'whole' && ex.pace !== undefined ? { kind: 'paced' as const, ...ex.pace } : delivery;
  await deliver(ex.res, encoded(reply, ex.encoding), paced, ex.signal);
  const shaped = delivery.kind === 'whole' || delivery.kind === 'paced' ? undefined : delivery.kind;
  return { status: reply.status, fault: fault ?? shaped };
}

function deliveryFor(decision: FaultDecision): Delivery {
  if (decision.action.kind === 'truncate') return { kind: 'truncate' };
  return decision.slowBody === undefined ? { kind: 'whole' } : { kind: 'slow', slow: decision.slowBody };
}

function authorize(route: Route, req: IncomingMessage, keys: Keys): AuthOutcome {
  if (route.area === 'team') return authorizeTeam(req.headers, keys);
  if (route.area === 'management') return authorizeManagement(req.headers, keys);
  return 'ok';
}

/** Bodies say what is wrong, never which key was seen. */
function authReply(outcome: Exclude<AuthOutcome, 'ok'>): Reply {
  return outcome === 'forbidden' ? detailReply(403, 'This key may not use this resource') : detailReply(401, 'Missing or invalid API key');
}

function failInternally(res: ServerResponse, err: unknown): void {
  if (err instanceof Error && err.name === 'AbortError') {
    res.destroy();
    return;
  }
  if (res.headersSent) res.destroy();
  else res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Internal Server Error');
}

/**
 * Putting an answer on the wire: whole, slowly in chunks, cut short after
 * the headers promised more, or not at all (connection reset).
 */
type Delivery = { kind: 'whole' } | { kind: 'slow'; slow: SlowBody } | { kind: 'truncate' } | { kind: 'paced'; link: Link; mbps: number };

async function deliver(res: ServerResponse, reply: Reply, delivery: Delivery, signal: AbortSignal): Promise<void> {
  const body = typeof reply.body === 'string' ? Buffer.from(reply.body) : reply.body;
  if (delivery.kind === 'truncate') return truncate(res, reply, body);
  res.writeHead(reply.status, headersFor(reply, body.length));
  if (delivery.kind === 'whole') {
    res.end(body);
    return;
  }
  if (delivery.kind === 'paced') {
    await pace(res, body, delivery, signal);
    return;
  }
  await trickle(res, body, delivery.slow, signal);
}

/** The reply compressed with `encoding` when it is worth it; faults then shape the compressed bytes, as on the wire. */
function encoded(reply: Reply, encoding: string | undefined): Reply {
  const body = typeof reply.body === 'string' ? Buffer.from(reply.body) : reply.body;
  if (encoding === undefined || body.length < COMPRESS_MIN_BYTES) return reply;
  return { ...reply, body: compress(body, encoding), headers: { ...reply.headers, 'content-encoding': encoding, vary: 'accept-encoding' } };
}

/** Drops the connection without a byte of answer; an RST where the platform allows. */
function resetConnection(req: IncomingMessage): void {
  const socket = req.socket;
  if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
  else socket.destroy();
}

function headersFor(reply: Reply, length: number): Record<string, string | number> {
  return { ...reply.headers, 'content-type': reply.contentType, 'content-length': length };
}

/** Promises the full length, sends about half, then closes: the client's body read must fail. */
function truncate(res: ServerResponse, reply: Reply, body: Buffer): Promise<void> {
  res.writeHead(reply.status, headersFor(reply, body.length + 1));
  return new Promise((resolve) => {
    res.write(body.subarray(0, Math.floor(body.length / 2)), () => {
      res.destroy();
      resolve();
    });
  });
}

/** Writes `body` a chunk at a time, each once it has crossed the shared link. */
async function pace(res: ServerResponse, body: Buffer, link: { link: Link; mbps: number }, signal: AbortSignal): Promise<void> {
  try {
    for (let at = 0; at < body.length && !res.destroyed; at += LINK_CHUNK_BYTES) {
      const chunk = body.subarray(at, at + LINK_CHUNK_BYTES);
      await link.link.cross(chunk.length, link.mbps, signal);
      res.write(chunk);
    }
    res.end();
  } catch {
    res.destroy();
  }
}

async function trickle(res: ServerResponse, body: Buffer, slow: SlowBody, signal: AbortSignal): Promise<void> {
  try {
    for (let at = 0; at < body.length && !res.destroyed; at += slow.chunkBytes) {
      if (at > 0) await sleep(slow.chunkDelayMs, undefined, { signal });
      res.write(body.subarray(at, at + slow.chunkBytes));
    }
    res.end();
  } catch {
    res.destroy();
  }
}
