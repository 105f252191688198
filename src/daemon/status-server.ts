/**
 * The daemon's status endpoint, on STATUS_HOST:STATUS_PORT (loopback by
 * default: metrics name routes and counts, and nothing here needs to face
 * the network).
 *
 *   GET /healthz   liveness: 200 while the event loop answers. Never looks at
 *                  Redis: a supervisor that restarts the daemon because Redis
 *                  is down would only add a restart loop to an outage.
 *   GET /readyz    readiness: 200 when started, not stopping, Redis answers a
 *                  PING, the mirror answers a query and is not stale (a
 *                  succeeded sync within SYNC_STALE_AFTER_MS); 503
 *                  otherwise, with the failing checks (and for a stale
 *                  mirror its age and the last failure) in the JSON body.
 *   GET /metrics   Prometheus text exposition.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import type { Logger } from '../runtime/log.js';
import { closeNow, listen } from '../runtime/lifecycle.js';

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
      log.error({ event: 'status.error', url: req.url, err: err instanceof Error ? err.message : String(err) }, 'status request failed');
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else res.destroy();
    });
  });
  // Keep-alive from a scraper must not hold shutdown open.
  server.keepAliveTimeout = 5_000;
  const port = await listen(server, options.port, options.host);
  server.on('error', (err) => log.error({ event: 'status.server_error', err: err.message }, 'status server error'));
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
