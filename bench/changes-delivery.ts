/**
 * The webhook half of `npm run bench:changes`: BENCH_WEBHOOK_EVENTS events
 * (default 20,000, ~1.2 KB each) through the real queue and worker (own
 * redis-server, AOF everysec, as production requires) to a local receiver
 * that verifies every signature, against the floor: the same receiver fed
 * by a bare loop of signed POSTs, one at a time over keep-alive, no queue.
 * Delivery is one at a time by design (in order), so the floor is one at a
 * time too. Every event must arrive once, in cursor order.
 */
import { createServer, type Server } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { createRedisConnection } from '../jobs/redis-connection.js';
import { webhookTarget } from '../jobs/webhooks/contract.js';
import { webhookHeaders } from '../jobs/webhooks/signature.js';
import { verifyWebhook } from '../test/support/doc-verifier.js';
import { startWebhookWorker } from '../jobs/webhooks/worker.js';
import type { FeedEvent } from '../db/change-feed.js';
import { silentLogger } from '../src/runtime/log.js';
import { startTestRedis } from '../test/support/redis-server.js';
import { wireUser } from '../test/support/mirror-fixtures.js';
import { createWebhookQueue, enqueueEvents } from '../jobs/webhooks/queue-handle.js';

const EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 20_000);
const SECRET = `whsec_${Buffer.alloc(24, 42).toString('base64')}`;
/** Enqueued per addBulk, as the daemon's dispatcher does. */
const BATCH = 500;

function events(n: number): FeedEvent[] {
  const at = new Date().toISOString();
  return Array.from({ length: n }, (_, i) => {
    const cursor = i + 1;
    const record = wireUser(cursor);
    const id = `evt_be7c4000_${cursor}`;
    const body = `{"id":"${id}","cursor":${cursor},"type":"user.updated","timestamp":"${at}","run_id":1,"data":{"user_id":"${String(record.user_id)}","team_id":"${String(record.team_id)}","client_user_id":"${String(record.client_user_id)}","user":${JSON.stringify(record)},"changed_fields":["fallback_time_zone"],"sources_added":[],"sources_removed":[]}}`;
    return { cursor, id, type: 'user.updated' as const, userId: String(record.user_id), publishedAt: at, body };
  });
}

interface Receiver {
  url: string;
  ids: string[];
  bad: number;
  waitFor(n: number): Promise<void>;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  let waiter: { n: number; resolve: () => void } | undefined;
  const r: Receiver = {
    url: '',
    ids: [],
    bad: 0,
    waitFor: (n) => (r.ids.length >= n ? Promise.resolve() : new Promise((resolve) => (waiter = { n, resolve }))),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (!verifyWebhook(SECRET, req.headers, Buffer.from(body))) r.bad++;
      r.ids.push(String(req.headers['webhook-id']));
      res.writeHead(204).end();
      if (waiter !== undefined && r.ids.length >= waiter.n) waiter.resolve();
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  r.url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}/hook`;
  return r;
}

function check(r: Receiver, all: readonly FeedEvent[], what: string): void {
  if (r.bad > 0) throw new Error(`${what}: ${r.bad} bad signatures`);
  if (r.ids.length !== all.length || r.ids.some((id, i) => id !== all[i]?.id)) throw new Error(`${what}: not every event once, in order`);
}

export async function benchDelivery(): Promise<void> {
  const all = events(EVENTS);
  const redis = await startTestRedis({ persistence: 'aof-everysec' });
  const rows: Array<{ scenario: string; seconds: number; rate: number }> = [];
  try {
    // The floor: signed POSTs one after another, nothing else.
    const floor = await startReceiver();
    const agent = new Agent({ connections: 1 });
    let t0 = performance.now();
    for (const e of all) {
      const res = await request(floor.url, {
        method: 'POST',
        headers: webhookHeaders(SECRET, e.id, Math.floor(Date.now() / 1000), e.body),
        body: e.body,
        dispatcher: agent,
      });
      await res.body.dump();
    }
    const floorSeconds = (performance.now() - t0) / 1000;
    check(floor, all, 'floor');
    await agent.close();
    await floor.close();
    rows.push({ scenario: 'floor: a bare loop of signed POSTs, one at a time', seconds: floorSeconds, rate: EVENTS / floorSeconds });

    // The queue: enqueued in batches as the dispatcher does, delivered by the worker.
    const receiver = await startReceiver();
    const target = webhookTarget(receiver.url);
    const producer = createRedisConnection(redis.url, { role: 'producer' });
    const workerRedis = createRedisConnection(redis.url, { role: 'worker' });
    const queue = createWebhookQueue(producer, { mirrorId: 'bench', target, prefix: 'bench' });
    // The daemon's worker reads each body from the mirror's feed when it sends (one indexed row); here from memory.
    const bodies = new Map(all.map((e) => [e.id, e.body]));
    t0 = performance.now();
    const worker = startWebhookWorker({
      connection: workerRedis,
      prefix: 'bench',
      mirrorId: 'bench',
      target,
      secret: SECRET,
      eventBody: (_cursor, id) => bodies.get(id),
      timeoutMs: 10_000,
      logger: silentLogger,
    });
    for (let i = 0; i < all.length; i += BATCH) await enqueueEvents(queue, all.slice(i, i + BATCH), 30);
    await receiver.waitFor(EVENTS);
    const seconds = (performance.now() - t0) / 1000;
    check(receiver, all, 'queue');
    await worker.close(5_000);
    await queue.close();
    producer.disconnect();
    workerRedis.disconnect();
    await receiver.close();
    rows.push({ scenario: 'webhooks: queue (Redis AOF) + in-order worker, signed', seconds, rate: EVENTS / seconds });
  } finally {
    await redis.stop();
  }
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  console.log(
    `webhook delivery of ${fmt(EVENTS)} events (~${Math.round((all[0]?.body.length ?? 0) / 100) / 10} KB each) to a local receiver verifying every signature\n`,
  );
  console.log('| scenario | events | seconds | events/s | vs the floor |');
  console.log('|---|---:|---:|---:|---:|');
  const floorRate = rows[0]?.rate ?? 1;
  for (const r of rows)
    console.log(`| ${r.scenario} | ${fmt(EVENTS)} | ${r.seconds.toFixed(1)} | ${fmt(r.rate)} | ${(r.rate / floorRate).toFixed(2)}× |`);
}
