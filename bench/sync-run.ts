/**
 * One bench:sync scenario in a process of its own, as the daemon runs each
 * sync (src/sync/child-main.ts): a fresh process per run, so that its peak RSS
 * is that run's and not what an earlier scenario left in the heap. Forked by
 * bench/sync.ts with a SyncRunRequest as its argument; replies a RunResult
 * over IPC and exits.
 */
import { checkpointMirror, openMirror } from '../db/open.js';
import { toSourceRows, toUtcTimestamp } from '../db/user-row.js';
import { ServiceClient } from '../src/service/client.js';
import { runSync, type SyncSummary } from '../src/sync/engine.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { PAGE_LIMIT } from '../src/sync/scan.js';
import { callWithRetries } from '../src/service/retry.js';
import { parseUserRecord } from '../src/service/user-record.js';

export interface SyncRunRequest {
  kind: 'sync' | 'peer';
  baseUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  dbPath: string;
  users: number;
  concurrency: number;
  /** HTTP connections of the client. */
  connections: number;
}

export interface RunResult {
  seconds: number;
  /** The sampled peak and the kernel's high-water mark (ru_maxrss), whichever is higher. */
  peakRssMb: number;
  /** The WAL checkpoint after the run (src/sync/exclusive-run.ts does the same), not in `seconds`. */
  checkpointSeconds?: number;
}

const MB = 1024 * 1024;

const maxRssMb = (): number => (process.resourceUsage().maxRSS * 1024) / MB;

/** Samples RSS while `work` runs. */
async function measured<T>(work: () => Promise<T>): Promise<{ result: T; seconds: number; peakRssMb: number }> {
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 20);
  const started = performance.now();
  try {
    const result = await work();
    const seconds = (performance.now() - started) / 1000;
    peak = Math.max(peak, process.memoryUsage().rss);
    return { result, seconds, peakRssMb: peak / MB };
  } finally {
    clearInterval(sampler);
  }
}

function expectComplete(summary: SyncSummary, users: number, what: string): void {
  if (summary.status !== 'succeeded' || summary.usersSeen !== users) {
    throw new Error(`${what}: expected a succeeded run over ${users} users, got ${JSON.stringify(summary)}`);
  }
}

async function sync(client: ServiceClient, r: SyncRunRequest): Promise<RunResult> {
  const db = openMirror(r.dbPath);
  try {
    const { result, seconds, peakRssMb } = await measured(() => runSync({ client, writer: sqliteRunWriter(db), concurrency: r.concurrency }));
    expectComplete(result, r.users, `sync of ${r.users} users`);
    const checkpointSeconds = checkpointMirror(db).ms / 1000;
    return { seconds, peakRssMb: Math.max(peakRssMb, maxRssMb()), checkpointSeconds };
  } finally {
    db.close();
  }
}

/** The peer: a page at a time, parsed and validated, one transaction per page upserting users and their sources. */
async function peer(client: ServiceClient, dbPath: string, users: number): Promise<RunResult> {
  const db = openMirror(dbPath);
  const upsertUser = db.prepare(
    `INSERT INTO users (user_id, team_id, client_user_id, created_on, ingestion_start, ingestion_end, raw, content_hash, first_seen_at, last_seen_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, '', ?, ?)
     ON CONFLICT (user_id) DO UPDATE SET team_id = excluded.team_id, client_user_id = excluded.client_user_id,
       created_on = excluded.created_on, ingestion_start = excluded.ingestion_start, ingestion_end = excluded.ingestion_end,
       raw = excluded.raw, last_seen_at = excluded.last_seen_at`,
  );
  const dropSources = db.prepare(`DELETE FROM connected_sources WHERE user_id = ?`);
  const insertSource = db.prepare(
    `INSERT INTO connected_sources (user_id, slug, name, logo, created_on, descriptor) VALUES (?, ?, ?, ?, ?, ?)`,
  );
  try {
    const { seconds, peakRssMb } = await measured(async () => {
      for (let offset = 0; offset < users; offset += PAGE_LIMIT) {
        const params = { offset, limit: Math.min(PAGE_LIMIT, users - offset) };
        // Retried like the sync's own requests, so a dropped keep-alive socket does not end the benchmark.
        const page = await callWithRetries(`offset ${offset}`, () => client.listUserRecords(params), { attempts: 5 });
        const now = new Date().toISOString();
        db.transaction(() => {
          for (const [index, span] of page.spans.entries()) {
            const raw = page.body.toString('utf8', span.start, span.end);
            const record = parseUserRecord(JSON.parse(raw), index);
            if (!record.ok) continue;
            const u = record.user;
            upsertUser.run(u.user_id, u.team_id, u.client_user_id, toUtcTimestamp(u.created_on), u.ingestion_start ?? null, u.ingestion_end ?? null, raw, now, now);
            dropSources.run(u.user_id);
            for (const s of toSourceRows(u)) insertSource.run(s.user_id, s.slug, s.name, s.logo, s.created_on, s.descriptor);
          }
        })();
      }
    });
    return { seconds, peakRssMb: Math.max(peakRssMb, maxRssMb()) };
  } finally {
    db.close();
  }
}


async function main(): Promise<void> {
  const r = JSON.parse(process.argv[2] ?? '{}') as SyncRunRequest;
  const client = new ServiceClient({ baseUrl: r.baseUrl, apiKey: r.apiKey, apiKeyHeader: r.apiKeyHeader, connections: r.connections });
  try {
    const result = r.kind === 'sync' ? await sync(client, r) : await peer(client, r.dbPath, r.users);
    await new Promise<void>((resolve) => process.send?.(result, undefined, {}, () => resolve()) ?? resolve());
  } finally {
    await client.close();
  }
}

await main();
