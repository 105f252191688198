/**
 * What webhook tests share: a real HTTP receiver (node:http) that verifies
 * every request's signature and records it, events shaped like the change
 * feed's, and per test a fresh queue prefix, queue and workers.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { FeedEvent } from '../../db/change-feed.js';
import { silentLogger } from '../../src/runtime/log.js';
import { createRedisConnection, type RedisClient } from '../../jobs/redis-connection.js';
import { webhookTarget, type WebhookTarget } from '../../jobs/webhooks/contract.js';
import { startWebhookWorker, type WebhookWorkerHandle, type WebhookWorkerOptions } from '../../jobs/webhooks/worker.js';
import { verifyWebhook } from './doc-verifier.js';
import { freePort, startTestRedis, type TestRedis } from './redis-server.js';
import { createWebhookQueue, type WebhookQueue } from '../../jobs/webhooks/queue-handle.js';

export const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

/** How the receiver answers one request: a status (with headers), or a dropped connection. */
export type Answer = { status: number; headers?: Record<string, string> } | 'destroy';

export interface Received {
  id: string;
  body: string;
  status: number | 'destroyed';
  /** The three Standard Webhooks headers as sent. */
  signed: { 'webhook-id': string; 'webhook-timestamp': string; 'webhook-signature': string };
  /** docs/changes.md's verifyWebhook's verdict, with the content type checked too. */
  verified: boolean;
  /** The `webhook-policy` header (a webhook sink's field policy), or undefined. */
  policy?: string;
}

export interface Receiver {
  url: string;
  /** Every request, in arrival order. */
  requests: Received[];
  /** Ids of 2xx-answered requests, in order, repeats included. */
  delivered(): string[];
  answer: (req: { id: string; body: string; n: number }) => Answer;
  /** How long each request is held before it is answered. */
  latencyMs: number;
  /** Stops listening and drops open connections: the receiver is down. */
  down(): Promise<void>;
  /** Listens again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const port = await freePort();
  let server: Server | undefined;
  const receiver: Receiver = {
    url: `http://127.0.0.1:${port}/hooks?token=abc`,
    requests: [],
    delivered: () => receiver.requests.filter((r) => r.status !== 'destroyed' && r.status < 300).map((r) => r.id),
    answer: () => ({ status: 204 }),
    latencyMs: 0,
    async down() {
      const s = server;
      server = undefined;
      if (s === undefined) return;
      const closed = new Promise((resolve) => s.close(resolve));
      s.closeAllConnections();
      await closed;
    },
    async up() {
      server = createServer((req, res) => void handle(req, res));
      await new Promise<void>((resolve) => server?.listen(port, '127.0.0.1', resolve));
    },
    close: () => receiver.down(),
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const id = String(req.headers['webhook-id'] ?? '');
    const verified =
      req.method === 'POST' && req.headers['content-type'] === 'application/json' && verifyWebhook(SECRET, req.headers, Buffer.from(body));
    if (receiver.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, receiver.latencyMs));
    const answer = receiver.answer({ id, body, n: receiver.requests.length });
    const header = (name: string) => String(req.headers[name] ?? '');
    const signed = { 'webhook-id': id, 'webhook-timestamp': header('webhook-timestamp'), 'webhook-signature': header('webhook-signature') };
    const policy = typeof req.headers['webhook-policy'] === 'string' ? req.headers['webhook-policy'] : undefined;
    receiver.requests.push({ id, body, signed, status: answer === 'destroy' ? 'destroyed' : answer.status, verified, policy });
    if (answer === 'destroy') {
      req.socket.destroy();
      return;
    }
    res.writeHead(answer.status, answer.headers).end();
  };
  await receiver.up();
  return receiver;
}

/**
 * The bodies of the events feedEvents made, by id: what the mirror's change
 * feed (ChangeFeed.body) is to the daemon's worker. The daemon's own path,
 * bodies read from a real mirror, is test/change-feed-webhooks.test.ts's.
 */
const FEED_BODIES = new Map<string, { cursor: number; body: string }>();

/** The rig worker's `eventBody`: the body feedEvents made for that id at that cursor. */
export function feedBody(cursor: number, eventId: string): string | undefined {
  const held = FEED_BODIES.get(eventId);
  return held?.cursor === cursor ? held.body : undefined;
}

/** Forgets an event's body, as retention does. */
export function dropFeedBody(eventId: string): void {
  FEED_BODIES.delete(eventId);
}

/** Events as the change feed stores them: `users` users taking turns. */
export function feedEvents(from: number, count: number, users = 5): FeedEvent[] {
  return Array.from({ length: count }, (_, i) => {
    const cursor = from + i;
    const id = `evt_5eed_${cursor}`;
    const userId = `user-${cursor % users}`;
    const body = `{"id":"${id}","cursor":${cursor},"type":"user.updated","timestamp":"2025-01-01T00:00:00.000Z","run_id":1,"data":{"user_id":"${userId}"}}`;
    FEED_BODIES.set(id, { cursor, body });
    return { cursor, id, type: 'user.updated' as const, userId, publishedAt: '2025-01-01T00:00:00.000Z', body };
  });
}

export interface WebhookRig {
  prefix: string;
  mirrorId: string;
  target: WebhookTarget;
  queue: WebhookQueue;
  startWorker(overrides?: Partial<WebhookWorkerOptions>): Promise<WebhookWorkerHandle>;
  close(): Promise<void>;
}

export async function createWebhookRig(redisUrl: string, receiver: Receiver): Promise<WebhookRig> {
  const prefix = `t${randomUUID().slice(0, 8)}`;
  const mirrorId = 'mirror-a';
  const target = webhookTarget(receiver.url);
  const producer = createRedisConnection(redisUrl, { role: 'producer' });
  const queue = createWebhookQueue(producer, { mirrorId, target, prefix });
  const workers: Array<{ handle: WebhookWorkerHandle; redis: RedisClient }> = [];
  return {
    prefix,
    mirrorId,
    target,
    queue,
    async startWorker(overrides = {}) {
      const redis = createRedisConnection(redisUrl, { role: 'worker' });
      const handle = startWebhookWorker({
        connection: redis,
        prefix,
        mirrorId,
        target,
        secret: SECRET,
        eventBody: feedBody,
        timeoutMs: 2_000,
        logger: silentLogger,
        backoff: { baseMs: 50, maxMs: 400 },
        ...overrides,
      });
      workers.push({ handle, redis });
      await handle.waitUntilReady();
      return handle;
    },
    async close() {
      for (const w of workers) {
        await w.handle.close(5_000);
        w.redis.disconnect();
      }
      await queue.close();
      producer.disconnect();
    },
  };
}

/** Each id once, in the order of its first 2xx. */
export function firstDeliveries(receiver: Receiver): string[] {
  return [...new Set(receiver.delivered())];
}

export interface WebhookParts {
  redis: TestRedis;
  receiver: Receiver;
  rig: WebhookRig;
}

/**
 * The lifecycle webhook test files share: one Redis per file (started by the
 * file, so a test may kill it), a fresh receiver and rig per test, all
 * closed afterwards. `onReady` receives them before each test.
 */
export function useWebhookRig(onReady: (parts: WebhookParts) => void): void {
  let redis: TestRedis | undefined;
  let parts: WebhookParts | undefined;
  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });
  beforeEach(async () => {
    if (redis === undefined) throw new Error('useWebhookRig: Redis did not start');
    const receiver = await startReceiver();
    parts = { redis, receiver, rig: await createWebhookRig(redis.url, receiver) };
    onReady(parts);
  });
  afterEach(async () => {
    await parts?.rig.close();
    await parts?.receiver.close();
  });
}
