/**
 * The export against a real reader: a mirror built by real syncs from the
 * stand-in (creations, updates with sources connected and disconnected,
 * deletions and restores over several runs) is exported, and DuckDB
 * (@duckdb/node-api) reads every file: the counts, the types (TIMESTAMP,
 * JSON, no strings for times), NULLs where the mirror has none, and the
 * answers of the docs/sql.md recipes (users as of a time, active users per
 * source then, monthly active users, who disconnected a source) equal the
 * mirror's. An incremental export after one more sync holds exactly that
 * sync's changes and versions.
 */
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { exportMirror, type ExportResult } from '../src/export/run.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { ROOT } from './support/mirror-fixtures.js';

const USERS = 3_000;
const tick = () => new Promise((r) => setTimeout(r, 5));

let rig: SyncRig;
let db: Db;
let duck: DuckDBConnection;
/** Times between the runs: after run 1, after run 2, after run 3. */
const moments: string[] = [];
let full: ExportResult;

/** A source disconnected, where the user has one (the stand-in refuses otherwise). */
function disconnect(id: string): void {
  try {
    rig.standIn.directory.update(id, 'connected_sources', 'disconnect');
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
  }
}

async function run(): Promise<void> {
  expect((await rig.sync()).status).toBe('succeeded');
  await tick();
  moments.push(new Date().toISOString());
  await tick();
}

beforeAll(async () => {
  requireBuiltCli();
  rig = await createSyncRig({ users: USERS });
  await run();
  const d = rig.standIn.directory;
  const listed = d.page(0, 400).map((u) => String(u.user_id));
  // Run 2: time zones change, sources connect and disconnect, users go, users come.
  for (const id of listed.slice(0, 100)) d.update(id, 'fallback_time_zone');
  for (const id of listed.slice(100, 200)) d.update(id, 'connected_sources', 'connect');
  for (const id of listed.slice(200, 260)) disconnect(id);
  d.delete(listed.slice(300, 360));
  d.add(40);
  await run();
  // Run 3: some of the deleted come back, more sources go.
  d.restore(listed.slice(300, 330));
  for (const id of listed.slice(100, 140)) disconnect(id);
  d.delete(listed.slice(360, 370));
  await run();
  db = openMirror(rig.dbPath, { readonly: true });
  full = await exportMirror({ mirrorPath: rig.dbPath, outDir: join(rig.dir, 'lake') });
  duck = await (await DuckDBInstance.create(':memory:')).connect();
});

afterAll(async () => {
  duck?.closeSync();
  db?.close();
  await rig?.close();
});

async function rowsOf(sql: string): Promise<Array<Record<string, unknown>>> {
  return (await duck.runAndReadAll(sql)).getRowObjectsJson();
}

const file = (r: ExportResult, table: string) => `'${join(r.dir, `${table}.parquet`)}'`;

/** DuckDB's text of a TIMESTAMP WITH TIME ZONE (in UTC), read back as the mirror writes a time. */
const DUCK_TIME = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\+00$/;

/** A SQLite answer and a DuckDB answer as comparable text rows, sorted. */
function canon(rows: Array<Record<string, unknown>>): string[] {
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
function docRecipe(comment: string, dir: string, at = ''): string {
  const page = readFileSync(join(ROOT, 'docs/export.md'), 'utf8');
  const start = page.indexOf(`# ${comment}\n`);
  const sql = /duckdb\.sql\(f"""([\s\S]*?)"""\)/.exec(page.slice(start))?.[1];
  if (start === -1 || sql === undefined) throw new Error(`docs/export.md has no DuckDB recipe "${comment}"`);
  return sql.replaceAll('{d}', dir).replaceAll("TIMESTAMPTZ '2026-06-01 00:00:00+00'", `TIMESTAMPTZ '${at}'`);
}

describe('a full export read by DuckDB', () => {
  it('has every table, row counts equal to the mirror, and a manifest whose hashes are the files', async () => {
    const m = full.manifest;
    expect(m.kind).toBe('full');
    expect(m.files.map((f) => f.table)).toEqual(['users', 'versions', 'sources', 'changes']);
    const mirrorCount = (sql: string) => db.prepare(sql).pluck().get() as number;
    const expected: Record<string, number> = {
      users: mirrorCount('SELECT count(*) FROM users'),
      versions: mirrorCount('SELECT count(*) FROM user_history'),
      sources: mirrorCount('SELECT count(*) FROM source_history'),
      changes: mirrorCount('SELECT count(*) FROM change_events'),
    };
    expect(expected.users).toBeGreaterThan(USERS);
    for (const f of m.files) {
      expect(f.rows, f.table).toBe(expected[f.table]);
      const [{ n }] = (await rowsOf(`SELECT count(*) AS n FROM ${file(full, f.table)}`)) as [{ n: string }];
      expect(Number(n), f.table).toBe(f.rows);
      const bytes = readFileSync(join(full.dir, f.file));
      expect(bytes.length).toBe(f.bytes);
      const { createHash } = await import('node:crypto');
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(f.sha256);
    }
    expect(m.snapshot.cursor).toBe(mirrorCount(`SELECT max(id) FROM change_events`));
    expect(m.schema_version).toBe(db.pragma('user_version', { simple: true }));
  });

  it('types times as TIMESTAMP, the record and the body as JSON, sources as a list: no strings for them', async () => {
    const types = async (table: string) =>
      Object.fromEntries(
        (await rowsOf(`DESCRIBE SELECT * FROM ${file(full, table)}`)).map((r) => [String(r.column_name), String(r.column_type)]),
      );
    const users = await types('users');
    expect(users).toMatchObject({
      user_id: 'VARCHAR',
      created_on: 'TIMESTAMP WITH TIME ZONE',
      deleted_at: 'TIMESTAMP WITH TIME ZONE',
      fallback_birth_date: 'DATE',
      sources: 'VARCHAR[]',
      raw: 'JSON',
    });
    expect(await types('versions')).toMatchObject({
      valid_from: 'TIMESTAMP WITH TIME ZONE',
      deleted: 'BOOLEAN',
      raw: 'JSON',
      opened_run: 'BIGINT',
    });
    expect(await types('sources')).toMatchObject({ connected_at: 'TIMESTAMP WITH TIME ZONE', disconnected_at: 'TIMESTAMP WITH TIME ZONE' });
    expect(await types('changes')).toMatchObject({ cursor: 'BIGINT', published_at: 'TIMESTAMP WITH TIME ZONE', body: 'JSON' });
  });

  it('carries the record once: json_extract reads its fields, and it is the mirror text', async () => {
    const rows = await rowsOf(
      `SELECT user_id, client_user_id, json_extract_string(raw, '$.client_user_id') AS from_raw, json_type(raw) AS t,
              epoch_ms(deleted_at) AS deleted_ms, raw::VARCHAR AS raw FROM ${file(full, 'users')}`,
    );
    const mirror = new Map(
      db
        .prepare<[], { user_id: string; raw: string; deleted_at: string | null }>('SELECT user_id, raw, deleted_at FROM users')
        .all()
        .map((r) => [r.user_id, r]),
    );
    expect(rows).toHaveLength(mirror.size);
    for (const r of rows) {
      expect(r.t).toBe('OBJECT');
      expect(r.from_raw).toBe(r.client_user_id);
      const m = mirror.get(String(r.user_id));
      expect(r.raw).toBe(m?.raw);
      expect(r.deleted_ms === null ? null : new Date(Number(r.deleted_ms)).toISOString()).toBe(m?.deleted_at);
    }
    const [event] = await rowsOf(
      `SELECT json_extract_string(body, '$.type') AS t, type FROM ${file(full, 'changes')} WHERE type = 'user.deleted' LIMIT 1`,
    );
    expect(event?.t).toBe('user.deleted');
  });

  it('has NULL where the mirror has none, never an empty string or a zero time', async () => {
    const [n] = await rowsOf(
      `SELECT count(*) FILTER (WHERE deleted_at IS NULL) AS active, count(*) FILTER (WHERE valid_to IS NULL) AS open FROM ${file(full, 'users')}, (SELECT NULL AS valid_to)`,
    );
    expect(Number(n?.active)).toBe(db.prepare('SELECT count(*) FROM users WHERE deleted_at IS NULL').pluck().get());
    const [v] = await rowsOf(
      `SELECT count(*) FILTER (WHERE valid_to IS NULL) AS open, count(*) FILTER (WHERE deleted) AS deleted FROM ${file(full, 'versions')}`,
    );
    expect(Number(v?.open)).toBe(db.prepare('SELECT count(*) FROM user_history WHERE valid_to IS NULL').pluck().get());
    expect(Number(v?.deleted)).toBe(db.prepare('SELECT count(*) FROM user_history WHERE ended_in_deletion = 1').pluck().get());
    expect(Number(v?.deleted)).toBeGreaterThan(0);
  });

  it('answers "active users per source at a time" as the mirror does, at each moment between runs', async () => {
    for (const at of moments) {
      const mirror = db
        .prepare(
          `SELECT c.slug, count(DISTINCT c.user_id) AS active_users
           FROM user_history AS v JOIN source_history AS c ON c.user_id = v.user_id
           WHERE v.valid_from <= @at AND (v.valid_to IS NULL OR v.valid_to > @at)
             AND c.connected_at <= @at AND (c.disconnected_at IS NULL OR c.disconnected_at > @at)
           GROUP BY c.slug`,
        )
        .all({ at }) as Array<Record<string, unknown>>;
      const lake = await rowsOf(docRecipe('active users per source at a time', full.dir, at));
      expect(mirror.length).toBeGreaterThan(0);
      expect(canon(lake)).toEqual(canon(mirror));
    }
  });

  it('answers monthly active users as the mirror does', async () => {
    const mirror = db
      .prepare(
        `WITH RECURSIVE months(start) AS (
           SELECT strftime('%Y-%m-01T00:00:00.000Z', complete_since) FROM history_state WHERE complete_since IS NOT NULL
           UNION ALL
           SELECT strftime('%Y-%m-%dT%H:%M:%fZ', start, '+1 month') FROM months
           WHERE strftime('%Y-%m-%dT%H:%M:%fZ', start, '+1 month') <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
         SELECT substr(m.start, 1, 7) AS month, count(DISTINCT v.user_id) AS active_users
         FROM months AS m JOIN user_history AS v
           ON v.valid_from < strftime('%Y-%m-%dT%H:%M:%fZ', m.start, '+1 month') AND (v.valid_to IS NULL OR v.valid_to > m.start)
         GROUP BY m.start`,
      )
      .all() as Array<Record<string, unknown>>;
    const lake = await rowsOf(docRecipe('monthly active users: users active at some time in each month since history began', full.dir));
    expect(mirror.length).toBeGreaterThan(0);
    expect(canon(lake)).toEqual(canon(mirror));
  });

  it('answers "who disconnected a source in the last 7 days" as the mirror does', async () => {
    const mirror = db
      .prepare(
        `SELECT DISTINCT v.client_user_id, c.user_id, c.slug, c.disconnected_at
         FROM source_history AS c JOIN user_history AS v
           ON v.user_id = c.user_id AND v.valid_from < c.disconnected_at AND (v.valid_to IS NULL OR v.valid_to >= c.disconnected_at)
         WHERE c.ended_by = 'disconnected' AND c.disconnected_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days')`,
      )
      .all() as Array<Record<string, unknown>>;
    const lake = await rowsOf(docRecipe('who disconnected a source in the last 7 days', full.dir));
    expect(mirror.length).toBeGreaterThan(20);
    expect(canon(lake)).toEqual(canon(mirror));
  });
});

describe('the JSON column', () => {
  it('answers the JSON recipe of docs/export.md as the mirror does', async () => {
    const page = readFileSync(join(ROOT, 'docs/export.md'), 'utf8');
    const sql = /# the record is JSON: its fields by path\nduckdb\.sql\(f"(.*)"\)/.exec(page)?.[1] ?? '';
    const zones = await rowsOf(sql.replaceAll('{d}', full.dir));
    const mirror = db.prepare(`SELECT raw ->> '$.fallback_time_zone.id' AS zone, count(*) FROM users GROUP BY zone`).all() as Array<
      Record<string, unknown>
    >;
    expect(mirror.length).toBeGreaterThan(1);
    expect(canon(zones)).toEqual(canon(mirror));
  });
});

describe('an export as of a time', () => {
  it('holds the users current then, with the sources connected then, as history says', async () => {
    const at = moments[1] ?? '';
    const r = await exportMirror({ mirrorPath: rig.dbPath, outDir: join(rig.dir, 'as-of'), asOf: at });
    expect(r.manifest.kind).toBe('as-of');
    const mirror = db
      .prepare(
        `SELECT v.user_id, (SELECT group_concat(slug, ',') FROM (SELECT slug FROM source_history AS c WHERE c.user_id = v.user_id
            AND c.connected_at <= @at AND (c.disconnected_at IS NULL OR c.disconnected_at > @at) ORDER BY slug)) AS slugs
         FROM user_history AS v WHERE v.valid_from <= @at AND (v.valid_to IS NULL OR v.valid_to > @at)`,
      )
      .all({ at }) as Array<Record<string, unknown>>;
    const lake = await rowsOf(
      `SELECT user_id, CASE WHEN len(sources) = 0 THEN NULL ELSE array_to_string(sources, ',') END AS slugs FROM ${file(r, 'users')}`,
    );
    expect(canon(lake)).toEqual(canon(mirror));
    // Run 3 restored users deleted by run 2: as of then, they are gone, and no version ends after `at`.
    const [late] = await rowsOf(
      `SELECT count(*) AS n FROM ${file(r, 'versions')} WHERE valid_to > TIMESTAMPTZ '${at}' OR valid_from > TIMESTAMPTZ '${at}'`,
    );
    expect(Number(late?.n)).toBe(0);
    const [created] = await rowsOf(`SELECT count(*) AS n, count(created_on) AS with_created FROM ${file(r, 'users')}`);
    expect(Number(created?.with_created)).toBe(Number(created?.n));
  });
});

describe('an incremental export after one more sync', () => {
  it('holds exactly that sync: its events, the versions and connections it opened or closed, the users it touched', async () => {
    const d = rig.standIn.directory;
    const listed = d.page(400, 100).map((u) => String(u.user_id));
    for (const id of listed.slice(0, 30)) d.update(id, 'fallback_time_zone');
    d.delete(listed.slice(30, 35));
    d.add(7);
    const summary = await rig.sync();
    expect(summary.status).toBe('succeeded');
    const runId = db.prepare('SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL').pluck().get() as number;
    const inc = await exportMirror({ mirrorPath: rig.dbPath, outDir: join(rig.dir, 'lake'), incremental: true });
    expect(inc.manifest.kind).toBe('incremental');
    expect(inc.manifest.since?.cursor).toBe(full.manifest.snapshot.cursor);

    const events = db.prepare('SELECT id FROM change_events WHERE run_id = ? ORDER BY id').pluck().all(runId).map(String);
    expect(events).toHaveLength(42);
    const lakeEvents = await rowsOf(`SELECT cursor FROM ${file(inc, 'changes')} ORDER BY cursor`);
    expect(lakeEvents.map((r) => String(r.cursor))).toEqual(events);

    const versions = db
      .prepare(`SELECT user_id, valid_from, valid_to FROM user_history WHERE opened_run = @run OR closed_run = @run`)
      .all({ run: runId }) as Array<Record<string, unknown>>;
    const lakeVersions = await rowsOf(
      `SELECT user_id, strftime(valid_from AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS f,
              strftime(valid_to AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ') AS t FROM ${file(inc, 'versions')}`,
    );
    expect(canon(lakeVersions)).toEqual(canon(versions));

    const touched = db.prepare('SELECT DISTINCT user_id FROM change_events WHERE run_id = ?').pluck().all(runId).map(String).sort();
    const lakeUsers = await rowsOf(`SELECT user_id FROM ${file(inc, 'users')}`);
    expect(lakeUsers.map((r) => String(r.user_id)).sort()).toEqual(touched);

    const sources = db
      .prepare(`SELECT count(*) FROM source_history WHERE opened_run = @run OR closed_run = @run`)
      .pluck()
      .get({ run: runId }) as number;
    const [lakeSources] = await rowsOf(`SELECT count(*) AS n FROM ${file(inc, 'sources')}`);
    expect(Number(lakeSources?.n)).toBe(sources);
  });
});

describe('an export under a field policy', () => {
  it('leaves out what the policy drops, from the columns, the records and the bodies; client_user_id hashed', async () => {
    const key = 'k'.repeat(40);
    writeFileSync(join(rig.dir, 'lake.key'), key, { mode: 0o600 });
    const policyFile = join(rig.dir, 'policy.json');
    writeFileSync(
      policyFile,
      JSON.stringify({
        name: 'lake',
        fields: { drop: ['fallback_birth_date'] },
        client_user_id: 'hmac',
        hmac_key_file: join(rig.dir, 'lake.key'),
      }),
    );
    const out = join(rig.dir, 'policy');
    const r = await runCli(['export', '--out', out, '--policy', policyFile, '--json'], rig.env(), 120_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const printed = JSON.parse(r.stdout) as { dir: string; manifest: { field_policy: string } };
    expect(printed.manifest.field_policy).toMatch(/^lake:[0-9a-f]{16}$/);
    const at = (table: string) => `'${join(printed.dir, `${table}.parquet`)}'`;
    const columns = (await rowsOf(`DESCRIBE SELECT * FROM ${at('users')}`)).map((c) => String(c.column_name));
    expect(columns).not.toContain('fallback_birth_date');
    expect(columns).not.toContain('fallback_birth_date_source_slug');
    expect(columns).toContain('fallback_time_zone_id');
    const [dropped] = await rowsOf(
      `SELECT count(*) FILTER (WHERE json_exists(raw, '$.fallback_birth_date')) AS in_raw, count(*) FILTER (WHERE raw IS NULL) AS no_raw FROM ${at('users')}`,
    );
    expect(Number(dropped?.in_raw)).toBe(0);
    expect(Number(dropped?.no_raw)).toBe(0);
    const [v] = await rowsOf(`SELECT count(*) FILTER (WHERE json_exists(raw, '$.fallback_birth_date')) AS n FROM ${at('versions')}`);
    expect(Number(v?.n)).toBe(0);
    const [b] = await rowsOf(
      `SELECT count(*) FILTER (WHERE json_exists(body, '$.data.user.fallback_birth_date')) AS n, count(*) FILTER (WHERE json_exists(body, '$.data.user')) AS users FROM ${at('changes')}`,
    );
    expect(Number(b?.users)).toBeGreaterThan(0);
    expect(Number(b?.n)).toBe(0);
    // Birth dates are in the mirror: the policy, not the data, left them out.
    expect(db.prepare(`SELECT count(*) FROM users WHERE raw ->> '$.fallback_birth_date' IS NOT NULL`).pluck().get()).toBeGreaterThan(0);
    const sample = db.prepare<[], { user_id: string; client_user_id: string }>('SELECT user_id, client_user_id FROM users LIMIT 1').get();
    const [hashed] = await rowsOf(
      `SELECT client_user_id, raw ->> '$.client_user_id' AS in_raw FROM ${at('users')} WHERE user_id = '${sample?.user_id ?? ''}'`,
    );
    const { createHmac } = await import('node:crypto');
    const expected = createHmac('sha256', key)
      .update(sample?.client_user_id ?? '')
      .digest('hex');
    expect(hashed).toEqual({ client_user_id: expected, in_raw: expected });
  });
});

describe('user-mirror export', () => {
  it('writes NDJSON of the chosen tables, private files only, and refuses an as-of time before history', async () => {
    const out = join(rig.dir, 'cli');
    const r = await runCli(['export', '--out', out, '--tables', 'users,changes', '--format', 'ndjson', '--json'], rig.env(), 120_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const printed = JSON.parse(r.stdout) as { dir: string; manifest: { files: Array<{ file: string; rows: number }> } };
    expect(printed.manifest.files.map((f) => f.file)).toEqual(['users.ndjson', 'changes.ndjson']);
    expect(readdirSync(printed.dir).sort()).toEqual(['changes.ndjson', 'manifest.json', 'users.ndjson']);
    for (const name of readdirSync(printed.dir)) expect(statSync(join(printed.dir, name)).mode & 0o777, name).toBe(0o600);
    expect(statSync(printed.dir).mode & 0o777).toBe(0o700);
    const [{ n, t }] = (await rowsOf(
      `SELECT count(*) AS n, count(*) FILTER (WHERE json_extract_string(raw, '$.user_id') = user_id) AS t FROM read_json('${join(printed.dir, 'users.ndjson')}', format = 'newline_delimited')`,
    )) as [{ n: string; t: string }];
    expect(Number(n)).toBe(printed.manifest.files[0]?.rows);
    expect(Number(t)).toBe(Number(n));

    const early = await runCli(['export', '--out', out, '--as-of', '2000-01-01'], rig.env(), 60_000);
    expect(early.code).toBe(2);
    expect(early.stderr).toMatch(/before the mirror's history begins/);
  });
});
