/**
 * The export's done-when scenario (issue 53), at any size: a mirror built by
 * real syncs from the stand-in (creations, updates with sources connected
 * and disconnected, deletions and restores over three runs), exported in
 * full, read by DuckDB; the answers of the docs/sql.md recipes from the
 * mirror beside those of docs/export.md's DuckDB recipes from the files;
 * then one more sync and an incremental export beside exactly that sync's
 * changes. test/export.test.ts asserts the comparisons at a size a busy CI
 * handles; `npm run soak:export -- --users 100000` (bench/export-soak.ts)
 * prints them at the issue's size. The churn is a fixed share of the users
 * (at 3,000 users: 400 touched in run 2, 42 events in the last sync).
 *
 * No vitest here: the soak runs outside it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { openMirror, type Db } from '../../db/open.js';
import { exportMirror, type ExportResult } from '../../src/export/run.js';
import { createSyncRig, type SyncRig } from './sync-rig.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url)).replace(/\/dist\/?$/, '');

export interface ExportScenario {
  users: number;
  rig: SyncRig;
  /** The mirror, read-only. */
  db: Db;
  duck: DuckDBConnection;
  /** Times between the runs: after run 1, after run 2, after run 3. */
  moments: string[];
  /** The full export after run 3. */
  full: ExportResult;
  /** Seconds: the three syncs, and the full export. */
  timings: { syncs: number; export: number };
  close(): Promise<void>;
}

/** One recipe's answer from the mirror and from the files, as sorted comparable rows. */
export interface Comparison {
  name: string;
  mirror: string[];
  lake: string[];
}

export const sameAnswer = (c: Comparison) => JSON.stringify(c.mirror) === JSON.stringify(c.lake);

const tick = () => new Promise((r) => setTimeout(r, 5));

/** `n` of the 3,000-user scenario, scaled to `users`. */
const scaled = (users: number, n: number) => Math.max(1, Math.round((n * users) / 3_000));

export async function buildExportScenario(users: number): Promise<ExportScenario> {
  const rig = await createSyncRig({ users });
  const moments: string[] = [];
  const k = (n: number) => scaled(users, n);
  const run = async () => {
    const summary = await rig.sync();
    if (summary.status !== 'succeeded') throw new Error(`sync ${summary.status}`);
    await tick();
    moments.push(new Date().toISOString());
    await tick();
  };
  /** A source disconnected, where the user has one (the stand-in refuses otherwise). */
  const disconnect = (id: string) => {
    try {
      rig.standIn.directory.update(id, 'connected_sources', 'disconnect');
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
    }
  };
  try {
    const started = performance.now();
    await run();
    const d = rig.standIn.directory;
    const listed = d.page(0, k(400)).map((u) => String(u.user_id));
    // Run 2: time zones change, sources connect and disconnect, users go, users come.
    for (const id of listed.slice(0, k(100))) d.update(id, 'fallback_time_zone');
    for (const id of listed.slice(k(100), k(200))) d.update(id, 'connected_sources', 'connect');
    for (const id of listed.slice(k(200), k(260))) disconnect(id);
    d.delete(listed.slice(k(300), k(360)));
    d.add(k(40));
    await run();
    // Run 3: some of the deleted come back, more sources go.
    d.restore(listed.slice(k(300), k(330)));
    for (const id of listed.slice(k(100), k(140))) disconnect(id);
    d.delete(listed.slice(k(360), k(370)));
    await run();
    const synced = performance.now();
    const db = openMirror(rig.dbPath, { readonly: true });
    const full = await exportMirror({ mirrorPath: rig.dbPath, outDir: join(rig.dir, 'lake') });
    const exported = performance.now();
    const duck = await (await DuckDBInstance.create(':memory:')).connect();
    return {
      users,
      rig,
      db,
      duck,
      moments,
      full,
      timings: { syncs: (synced - started) / 1000, export: (exported - synced) / 1000 },
      async close() {
        duck.closeSync();
        db.close();
        await rig.close();
      },
    };
  } catch (err) {
    await rig.close();
    throw err;
  }
}

export async function duckRows(s: ExportScenario, sql: string): Promise<Array<Record<string, unknown>>> {
  return (await s.duck.runAndReadAll(sql)).getRowObjectsJson();
}

export const parquetFile = (r: ExportResult, table: string) => `'${join(r.dir, `${table}.parquet`)}'`;

/** DuckDB's text of a TIMESTAMP WITH TIME ZONE (in UTC), read back as the mirror writes a time. */
const DUCK_TIME = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\+00$/;

/** A SQLite answer and a DuckDB answer as comparable text rows, sorted. */
export function canon(rows: Array<Record<string, unknown>>): string[] {
  const text = (v: unknown) => {
    if (v === null) return null;
    const s = typeof v === 'string' ? v : JSON.stringify(v);
    return DUCK_TIME.test(s) ? new Date(s.replace(' ', 'T').replace('+00', 'Z')).toISOString() : s;
  };
  return rows.map((r) => JSON.stringify(Object.values(r).map(text))).sort();
}

/**
 * A DuckDB recipe of docs/export.md as written, found by its comment line, for the export in `dir`, the time
 * it asks about replaced by `at`.
 */
export function docRecipe(comment: string, dir: string, at = ''): string {
  const page = readFileSync(join(ROOT, 'docs/export.md'), 'utf8');
  const start = page.indexOf(`# ${comment}\n`);
  const sql = /duckdb\.sql\(f"""([\s\S]*?)"""\)/.exec(page.slice(start))?.[1];
  if (start === -1 || sql === undefined) throw new Error(`docs/export.md has no DuckDB recipe "${comment}"`);
  return sql.replaceAll('{d}', dir).replaceAll("TIMESTAMPTZ '2026-06-01 00:00:00+00'", `TIMESTAMPTZ '${at}'`);
}

/** The recipes of docs/sql.md asked of the mirror and of the full export: one comparison per recipe (and per moment). */
export async function recipeComparisons(s: ExportScenario): Promise<Comparison[]> {
  const out: Comparison[] = [];
  const all = (sql: string, params: Record<string, string> = {}) => s.db.prepare(sql).all(params) as Array<Record<string, unknown>>;
  for (const [i, at] of s.moments.entries()) {
    const mirror = all(
      `SELECT c.slug, count(DISTINCT c.user_id) AS active_users
       FROM user_history AS v JOIN source_history AS c ON c.user_id = v.user_id
       WHERE v.valid_from <= @at AND (v.valid_to IS NULL OR v.valid_to > @at)
         AND c.connected_at <= @at AND (c.disconnected_at IS NULL OR c.disconnected_at > @at)
       GROUP BY c.slug`,
      { at },
    );
    const lake = await duckRows(s, docRecipe('active users per source at a time', s.full.dir, at));
    out.push({ name: `active users per source after run ${i + 1}`, mirror: canon(mirror), lake: canon(lake) });
  }
  const mau = all(
    `WITH RECURSIVE months(start) AS (
       SELECT strftime('%Y-%m-01T00:00:00.000Z', complete_since) FROM history_state WHERE complete_since IS NOT NULL
       UNION ALL
       SELECT strftime('%Y-%m-%dT%H:%M:%fZ', start, '+1 month') FROM months
       WHERE strftime('%Y-%m-%dT%H:%M:%fZ', start, '+1 month') <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
     SELECT substr(m.start, 1, 7) AS month, count(DISTINCT v.user_id) AS active_users
     FROM months AS m JOIN user_history AS v
       ON v.valid_from < strftime('%Y-%m-%dT%H:%M:%fZ', m.start, '+1 month') AND (v.valid_to IS NULL OR v.valid_to > m.start)
     GROUP BY m.start`,
  );
  const lakeMau = await duckRows(
    s,
    docRecipe('monthly active users: users active at some time in each month since history began', s.full.dir),
  );
  out.push({ name: 'monthly active users', mirror: canon(mau), lake: canon(lakeMau) });
  const gone = all(
    `SELECT DISTINCT v.client_user_id, c.user_id, c.slug, c.disconnected_at
     FROM source_history AS c JOIN user_history AS v
       ON v.user_id = c.user_id AND v.valid_from < c.disconnected_at AND (v.valid_to IS NULL OR v.valid_to >= c.disconnected_at)
     WHERE c.ended_by = 'disconnected' AND c.disconnected_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days')`,
  );
  const lakeGone = await duckRows(s, docRecipe('who disconnected a source in the last 7 days', s.full.dir));
  out.push({ name: 'who disconnected a source in the last 7 days', mirror: canon(gone), lake: canon(lakeGone) });
  const page = readFileSync(join(ROOT, 'docs/export.md'), 'utf8');
  const jsonSql = /# the record is JSON: its fields by path\nduckdb\.sql\(f"(.*)"\)/.exec(page)?.[1] ?? '';
  const zones = await duckRows(s, jsonSql.replaceAll('{d}', s.full.dir));
  const mirrorZones = all(`SELECT raw ->> '$.fallback_time_zone.id' AS zone, count(*) FROM users GROUP BY zone`);
  out.push({ name: 'the record is JSON: users per time zone', mirror: canon(mirrorZones), lake: canon(zones) });
  return out;
}

/**
 * One more sync (a share of users updated, some deleted, some added), then an incremental export: its events,
 * versions, users and connections beside exactly what that sync did in the mirror.
 */
export async function incrementalComparisons(s: ExportScenario): Promise<{ result: ExportResult; comparisons: Comparison[] }> {
  const k = (n: number) => scaled(s.users, n);
  const d = s.rig.standIn.directory;
  const listed = d.page(k(400), k(100)).map((u) => String(u.user_id));
  for (const id of listed.slice(0, k(30))) d.update(id, 'fallback_time_zone');
  d.delete(listed.slice(k(30), k(35)));
  d.add(k(7));
  const summary = await s.rig.sync();
  if (summary.status !== 'succeeded') throw new Error(`sync ${summary.status}`);
  const runId = s.db.prepare('SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL').pluck().get() as number;
  const inc = await exportMirror({ mirrorPath: s.rig.dbPath, outDir: join(s.rig.dir, 'lake'), incremental: true });
  const file = (t: string) => parquetFile(inc, t);
  const events = s.db.prepare('SELECT id AS cursor FROM change_events WHERE run_id = ? ORDER BY id').all(runId) as Array<
    Record<string, unknown>
  >;
  const lakeEvents = await duckRows(s, `SELECT cursor FROM ${file('changes')} ORDER BY cursor`);
  const versions = s.db
    .prepare(`SELECT user_id, valid_from, valid_to FROM user_history WHERE opened_run = @run OR closed_run = @run`)
    .all({ run: runId }) as Array<Record<string, unknown>>;
  const lakeVersions = await duckRows(
    s,
    `SELECT user_id, strftime(valid_from AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS f,
            strftime(valid_to AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS t FROM ${file('versions')}`,
  );
  const touched = s.db.prepare('SELECT DISTINCT user_id FROM change_events WHERE run_id = ?').all(runId) as Array<Record<string, unknown>>;
  const lakeUsers = await duckRows(s, `SELECT user_id FROM ${file('users')}`);
  const sources = s.db
    .prepare(`SELECT user_id, slug, connected_at, disconnected_at FROM source_history WHERE opened_run = @run OR closed_run = @run`)
    .all({ run: runId }) as Array<Record<string, unknown>>;
  const lakeSources = await duckRows(
    s,
    `SELECT user_id, slug, strftime(connected_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS c,
            strftime(disconnected_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS d FROM ${file('sources')}`,
  );
  const asText = (rows: Array<Record<string, unknown>>) => rows.map((r) => JSON.stringify(Object.values(r).map(String)));
  return {
    result: inc,
    comparisons: [
      // In cursor order, not sorted: the feed's order is part of the answer.
      { name: "the last sync's events (cursors, in order)", mirror: asText(events), lake: asText(lakeEvents) },
      { name: 'versions it opened or closed', mirror: canon(versions), lake: canon(lakeVersions) },
      { name: 'users it touched', mirror: canon(touched), lake: canon(lakeUsers) },
      { name: 'connections it opened or closed', mirror: canon(sources), lake: canon(lakeSources) },
    ],
  };
}
