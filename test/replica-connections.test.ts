/**
 * The replica protects its clients from each other: a connection cap, and a
 * header timeout of seconds. A real replica over a synced mirror, real
 * sockets on 127.0.0.1 that send a request line and then drip headers and
 * never finish them (slowloris), and a normal client beside them. The cap's
 * metrics come from the replica's own /metrics, its log line from the
 * replica's real logger.
 */
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/runtime/log.js';
import { startReplica, type Replica } from '../src/replica/start.js';
import { createReplicaRig, type ReplicaRig } from './support/replica-rig.js';
import { eventually } from './support/eventually.js';

const CAP = 8;
const HEADERS_TIMEOUT_MS = 2_000;

interface Slow {
  socket: Socket;
  received: string;
  closed: boolean;
}

describe('the replica under slow and many connections', () => {
  let rig: ReplicaRig;
  let replica: Replica;
  const logLines: Array<Record<string, unknown>> = [];
  const drips = new Set<NodeJS.Timeout>();
  const slows: Slow[] = [];

  beforeAll(async () => {
    rig = await createReplicaRig({ users: 50, seed: 3 });
    expect((await rig.sync.sync()).status).toBe('succeeded');
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString().split('\n')) if (line !== '') logLines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    replica = await startReplica(
      rig.sync.dbPath,
      { ...rig.settings, maxConnections: CAP, headersTimeoutMs: HEADERS_TIMEOUT_MS, idleTimeoutMs: 2_000 },
      createLogger({ LOG_LEVEL: 'info' }, sink),
    );
  });

  afterAll(async () => {
    for (const t of drips) clearInterval(t);
    for (const s of slows) s.socket.destroy();
    await replica?.close();
    await rig?.close();
  });

  /** A connection that sends a request line, then a header line every 500 ms, never the blank line that ends them. */
  const openSlow = (): Slow => {
    const slow: Slow = { socket: connect({ host: '127.0.0.1', port: replica.port }), received: '', closed: false };
    slow.socket.on('error', () => undefined);
    slow.socket.on('data', (d: Buffer) => (slow.received += d.toString()));
    slow.socket.once('close', () => (slow.closed = true));
    slow.socket.write('GET /v2/user/resolve/nobody HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    const drip = setInterval(() => {
      if (!slow.closed) slow.socket.write(`x-drip: ${Date.now()}\r\n`);
    }, 500);
    drips.add(drip);
    slows.push(slow);
    return slow;
  };

  /** One GET on a fresh connection: its status, or the error that ended it. */
  const get = (path: string, key?: string) =>
    new Promise<{ status: number; body: string } | { error: string }>((resolve) => {
      const headers: Record<string, string> = { connection: 'close' };
      if (key !== undefined) headers[rig.settings.apiKeyHeaders[0] ?? 'x-service-api-key'] = key;
      const req = request({ host: '127.0.0.1', port: replica.port, path, agent: false, headers }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.once('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
      req.end();
    });

  const metric = async (line: string): Promise<number> => {
    const res = await get('/metrics');
    if (!('status' in res) || res.status !== 200) throw new Error(`/metrics: ${JSON.stringify(res)}`);
    const hit = res.body.split('\n').find((l) => l.startsWith(`${line} `));
    return Number(hit?.slice(line.length + 1));
  };

  it('cuts slow-header connections after the header timeout, and answers a normal client while the cap is reached', async () => {
    const first = Array.from({ length: CAP }, openSlow);
    // Every slot is held by a connection that will never finish its headers; a normal client still gets in
    // (once the slow ones have waited a second, the longest-waiting one gives way to it).
    const answered = await eventually(
      async () => {
        const r = await get('/v2/user/resolve/nobody', rig.apiKey);
        return 'status' in r && r.status === 404 ? r : undefined;
      },
      30_000,
      'a normal client answered beside the slow connections',
    );
    expect(JSON.parse(answered.body)).toEqual({ detail: 'User not found' });
    expect(first.filter((s) => s.closed).length).toBeGreaterThanOrEqual(1);
    // The rest are cut by the header timeout though they keep sending: 408, then closed.
    await eventually(() => first.every((s) => s.closed), 30_000, 'every slow connection closed');
    const timedOut = first.filter((s) => s.received.startsWith('HTTP/1.1 408 '));
    expect(timedOut.length).toBeGreaterThanOrEqual(1);
    expect(await metric('user_mirror_replica_client_errors_total{reason="headers_timeout"}')).toBe(timedOut.length);
    expect(await metric('user_mirror_replica_connections_shed_total{how="evicted"}')).toBeGreaterThanOrEqual(1);
    expect(await metric('user_mirror_replica_connections_max')).toBe(CAP);
  }, 60_000);

  it('refuses a new connection when every slot is fresh, counts it, and logs the cap once, not once per connection', async () => {
    const before = await metric('user_mirror_replica_connections_shed_total{how="refused"}');
    // CAP + 3 connections at once: the 3 beyond the cap find no slot whose holder has waited long enough to give way.
    const all = Array.from({ length: CAP + 3 }, openSlow);
    await eventually(() => all.every((s) => s.closed), 30_000, 'every connection closed');
    const refused = all.filter((s) => s.received === '');
    const timedOut = all.filter((s) => s.received.startsWith('HTTP/1.1 408 '));
    expect(refused.length).toBeGreaterThanOrEqual(1);
    expect(refused.length + timedOut.length).toBe(CAP + 3);
    expect(await metric('user_mirror_replica_connections_shed_total{how="refused"}')).toBeGreaterThanOrEqual(before + refused.length);
    const capped = logLines.filter((l) => l.event === 'replica.connections_capped');
    // Sheds in the first test and in this one: one line within the minute, the rest counted for the next.
    expect(capped).toHaveLength(1);
    expect(capped[0]).toMatchObject({ level: 40, max: CAP });
    expect(Number(capped[0]?.evicted) + Number(capped[0]?.refused)).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
