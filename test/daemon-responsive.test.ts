/**
 * The daemon keeps answering while a sync publishes. A publish is one SQLite
 * transaction of seconds (tens of seconds at 300k users); run inside the
 * daemon it froze the event loop and /healthz went unanswered for 10 s. The
 * sync now runs in a child process, so every /healthz during the sync, the
 * publish included, must answer within 1 s (a bound on behaviour, not a speed
 * goal: a healthy answer takes milliseconds).
 *
 * While polling, the test also probes the mirror's write lock from its own
 * connection, to show that the polls really overlapped a publish.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { daemonEnv, spawnDaemon, type DaemonProcess } from './support/daemon-process.js';

/** Enough that publishing takes seconds on a small machine. */
const USERS = Number(process.env.RESPONSIVE_TEST_USERS ?? 150_000);
const BOUND_MS = 1_000;
const POLL_MS = 100;

let redis: TestRedis;
let standIn: StandIn;
let dir: string;
let daemon: DaemonProcess | undefined;

beforeAll(async () => {
  redis = await startTestRedis();
  standIn = await startStandIn({ port: 0, users: USERS, seed: 11 });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-responsive-'));
});

afterAll(async () => {
  await daemon?.stop('SIGKILL').catch(() => undefined);
  await standIn?.close();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** One /healthz round trip; a request cut off at the bound counts as the bound plus one. */
async function healthz(port: number): Promise<{ ms: number; status: number }> {
  const t0 = performance.now();
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(BOUND_MS + 1) });
    await res.arrayBuffer();
    return { ms: performance.now() - t0, status: res.status };
  } catch {
    return { ms: performance.now() - t0, status: 0 };
  }
}

/** Whether another connection holds the mirror's write lock right now (a publish, or a run being recorded). */
function writeLocked(path: string): boolean {
  let probe: Database.Database | undefined;
  try {
    probe = new Database(path, { timeout: 0, fileMustExist: true });
    probe.exec('BEGIN IMMEDIATE; ROLLBACK');
    return false;
  } catch (err) {
    return (err as { code?: string }).code === 'SQLITE_BUSY';
  } finally {
    probe?.close();
  }
}

function lastRunStatus(path: string): string | undefined {
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true });
    try {
      return (db.prepare('SELECT status FROM sync_runs ORDER BY id DESC LIMIT 1').get() as { status: string } | undefined)?.status;
    } finally {
      db.close();
    }
  } catch {
    return undefined;
  }
}

describe('event loop during a publish', () => {
  it(`answers /healthz within ${BOUND_MS} ms throughout a ${USERS}-user sync`, async () => {
    const mirrorDb = join(dir, 'mirror.db');
    const port = await freePort();
    daemon = spawnDaemon(
      daemonEnv({
        redisUrl: redis.url,
        standIn,
        mirrorDb,
        queuePrefix: 'responsive',
        statusPort: port,
        // The start-up catch-up runs the sync; no tick piles more on.
        cron: '0 0 1 1 *',
        extra: { SYNC_CONCURRENCY: '4', LOG_LEVEL: 'warn' },
      }),
    );
    await daemon.ready;

    const answers: Array<{ ms: number; status: number }> = [];
    let lockedPolls = 0;
    let longestLockMs = 0;
    let lockedSince: number | undefined;
    const t0 = Date.now();
    while (lastRunStatus(mirrorDb) !== 'succeeded') {
      if (Date.now() - t0 > 280_000) throw new Error(`the sync did not finish (last run: ${lastRunStatus(mirrorDb)})`);
      const tick = sleep(POLL_MS);
      answers.push(await healthz(port));
      if (writeLocked(mirrorDb)) {
        lockedPolls += 1;
        lockedSince ??= Date.now();
        longestLockMs = Math.max(longestLockMs, Date.now() - lockedSince);
      } else {
        lockedSince = undefined;
      }
      await tick;
    }

    const slowest = Math.max(...answers.map((a) => a.ms));
    // The measurement, for the record (docs/operations.md).
    console.info(
      `responsive: ${USERS} users, sync ${Math.round((Date.now() - t0) / 1000)} s, ${answers.length} /healthz polls, ` +
        `slowest ${Math.round(slowest)} ms, mirror write-locked in ${lockedPolls} polls, longest lock seen ${longestLockMs} ms`,
    );
    expect(lockedPolls).toBeGreaterThan(0);
    expect(answers.filter((a) => a.status !== 200 || a.ms > BOUND_MS)).toEqual([]);
    expect(await daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});
