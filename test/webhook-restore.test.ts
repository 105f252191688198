/**
 * The webhook dispatcher across a restore, with a real Redis queue and real
 * mirror files: the dispatcher had handed over events the lost file
 * published after the backup; on the restored feed it moves its cursors
 * back to the backup's end (logged), queues the `mirror.restored` event and
 * what follows, and never a job under a lost event's id. The replica's feed
 * answers a lost cursor with 410 naming the restore.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyDatabase } from '../db/backup.js';
import { ChangeFeed, type FeedEvent, type FeedPage } from '../db/change-feed.js';
import { lastCursor } from '../db/lineage.js';
import { openMirror } from '../db/open.js';
import { markRestore } from '../db/restore.js';
import { createRedisConnection, type RedisClient } from '../jobs/redis-connection.js';
import { webhookTarget } from '../jobs/webhooks/contract.js';
import { dispatchNewEvents } from '../src/daemon/change-delivery.js';
import { changesAnswer } from '../src/replica/answers.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { createWebhookQueue, type WebhookQueue } from '../jobs/webhooks/queue-handle.js';
import { readDispatched, readSettled } from '../jobs/webhooks/delivery-state.js';

let redis: TestRedis;
let rig: SyncRig;
let connection: RedisClient;
let queue: WebhookQueue;
let dir: string;
const lines: string[] = [];
const log = pino(
  { level: 'info' },
  new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  }),
);

beforeAll(async () => {
  redis = await startTestRedis();
  rig = await createSyncRig({ users: 300 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-webhook-restore-'));
  connection = createRedisConnection(redis.url, { role: 'producer' });
  queue = createWebhookQueue(connection, { mirrorId: 'm', target: webhookTarget('http://127.0.0.1:9/hook'), prefix: 'restore' });
});

afterAll(async () => {
  await queue?.obliterate({ force: true }).catch(() => undefined);
  await queue?.close();
  connection?.disconnect();
  await rig?.close();
  await redis?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The events of a page that holds some (throws on a gone page: these cursors are all held). */
function eventsOf(page: FeedPage): FeedEvent[] {
  if (page.gone) throw new Error(`cursor gone (oldest ${page.oldest})`);
  return page.events;
}

function churn(from: number): void {
  const ids = [...rig.standIn.directory.records()].slice(from, from + 4).map((r) => String(r.user_id));
  for (const id of ids) rig.standIn.directory.update(id);
}

describe('webhooks across a restore', () => {
  it('move back to the backup, deliver the marker and what follows, and never re-queue a lost id', async () => {
    await rig.sync();
    churn(0);
    await rig.sync();
    const backupPath = join(dir, 'backup.db');
    const taken = copyDatabase(rig.db, backupPath, 'mirror');
    const backupCursor = taken.mark?.backupCursor ?? -1;
    churn(10);
    await rig.sync();
    const original = new ChangeFeed(rig.db);
    const lostIds = new Set(eventsOf(original.page(backupCursor, 1_000)).map((e) => e.id));
    expect(lostIds.size).toBe(4);
    await dispatchNewEvents(original, queue, log, 30);
    expect(await readDispatched(queue)).toBe(lastCursor(rig.db));

    const restored = openMirror(backupPath);
    try {
      const mark = markRestore(restored, lastCursor(rig.db), new Date());
      const feed = new ChangeFeed(restored);
      const result = await dispatchNewEvents(feed, queue, log, 30);
      expect(result.cursor).toBe(mark.cursorBase + 1);
      expect(await readDispatched(queue)).toBe(mark.cursorBase + 1);
      expect(await readSettled(queue)).toBe(backupCursor);
      expect(lines.some((l) => l.includes('"event":"webhooks.feed_restored"'))).toBe(true);
      const marker = eventsOf(feed.page(backupCursor, 1))[0];
      expect(marker?.type).toBe('mirror.restored');
      expect(await queue.getJob(marker?.id ?? '')).toBeDefined();
      for (const id of lostIds) expect(eventsOf(feed.page(0, 1_000)).some((e) => e.id === id)).toBe(false);

      // The replica's pull feed: a lost cursor gets 410 with the restore and where to resume.
      const answer = changesAnswer(feed.page(mark.cursorBase - 1, 10));
      expect(answer.status).toBe(410);
      const body = JSON.parse(String(answer.body)) as { oldest: number; restored: { backup_cursor: number } };
      expect(body.oldest).toBe(backupCursor);
      expect(body.restored.backup_cursor).toBe(backupCursor);
    } finally {
      restored.close();
    }
  }, 120_000);
});
