/**
 * Retention of the change feed (src/daemon/change-delivery.ts): events past
 * CHANGES_RETENTION_DAYS are dropped after a sync, but never one a
 * configured webhook has not been handed, and nothing at all while what it
 * was handed cannot be read. Real SQLite mirror, real Redis, real receiver.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeFeed } from '../db/change-feed.js';
import { createRedisConnection, redisReady } from '../jobs/redis-connection.js';
import { webhookTarget } from '../jobs/webhooks/contract.js';
import { startChangeDelivery, type ChangeDelivery } from '../src/daemon/change-delivery.js';
import { silentLogger } from '../src/runtime/log.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { SECRET, startReceiver, type Receiver } from './support/webhook-rig.js';
import { eventually } from './support/eventually.js';

let redis: TestRedis;
let rig: SyncRig;
let receiver: Receiver;

beforeAll(async () => {
  redis = await startTestRedis();
  rig = await createSyncRig({ users: 300 });
  receiver = await startReceiver();
  // A first sync with a user.created each: 300 events to keep or drop.
  await rig.sync({ writer: sqliteRunWriter(rig.db, undefined, { baseline: 'events' }) });
});

afterAll(async () => {
  await receiver?.close();
  await rig?.close();
  await redis?.stop();
});

/** Every event published 40 days ago. */
function age(): void {
  rig.db.prepare(`UPDATE change_events SET at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-40 days')`).run();
}

const held = () => new ChangeFeed(rig.db).bounds();

/** As the daemon starts it: once its control connection answers (an unreachable Redis is tried once, briefly). */
async function delivery(options: {
  webhooks: boolean;
  durable?: boolean;
  redisUrl?: string;
}): Promise<{ d: ChangeDelivery; close: () => Promise<void> }> {
  const control = createRedisConnection(options.redisUrl ?? redis.url, { role: 'control' });
  control.on('error', () => undefined);
  await redisReady(control, 1_000).catch(() => undefined);
  const d = startChangeDelivery({
    db: rig.db,
    config: { MIRROR_ID: 'retention', CHANGES_RETENTION_DAYS: 30, WEBHOOK_TIMEOUT_MS: 2_000 },
    webhooks: options.webhooks ? { target: webhookTarget(receiver.url), secret: SECRET } : undefined,
    redis: {
      control,
      endpoint: { mode: 'single', url: options.redisUrl ?? redis.url },
      prefix: `r${Date.now()}`,
      held: options.durable === false ? 'held: AOF persistence is off' : undefined,
    },
    logger: silentLogger,
  });
  return {
    d,
    close: async () => {
      await d.close(2_000);
      control.disconnect();
    },
  };
}

describe('change feed retention', () => {
  it('keeps everything while a webhook’s queue cannot be read, and while webhooks are held', async () => {
    age();
    const down = await delivery({ webhooks: true, redisUrl: 'redis://127.0.0.1:1' });
    await down.d.afterSync();
    await down.close();
    expect(held().oldest).toBe(1);
    const volatile = await delivery({ webhooks: true, durable: false });
    await volatile.d.afterSync();
    await volatile.close();
    expect(held()).toMatchObject({ oldest: 1, prunedThrough: 0 });
  });

  it('drops only what the webhook has settled; the receiver, down meanwhile, still gets every event, read from the feed', async () => {
    await receiver.down();
    const { d, close } = await delivery({ webhooks: true });
    try {
      await d.afterSync();
      // Queued but not delivered: the jobs carry no body, so the feed keeps every event, however old.
      expect(held()).toMatchObject({ latest: 300, oldest: 1, prunedThrough: 0 });
      await receiver.up();
      await eventually(() => new Set(receiver.delivered()).size === 300, 30_000, 'every event delivered');
      // Settled now: past retention, dropped at the next look.
      await eventually(
        async () => {
          await d.afterSync();
          return held().prunedThrough === 300;
        },
        10_000,
        'the settled events dropped',
      );
      expect(held()).toMatchObject({ latest: 300, oldest: null, prunedThrough: 300 });
    } finally {
      await close();
    }
  });

  it('without webhooks, drops by age alone', async () => {
    await rig.sync();
    rig.standIn.directory.update(String(rig.standIn.directory.page(0, 1)[0]?.user_id));
    await rig.sync();
    expect(held().latest).toBe(301);
    const { d, close } = await delivery({ webhooks: false });
    await d.afterSync();
    await close();
    expect(held()).toMatchObject({ latest: 301, oldest: 301, prunedThrough: 300 });
    age();
    const again = await delivery({ webhooks: false });
    await again.d.afterSync();
    await again.close();
    expect(held()).toMatchObject({ oldest: null, prunedThrough: 301 });
  });
});
