/**
 * `npm run bench:changes`: the change feed (db/change-feed.ts).
 *
 *   1. Paging cost by cursor: a mirror whose feed holds BENCH_CHANGES_EVENTS
 *      (default 1,000,100) events of a realistic size (a `user.updated` with
 *      its ~1 KB record), written through the feed's own table; then pages of
 *      100 read at cursor 0, 500,000 and 1,000,000, in process
 *      (`ChangeFeed.page`) and as the replica's GET /mirror/v1/changes over
 *      HTTP. A page is a rowid range: its cost must not grow with the cursor.
 *   2. Delivery: BENCH_WEBHOOK_EVENTS (default 20,000) events handed to the
 *      webhook queue (own redis-server with AOF) and POSTed, signed, to a
 *      local receiver that verifies every signature: events/s end to end,
 *      beside the same receiver fed by a bare loop of signed POSTs (the
 *      floor: no queue, no Redis).
 *
 * Prints markdown tables. Every page is checked for its first cursor and
 * length, every delivery for its signature and order.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client } from 'undici';
import { ChangeFeed } from '../db/change-feed.js';
import { openMirror, type Db } from '../db/open.js';
import { startReplica } from '../src/replica/start.js';
import { silentLogger } from '../src/runtime/log.js';
import { wireUser } from '../test/support/mirror-fixtures.js';
import { benchDelivery } from './changes-delivery.js';

const EVENTS = Number(process.env.BENCH_CHANGES_EVENTS ?? 1_000_100);
const PAGE = 100;
const REPEATS = Number(process.env.BENCH_CHANGES_REPEATS ?? 2_000);

/** Writes `n` events straight into the feed's table, one transaction, bodies as the feed writes them. */
function fillFeed(db: Db, n: number): void {
  const epoch = db.prepare<[], string>('SELECT epoch FROM change_feed').pluck().get() ?? '0';
  const insert = db.prepare<[number, string, string, string]>(
    `INSERT INTO change_events (id, type, run_id, user_id, at, body) VALUES (?, 'user.updated', 1, ?, ?, ?)`,
  );
  const at = new Date().toISOString();
  db.transaction(() => {
    for (let cursor = 1; cursor <= n; cursor++) {
      const record = wireUser(cursor, { ingestion_end: '2026-12-31' });
      const userId = String(record.user_id);
      const body =
        `{"id":"evt_${epoch}_${cursor}","cursor":${cursor},"type":"user.updated","timestamp":"${at}","run_id":1,` +
        `"data":{"user_id":"${userId}","team_id":"${String(record.team_id)}","client_user_id":"${String(record.client_user_id)}",` +
        `"user":${JSON.stringify(record)},"changed_fields":["ingestion_end"],"sources_added":[],"sources_removed":[]}}`;
      insert.run(cursor, userId, at, body);
    }
  })();
}

interface Row {
  scenario: string;
  cursor: number;
  pages: number;
  microsPerPage: number;
  eventsPerSecond: number;
}

function timeInProcess(feed: ChangeFeed, cursor: number): Row {
  const t0 = performance.now();
  for (let i = 0; i < REPEATS; i++) {
    const page = feed.page(cursor, PAGE);
    if (page.gone || page.events.length !== Math.min(PAGE, EVENTS - cursor) || page.events[0]?.cursor !== cursor + 1) {
      throw new Error(`wrong page at cursor ${cursor}`);
    }
  }
  const s = (performance.now() - t0) / 1000;
  return {
    scenario: 'ChangeFeed.page (in process)',
    cursor,
    pages: REPEATS,
    microsPerPage: (s * 1e6) / REPEATS,
    eventsPerSecond: (REPEATS * PAGE) / s,
  };
}

async function timeHttp(http: Client, key: string, cursor: number): Promise<Row> {
  const t0 = performance.now();
  const n = Math.max(1, Math.floor(REPEATS / 4));
  for (let i = 0; i < n; i++) {
    const res = await http.request({
      method: 'GET',
      path: `/mirror/v1/changes?after=${cursor}&limit=${PAGE}`,
      headers: { 'x-vital-api-key': key },
    });
    const body = (await res.body.json()) as { events: { cursor: number }[]; next: number };
    if (res.statusCode !== 200 || body.events[0]?.cursor !== cursor + 1 || body.next !== cursor + PAGE)
      throw new Error(`wrong answer at cursor ${cursor}`);
  }
  const s = (performance.now() - t0) / 1000;
  return {
    scenario: 'GET /mirror/v1/changes (replica, keep-alive)',
    cursor,
    pages: n,
    microsPerPage: (s * 1e6) / n,
    eventsPerSecond: (n * PAGE) / s,
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-changes-'));
  try {
    const path = join(dir, 'mirror.db');
    const db = openMirror(path);
    const t0 = performance.now();
    fillFeed(db, EVENTS);
    const fillSeconds = (performance.now() - t0) / 1000;
    const feed = new ChangeFeed(db);
    const apiKey = 'rk_bench_changes';
    const replica = await startReplica(
      path,
      {
        host: '127.0.0.1',
        port: 0,
        apiKey,
        apiKeyHeaders: ['x-vital-api-key'],
        maxStalenessMs: 3_600_000,
        maxConnections: 1_024,
        headersTimeoutMs: 10_000,
        idleTimeoutMs: 5_000,
      },
      silentLogger,
    );
    const http = new Client(`http://127.0.0.1:${replica.port}`, { pipelining: 0 });
    const rows: Row[] = [];
    const cursors = [0, Math.floor(EVENTS / 2), EVENTS - PAGE];
    for (const cursor of cursors) rows.push(timeInProcess(feed, cursor));
    for (const cursor of cursors) rows.push(await timeHttp(http, apiKey, cursor));
    await http.close();
    await replica.close();
    db.close();

    const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
    console.log(`feed of ${fmt(EVENTS)} events (written in ${fillSeconds.toFixed(1)} s), pages of ${PAGE}\n`);
    console.log('| scenario | after cursor | pages | µs/page | events/s |');
    console.log('|---|---:|---:|---:|---:|');
    for (const r of rows)
      console.log(`| ${r.scenario} | ${fmt(r.cursor)} | ${fmt(r.pages)} | ${r.microsPerPage.toFixed(1)} | ${fmt(r.eventsPerSecond)} |`);
    const first = rows[0]?.microsPerPage ?? 1;
    const last = rows[2]?.microsPerPage ?? 1;
    console.log(`\npage cost at cursor ${fmt(EVENTS - PAGE)} / at cursor 0: ${(last / first).toFixed(2)}× (goal: O(page), about 1×)\n`);
    await benchDelivery();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
