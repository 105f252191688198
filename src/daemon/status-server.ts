/**
 * The daemon's status endpoint, on STATUS_HOST:STATUS_PORT (loopback by
 * default: metrics name routes and counts, and nothing here needs to face
 * the network).
 *
 *   GET /healthz   liveness: 200 while the event loop answers. Never looks at
 *                  Redis: a supervisor that restarts the daemon because Redis
 *                  is down would only add a restart loop to an outage.
 *   GET /readyz    readiness, "this daemon can do its own work": 200 when
 *                  started, not stopping, Redis answers a PING, the mirror
 *                  answers a query and is not stale (a succeeded sync
 *                  within SYNC_STALE_AFTER_MS); 503 otherwise, with the
 *                  failing checks (and for a stale mirror its age and the
 *                  last failure) in the JSON body. Removals and webhooks
 *                  are reported in the body but never gate it.
 *   GET /metrics   Prometheus text exposition.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { logError } from '../runtime/log-error.js';
import { errorMessage } from '../runtime/line-text.js';
import { closeNow, listen } from '../runtime/lifecycle.js';
import { settleWithin } from '../runtime/deadline.js';
import type { Db } from '../../db/open.js';
import type { MirrorReader } from '../../db/mirror-reader.js';
import { hasRecordedRun } from '../../db/sync-runs.js';
import type { RedisClient } from '../../jobs/redis-connection.js';
import { describeRemovalGate, type RemovalGate } from '../../jobs/redis-durability.js';
import { assessStaleness, mirrorFreshness } from '../health/staleness.js';
import type { WebhookLagFacts } from './change-delivery.js';
import type { Logger } from 'pino';

export interface ReadinessReport {
  ready: boolean;
  /** Check name → 'ok' or what is wrong. */
  checks: Record<string, string>;
}

export interface StatusServerOptions {
  host: string;
  /** 0 picks a free port (tests). */
  port: number;
  registry: Registry;
  readiness: () => Promise<ReadinessReport>;
  logger: Logger;
}

export interface StatusServer {
  /** The port actually bound. */
  port: number;
  close(): Promise<void>;
}

export async function startStatusServer(options: StatusServerOptions): Promise<StatusServer> {
  const log = options.logger;
  const server = createServer((req, res) => {
    handle(req, res, options).catch((err: unknown) => {
      logError(log, 'error', { event: 'status.error', url: req.url, err }, 'status request failed');
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else res.destroy();
    });
  });
  // Keep-alive from a scraper must not hold shutdown open.
  server.keepAliveTimeout = 5_000;
  const port = await listen(server, options.port, options.host);
  server.on('error', (err) => logError(log, 'error', { event: 'status.server_error', err }, 'status server error'));
  log.info({ event: 'status.listening', host: options.host, port }, `status endpoint on http://${options.host}:${port}`);
  return {
    port,
    close: () => closeNow(server),
  };
}

async function handle(req: IncomingMessage, res: ServerResponse, options: StatusServerOptions): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://status').pathname;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
    return;
  }
  switch (path) {
    case '/healthz':
      send(res, 200, 'application/json', JSON.stringify({ status: 'ok' }) + '\n');
      return;
    case '/readyz': {
      const report = await options.readiness();
      send(res, report.ready ? 200 : 503, 'application/json', JSON.stringify(report) + '\n');
      return;
    }
    case '/metrics': {
      const body = await options.registry.metrics();
      send(res, 200, options.registry.contentType, body);
      return;
    }
    default:
      send(res, 404, 'text/plain; charset=utf-8', 'not found\n');
  }
}

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

/** A slow receiver is reported, not judged (`lag`); a failing endpoint is judged (`endpoint`: 'ok' or why not). */
async function describeLag(facts: Promise<WebhookLagFacts>): Promise<{ lag: string; endpoint: string }> {
  let lag = 'timeout';
  let endpoint = 'ok';
  const done = facts.then(
    (l) => {
      lag = l.eventsBehind === 0 && l.failed === 0 ? 'ok' : `behind ${l.eventsBehind} events (${l.secondsBehind} s); ${l.failed} failed`;
      if (l.endpoint !== null) endpoint = `failing since ${l.endpoint.since} (${l.endpoint.last}); every event held`;
    },
    (err: unknown) => void (lag = errorMessage(err)),
  );
  await settleWithin(done, 1_000);
  return { lag, endpoint };
}

/**
 * Reported in /readyz but not gating it. Readiness means this daemon can do its own work (sync,
 * answer from a fresh mirror); a load balancer or orchestrator acting on it must not pull a
 * healthy mirror out of service because of someone else's endpoint. Held removals, a webhook's
 * lag and a failing webhook endpoint (`webhook_endpoint`: every event held until the receiver
 * answers 2xx) show in `status` (exit 1), /metrics and the logs instead.
 */
const INFORMATIONAL_CHECKS: ReadonlySet<string> = new Set(['removals', 'webhooks', 'webhook_endpoint']);

export interface ReadinessSources {
  db: Db;
  reader: MirrorReader;
  control: RedisClient;
  staleAfterMs: number;
  /** False without MANAGEMENT_URL: removals are off, and /readyz says so rather than judging a gate nobody uses. */
  removalsConfigured: boolean;
  removalGate: () => RemovalGate | undefined;
  /** Webhook delivery's lag; undefined without WEBHOOK_URL. */
  webhookLag?: () => Promise<WebhookLagFacts> | undefined;
  /** Why webhooks are held (a Redis that can lose jobs); undefined when they run or are off. */
  webhooksHeld?: () => string | undefined;
  /** MIRROR_DB deleted or replaced under the daemon (./mirror-watch.ts): the sentence; undefined while it is the file opened. */
  mirrorLost?: () => string | undefined;
}

/** /readyz's checks: the daemon is running (not starting or stopping), the database answers, the mirror is fresh, Redis answers; and removals and webhooks, for information. */
export function readinessOf(s: ReadinessSources, phase: () => string): () => Promise<ReadinessReport> {
  return async () => {
    const current = phase();
    const checks: Record<string, string> = { phase: current === 'running' ? 'ok' : current };
    try {
      hasRecordedRun(s.db);
      checks.db = 'ok';
    } catch (err) {
      checks.db = errorMessage(err);
    }
    if (checks.db === 'ok') {
      // A stale mirror is not fit to answer from, however healthy the process looks.
      const st = assessStaleness({ ...mirrorFreshness(s.reader), now: new Date(), staleAfterMs: s.staleAfterMs });
      checks.mirror = st.stale ? `stale: ${st.reason ?? ''}` : 'ok';
    }
    // Whatever the old file's freshness: it is no longer the mirror at MIRROR_DB.
    const lost = s.mirrorLost?.();
    if (lost !== undefined) {
      checks.mirror = lost;
    }
    const ping = s.control.ping();
    const answered = await settleWithin(ping, 1_000);
    checks.redis = answered
      ? await ping.then(
          () => 'ok',
          (err: unknown) => errorMessage(err),
        )
      : 'timeout';
    checks.removals = removalsCheck(s);
    const lag = s.webhookLag?.();
    const webhooksHeld = s.webhooksHeld?.();
    if (webhooksHeld !== undefined) checks.webhooks = webhooksHeld;
    else if (lag !== undefined) {
      const described = await describeLag(lag);
      checks.webhooks = described.lag;
      checks.webhook_endpoint = described.endpoint;
    }
    return { ready: Object.entries(checks).every(([name, c]) => c === 'ok' || INFORMATIONAL_CHECKS.has(name)), checks };
  };
}

function removalsCheck(s: ReadinessSources): string {
  if (!s.removalsConfigured) return 'off: MANAGEMENT_URL is unset';
  const gate = s.removalGate();
  return gate === undefined ? 'not checked yet' : describeRemovalGate(gate);
}
