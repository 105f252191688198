/**
 * The export against a real reader: a mirror built by real syncs from the
 * stand-in (creations, updates with sources connected and disconnected,
 * deletions and restores over several runs) is exported, and DuckDB
 * (@duckdb/node-api) reads every file: the counts, the types (TIMESTAMP,
 * JSON, no strings for times), NULLs where the mirror has none, and the
 * answers of the docs/sql.md recipes (users as of a time, active users per
 * source then, monthly active users, who disconnected a source) equal the
 * mirror's. An incremental export after one more sync holds exactly that
 * sync's changes and versions. The scenario is test/support/export-scenario.ts,
 * here at 3,000 users; `npm run soak:export -- --users 100000` runs it at the
 * issue's size.
 */
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExportSnapshot } from '../db/export-reader.js';
import type { Db } from '../db/open.js';
import { exportMirror, type ExportResult } from '../src/export/run.js';
import type { SyncRig } from './support/sync-rig.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import {
  buildExportScenario,
  canon,
  duckRows,
  incrementalComparisons,
  parquetFile as file,
  recipeComparisons,
  type Comparison,
  type ExportScenario,
} from './support/export-scenario.js';

const USERS = 3_000;

let scenario: ExportScenario;
let rig: SyncRig;
let db: Db;
/** Times between the runs: after run 1, after run 2, after run 3. */
let moments: string[];
let full: ExportResult;
let recipes: Comparison[];

beforeAll(async () => {
  requireBuiltCli();
  scenario = await buildExportScenario(USERS);
  ({ rig, db, moments, full } = scenario);
  recipes = await recipeComparisons(scenario);
});

afterAll(async () => {
  await scenario?.close();
});

const rowsOf = (sql: string) => duckRows(scenario, sql);

/** The comparison of a recipe by its name's start; its answer is not empty (at least `min` rows). */
function recipe(name: string, min = 1): Comparison[] {
  const found = recipes.filter((c) => c.name.startsWith(name));
  expect(found.length, name).toBeGreaterThan(0);
  for (const c of found) expect(c.mirror.length, c.name).toBeGreaterThanOrEqual(min);
  return found;
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

  it('answers "active users per source at a time" as the mirror does, at each moment between runs', () => {
    const found = recipe('active users per source after run');
    expect(found).toHaveLength(moments.length);
    for (const c of found) expect(c.lake, c.name).toEqual(c.mirror);
  });

  it('answers monthly active users as the mirror does', () => {
    for (const c of recipe('monthly active users')) expect(c.lake).toEqual(c.mirror);
  });

  it('answers "who disconnected a source in the last 7 days" as the mirror does', () => {
    for (const c of recipe('who disconnected a source', 21)) expect(c.lake).toEqual(c.mirror);
  });

  it('answers the JSON recipe of docs/export.md as the mirror does', () => {
    for (const c of recipe('the record is JSON', 2)) expect(c.lake).toEqual(c.mirror);
  });
});

describe("the users' sources, gathered in one pass in user_id order", () => {
  it("are what each user's own lookup finds, for the users file and the baseline connections alike", () => {
    const read = (options: { denseRows?: number }) => {
      const snapshot = new ExportSnapshot(db, options);
      try {
        return {
          users: [...snapshot.users()].map((u) => `${u.user_id} ${u.sources ?? '-'}`).sort(),
          sources: [...snapshot.sources({ kind: 'all' })].map((c) => JSON.stringify(c)).sort(),
          since: [...snapshot.sources({ kind: 'since', after: moments[0] as string })].map((c) => JSON.stringify(c)).sort(),
        };
      } finally {
        snapshot.close();
      }
    };
    const gathered = read({});
    const looked = read({ denseRows: 0 });
    expect(gathered.users.length).toBeGreaterThanOrEqual(USERS);
    expect(gathered.users.filter((u) => u.includes('\u001f')).length, 'users with two sources or more').toBeGreaterThan(0);
    expect(gathered.users.filter((u) => u.endsWith(' -')).length, 'users without a source').toBeGreaterThan(0);
    expect(gathered.sources.filter((c) => c.startsWith('{"id":null')).length, 'baseline connections').toBeGreaterThan(USERS / 2);
    expect(gathered).toEqual(looked);
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
    const { result, comparisons } = await incrementalComparisons(scenario);
    expect(result.manifest.kind).toBe('incremental');
    expect(result.manifest.since?.cursor).toBe(full.manifest.snapshot.cursor);
    const [events, versions, users, sources] = comparisons as [Comparison, Comparison, Comparison, Comparison];
    // 30 updated, 5 deleted, 7 added at 3,000 users.
    expect(events.mirror).toHaveLength(42);
    expect(versions.mirror.length).toBeGreaterThan(0);
    expect(users.mirror.length).toBeGreaterThan(0);
    expect(sources.mirror.length).toBeGreaterThan(0);
    for (const c of comparisons) expect(c.lake, c.name).toEqual(c.mirror);
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
