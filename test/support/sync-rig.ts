/**
 * What sync tests share: the stand-in over real HTTP, a real ServiceClient,
 * and a real SQLite mirror file in a fresh temp directory; plus the two views
 * tests compare, the stand-in's directory and the mirror's active users.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openMirror, type Db } from '../../db/open.js';
import { RunWriter, sqliteRunWriter } from '../../src/sync/run-writer.js';
import { ServiceClient } from '../../src/service/client.js';
import { startStandIn, type StandIn, type StandInOptions } from '../../src/stand-in/index.js';
import { runSync, type SyncOptions } from '../../src/sync/engine.js';
import type { SyncSummary } from '../../src/sync/run-summary.js';

/** Fast retries: the tests exercise the retry path, not the wait. */
export const FAST_BACKOFF = { baseMs: 5, maxMs: 40, maxRetryAfterMs: 5_000 };

export interface SyncRig {
  standIn: StandIn;
  client: ServiceClient;
  dir: string;
  dbPath: string;
  db: Db;
  writer: RunWriter;
  /** One run with the rig's client and writer; options override the test defaults (no retry time budget). */
  sync(options?: Partial<SyncOptions>): Promise<SyncSummary>;
  /** Env for a child `node dist/cli.js sync` against this rig. */
  env(extra?: Record<string, string>): NodeJS.ProcessEnv;
  close(): Promise<void>;
}

export async function createSyncRig(standInOptions: StandInOptions = {}): Promise<SyncRig> {
  const standIn = await startStandIn({ seed: 11, orgs: 0, membersPerOrg: 0, ...standInOptions });
  const client = clientFor(standIn);
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-sync-'));
  const dbPath = join(dir, 'mirror.db');
  const db = openMirror(dbPath);
  const writer = sqliteRunWriter(db);
  return {
    standIn,
    client,
    dir,
    dbPath,
    db,
    writer,
    // Attempts only, no time budget: tests of a failing service want it to give up quickly.
    sync: (options = {}) => runSync({ client, writer, backoff: FAST_BACKOFF, pageAttempts: 5, pageRetryBudgetMs: 0, ...options }),
    env: (extra = {}) => ({
      PATH: process.env.PATH,
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      MIRROR_DB: dbPath,
      LOG_LEVEL: 'info',
      ...extra,
    }),
    async close() {
      await client.close();
      db.close();
      await standIn.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function clientFor(standIn: StandIn, connections = 8): ServiceClient {
  return new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: standIn.apiKey, apiKeyHeader: standIn.apiKeyHeader, connections });
}

/** One user as both sides should hold it. */
export interface UserView {
  client_user_id: string;
  raw: string;
  /** Connected source slugs, sorted; `provider` preferred over `source`. */
  sources: string[];
}

export function directoryView(standIn: StandIn): Map<string, UserView> {
  const out = new Map<string, UserView>();
  for (const record of standIn.directory.records()) {
    const sources = (record.connected_sources as Array<{ provider?: { slug: string }; source?: { slug: string } }>)
      .map((cs) => (cs.provider ?? cs.source)?.slug ?? '')
      .sort();
    out.set(String(record.user_id), { client_user_id: String(record.client_user_id), raw: JSON.stringify(record), sources });
  }
  return out;
}

export function mirrorView(db: Db): Map<string, UserView> {
  const out = new Map<string, UserView>();
  const users = db.prepare<[], { user_id: string; client_user_id: string; raw: string }>(
    'SELECT user_id, client_user_id, raw FROM users WHERE deleted_at IS NULL',
  );
  for (const u of users.iterate()) out.set(u.user_id, { client_user_id: u.client_user_id, raw: u.raw, sources: [] });
  const sources = db.prepare<[], { user_id: string; slug: string }>(
    'SELECT cs.user_id, cs.slug FROM connected_sources AS cs JOIN users AS u ON u.user_id = cs.user_id WHERE u.deleted_at IS NULL',
  );
  for (const s of sources.iterate()) out.get(s.user_id)?.sources.push(s.slug);
  for (const v of out.values()) v.sources.sort();
  return out;
}

/**
 * One digest of the active users and their content, read in one statement
 * (one snapshot): equal digests, equal published mirrors.
 */
export function mirrorFingerprint(db: Db): { count: number; digest: string } {
  const hash = createHash('sha256');
  let count = 0;
  const rows = db.prepare<[], { user_id: string; content_hash: string }>(
    'SELECT user_id, content_hash FROM users WHERE deleted_at IS NULL ORDER BY user_id',
  );
  for (const r of rows.iterate()) {
    hash.update(`${r.user_id}:${r.content_hash}\n`);
    count++;
  }
  return { count, digest: hash.digest('hex') };
}

export function changeCounts(db: Db, runId: number): Record<string, number> {
  const rows = db
    .prepare<[number], { change: string; n: number }>('SELECT change, count(*) AS n FROM user_changes WHERE run_id = ? GROUP BY change')
    .all(runId);
  return Object.fromEntries(rows.map((r) => [r.change, r.n]));
}

export interface RunRow {
  id: number;
  status: string;
  error: string | null;
  total_at_start: number | null;
  total_at_end: number | null;
  pages: number;
  users_seen: number;
  swept: number;
  published_at: string | null;
}

export function runRow(db: Db, runId: number): RunRow | undefined {
  return db
    .prepare<[number], RunRow>(
      'SELECT id, status, error, total_at_start, total_at_end, pages, users_seen, swept, published_at FROM sync_runs WHERE id = ?',
    )
    .get(runId);
}

/** List requests the stand-in has answered with 200 so far. */
export function listPagesServed(standIn: StandIn): number {
  return standIn.counts.get('list', 200);
}
