/**
 * The sync's bounds, end to end in-process against the stand-in over HTTP
 * and a real SQLite mirror: the run deadline, a key refused mid-run, the
 * per-page retry budget, and the page and record size bounds.
 */
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { ENV, readConfig } from '../src/runtime/config.js';
import { ServiceClient } from '../src/service/client.js';
import { generateUser, userKeys, type JsonRecord } from '../src/stand-in/index.js';
import { runSync } from '../src/sync/engine.js';
import { FAST_BACKOFF, createSyncRig, mirrorFingerprint, mirrorView, runRow, type SyncRig } from './support/sync-rig.js';

let rig: SyncRig | undefined;
const extraClients: ServiceClient[] = [];
afterEach(async () => {
  for (const c of extraClients.splice(0)) await c.close();
  await rig?.close();
  rig = undefined;
});

async function start(options: Parameters<typeof createSyncRig>[0]): Promise<SyncRig> {
  rig = await createSyncRig(options);
  return rig;
}

/** Valid users in today's shape; `big` of them carry a field of `bytes` characters. */
function recordsWithBigOne(count: number, bigAt: number, bytes: number): JsonRecord[] {
  const keys = userKeys(77);
  return Array.from({ length: count }, (_, i) => {
    const user = generateUser(keys, i) as unknown as JsonRecord;
    return i === bigAt ? { ...user, notes: 'x'.repeat(bytes) } : user;
  });
}

describe('the run deadline (SYNC_MAX_DURATION_MS)', () => {
  it('fails a run that is still going, even with a request in flight, and publishes nothing', async () => {
    const r = await start({ users: 1_200 });
    expect((await r.sync()).status).toBe('succeeded');
    r.standIn.directory.add(300);
    const before = mirrorFingerprint(r.db);
    // Every page trickles a byte every 100 ms: no request timeout of the default length ends it.
    r.standIn.faults.set({ slowBodyRate: 1, slowChunkBytes: 1, slowChunkDelayMs: 100 });

    const summary = await r.sync({ maxDurationMs: 1_500 });

    expect(summary.status).toBe('failed');
    expect(summary.reason).toMatch(/run deadline passed.*SYNC_MAX_DURATION_MS \(1500 ms\).*nothing was published/);
    expect(runRow(r.db, summary.runId)).toMatchObject({ status: 'failed', published_at: null });
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });

  it('also stops a run in its scan, after the first page', async () => {
    const r = await start({ users: 3_000 });
    const before = mirrorFingerprint(r.db);
    r.standIn.faults.set({ latencyMs: 400 });
    const summary = await r.sync({ maxDurationMs: 1_000, concurrency: 1 });
    expect(summary).toMatchObject({ status: 'failed', totalAtStart: 3_000 });
    expect(summary.reason).toContain('SYNC_MAX_DURATION_MS');
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });

  it('an abort by the caller is still recorded as aborted', async () => {
    const r = await start({ users: 1_200 });
    r.standIn.faults.set({ latencyMs: 2_000 });
    const summary = await r.sync({ signal: AbortSignal.timeout(300) });
    expect(summary).toMatchObject({ status: 'failed', reason: 'aborted' });
  });
});

describe('a key refused mid-run', () => {
  for (const [status, message] of [
    [401, /the service refused the key \(HTTP 401.*SERVICE_API_KEY is missing, wrong or revoked; not retried/],
    [403, /the key may not list users \(HTTP 403\).*not retried/],
  ] as const) {
    it(`fails the run at once on a ${status} on page 7, without retrying it, and publishes nothing`, async () => {
      const r = await start({ users: 6_000 });
      const before = mirrorFingerprint(r.db);
      const summary = await r.sync({
        concurrency: 1,
        onProgress: (p) => {
          // From page 7 on, the key is refused.
          if (p.pagesDone === 7) r.standIn.faults.failNext({ method: 'GET', pathPrefix: '/v2/user/', status, times: 1_000 });
        },
      });
      expect(summary.status).toBe('failed');
      expect(summary.reason).toMatch(message);
      expect(r.standIn.counts.get('list', status)).toBe(1);
      // A failed run still says how far it got (it recorded pages 0 and users 0 before).
      expect(summary).toMatchObject({ pages: 7, usersSeen: 3_500 });
      expect(runRow(r.db, summary.runId)).toMatchObject({ status: 'failed', published_at: null, pages: 7, users_seen: 3_500 });
      expect(mirrorFingerprint(r.db)).toEqual(before);
    });
  }

  it('fails the run when the key is refused while missing users are checked', async () => {
    const r = await start({ users: 1_000 });
    await r.sync();
    r.standIn.directory.delete([0, 1, 2]);
    r.standIn.faults.failNext({ method: 'GET', pathPrefix: '/v2/user/resolve/', status: 401, times: 1_000 });
    const before = mirrorFingerprint(r.db);
    const summary = await r.sync();
    expect(summary.status).toBe('failed');
    expect(summary.reason).toMatch(/refused the key \(HTTP 401 when asked to resolve users\)/);
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });
});

describe('the retry budget per page (SYNC_PAGE_RETRY_BUDGET_MS)', () => {
  it('rides out a 3-second 503 outage that outlasts the attempts', async () => {
    const r = await start({ users: 1_200 });
    r.standIn.faults.set({ rate503: 1, retryAfter: null });
    const outage = setTimeout(() => r.standIn.faults.clear(), 3_000);
    try {
      const summary = await r.sync({ pageAttempts: 5, pageRetryBudgetMs: 15_000 });
      expect(summary).toMatchObject({ status: 'succeeded', usersSeen: 1_200 });
      // Far more than 5 attempts were needed.
      expect(r.standIn.counts.get('list', 503)).toBeGreaterThan(5);
    } finally {
      clearTimeout(outage);
    }
  });

  it('gives up once the budget is spent', async () => {
    const r = await start({ users: 1_200 });
    r.standIn.faults.set({ rate503: 1, retryAfter: null });
    const summary = await r.sync({ pageAttempts: 2, pageRetryBudgetMs: 500 });
    expect(summary.status).toBe('failed');
    expect(summary.reason).toMatch(/first page failed: .*HTTP 503/);
  });
});

describe('a stuck page', () => {
  it('ends the run within about the retry budget, however slow its body, and publishes nothing', async () => {
    const r = await start({ users: 1_200 });
    expect((await r.sync()).status).toBe('succeeded');
    const before = mirrorFingerprint(r.db);
    const pageZero = () => r.standIn.requests.entries().filter((e) => e.route === 'list' && /(^|&)offset=0(&|$)/.test(e.query)).length;
    const answered = pageZero();
    // Every page trickles a byte every 100 ms: each attempt ends at the request timeout.
    r.standIn.faults.set({ slowBodyRate: 1, slowChunkBytes: 1, slowChunkDelayMs: 100 });
    const client = new ServiceClient({
      baseUrl: r.standIn.baseUrl,
      apiKey: r.standIn.apiKey,
      apiKeyHeader: r.standIn.apiKeyHeader,
      requestTimeoutMs: 400,
    });
    extraClients.push(client);
    const t0 = performance.now();
    const summary = await r.sync({ client, pageAttempts: 5, pageRetryBudgetMs: 1_000 });
    const tookMs = performance.now() - t0;
    expect(summary.status).toBe('failed');
    expect(summary.reason).toMatch(/first page failed: .*HTTP_REQUEST_TIMEOUT_MS/);
    // Five attempts of 400 ms would be made without the cap; the budget stops new attempts at 1 s
    // (the time bound has room for a loaded machine: the attempt count is what tells the two apart).
    expect(pageZero() - answered).toBeLessThanOrEqual(3);
    expect(tookMs).toBeLessThan(1_000 + 400 + 1_500);
    expect(mirrorFingerprint(r.db)).toEqual(before);
  });

  it('the defaults bound a stuck page to the budget plus one request: well under 300 s', () => {
    const d = readConfig(['SYNC_PAGE_RETRY_BUDGET_MS', 'HTTP_REQUEST_TIMEOUT_MS'], {});
    expect(d.SYNC_PAGE_RETRY_BUDGET_MS + d.HTTP_REQUEST_TIMEOUT_MS).toBeLessThanOrEqual(180_000);
    expect(ENV.SYNC_PAGE_RETRY_BUDGET_MS.parse(undefined)).toBeGreaterThan(0);
  });
});

describe('the run record', () => {
  it('is written, running, before the first request, so a run waiting on a dead service shows', async () => {
    const r = await start({ users: 600 });
    r.standIn.faults.set({ rate503: 1, retryAfter: null });
    // Rows seen running while every request still failed: before the first page could have come.
    const seen: Array<{ status: string; started_at: string }> = [];
    let recovered = false;
    const watcher = new Database(r.dbPath, { readonly: true });
    const poll = setInterval(() => {
      const row = watcher.prepare("SELECT status, started_at FROM sync_runs WHERE status = 'running'").get() as
        { status: string; started_at: string } | undefined;
      if (row !== undefined && !recovered) seen.push(row);
    }, 20);
    const recovery = setTimeout(() => {
      recovered = true;
      r.standIn.faults.clear();
    }, 600);
    try {
      const summary = await r.sync({ pageRetryBudgetMs: 10_000 });
      expect(summary.status).toBe('succeeded');
      // Another process saw the run as running while its first page was still failing.
      expect(seen.length).toBeGreaterThan(0);
      // And its duration counts the wait.
      const row = r.db.prepare('SELECT started_at, finished_at FROM sync_runs WHERE id = ?').get(summary.runId) as {
        started_at: string;
        finished_at: string;
      };
      expect(Date.parse(row.finished_at) - Date.parse(row.started_at)).toBeGreaterThanOrEqual(550);
    } finally {
      clearInterval(poll);
      clearTimeout(recovery);
      watcher.close();
    }
  });
});

describe('size bounds', () => {
  it('does not store a user record above SYNC_MAX_RECORD_BYTES; sets it aside with its ids and the reason', async () => {
    const records = recordsWithBigOne(700, 550, 2 * 1024 * 1024);
    const big = records[550] as { user_id: string; client_user_id: string };
    const r = await start({ users: 0, records });
    const summary = await r.sync({ maxRecordBytes: 1024 * 1024 });
    expect(summary).toMatchObject({ status: 'succeeded', rejected: 1, usersSeen: 699, deleted: 0 });
    expect(mirrorView(r.db).has(big.user_id)).toBe(false);
    expect(mirrorView(r.db).size).toBe(699);
    const row = r.db
      .prepare<[], { user_id: string; client_user_id: string; reason: string; raw: string }>(
        'SELECT user_id, client_user_id, reason, raw FROM rejected_records',
      )
      .get();
    expect(row).toMatchObject({ user_id: big.user_id, client_user_id: big.client_user_id });
    expect(row?.reason).toMatch(/users\[50\]: record is \d+ bytes, above SYNC_MAX_RECORD_BYTES \(1048576\); not stored/);
    expect(row?.raw.length).toBeLessThan(200);
  });

  it('fails a page above SYNC_MAX_PAGE_BYTES without retrying it; the other pages are published, nothing deleted', async () => {
    const records = recordsWithBigOne(1_200, 700, 2 * 1024 * 1024);
    const r = await start({ users: 0, records });
    const client = new ServiceClient({
      baseUrl: r.standIn.baseUrl,
      apiKey: r.standIn.apiKey,
      apiKeyHeader: r.standIn.apiKeyHeader,
      maxBodyBytes: 1024 * 1024,
    });
    extraClients.push(client);
    const summary = await runSync({ client, writer: r.writer, backoff: FAST_BACKOFF, pageAttempts: 5 });
    expect(summary).toMatchObject({ status: 'partial', pageFailures: 1, usersSeen: 700, deleted: 0 });
    expect(summary.reason).toMatch(/offset 500: .*larger than SYNC_MAX_PAGE_BYTES \(1048576 bytes\)/);
    const asked = r.standIn.requests.entries().filter((e) => e.route === 'list' && new URLSearchParams(e.query).get('offset') === '500');
    expect(asked).toHaveLength(1);
  });
});
