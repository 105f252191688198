/**
 * A bare HTTP server that records what it receives and answers with a canned
 * response: for bodies the stand-in would never send.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface CannedAnswer {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

export interface CannedServer {
  url: string;
  seen: Array<{ method: string; path: string; headers: IncomingHttpHeaders }>;
  server: Server;
}

export async function recordingServer(respond: (path: string) => CannedAnswer): Promise<CannedServer> {
  const seen: CannedServer['seen'] = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers });
    const r = respond(req.url ?? '');
    res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers });
    res.end(r.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}
