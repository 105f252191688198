/**
 * The HTTP plumbing of the stand-in: per request, authenticate, count the
 * call, apply the fault decision, answer, then log. Faults apply only to
 * authenticated requests, so a test's failNext is never eaten by a probe
 * without a key.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { authorizeManagement, authorizeTeam, type AuthOutcome, type Keys } from './auth.js';
import type { Churn } from './drift.js';
import type { FaultDecision, Faults } from './faults.js';
import { answer, faultReply, type Domain } from './handlers.js';
import { flattenHeaders, type RequestLog, type RequestLogEntry, type RouteCounts } from './request-log.js';
import { deliver, detailReply, resetConnection, type Delivery, type Reply } from './respond.js';
import { matchRoute, type Route } from './routes.js';

export interface ServerDeps extends Domain {
  keys: Keys;
  faults: Faults;
  churn: Churn;
  requests: RequestLog;
  counts: RouteCounts;
  onRequest?: (entry: RequestLogEntry) => void;
}

export interface StandInServer {
  server: Server;
  /** Stops listening, cuts open connections and pending slow answers. */
  shutdown(): Promise<void>;
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
}

async function handle(deps: ServerDeps, req: IncomingMessage, res: ServerResponse, signal: AbortSignal): Promise<void> {
  const started = performance.now();
  const method = req.method ?? 'GET';
  const target = req.url ?? '/';
  const queryAt = target.indexOf('?');
  const path = queryAt === -1 ? target : target.slice(0, queryAt);
  const query = queryAt === -1 ? '' : target.slice(queryAt + 1);
  const route = matchRoute(method, path);
  req.resume();
  const outcome = await respond(deps, { req, res, route, method, path, query, signal });
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
  const auth = authorize(ex.route, ex.req, deps.keys);
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
  const reply = answer(deps, ex.route, new URLSearchParams(ex.query));
  if (ex.route.name === 'list' && reply.status === 200) churn(deps);
  return send(ex, reply, deliveryFor(decision));
}

function churn(deps: ServerDeps): void {
  const plan = deps.faults.plan;
  deps.churn.apply(deps.directory, plan.churnAddPerPage, plan.churnDeletePerPage);
}

async function send(ex: Exchange, reply: Reply, delivery: Delivery, fault?: Outcome['fault']): Promise<Outcome> {
  await deliver(ex.res, reply, delivery, ex.signal);
  const shaped = delivery.kind === 'whole' ? undefined : delivery.kind;
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
  return outcome === 'forbidden'
    ? detailReply(403, 'This key may not use this resource')
    : detailReply(401, 'Missing or invalid API key');
}

function failInternally(res: ServerResponse, err: unknown): void {
  if (err instanceof Error && err.name === 'AbortError') {
    res.destroy();
    return;
  }
  if (res.headersSent) res.destroy();
  else res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Internal Server Error');
}
