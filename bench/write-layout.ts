/**
 * `npm run bench:layout`: the mirror's write layout, measured in-process
 * (no HTTP), so that db/SCHEMA.md ("Write layout") can say what each choice
 * costs. The records are the stand-in's (random UUIDs in listing order, ~1 KB
 * each with their sources), generated and parsed outside the timed part;
 * what is timed is the sync's own RunWriter over SqliteMirrorStore.
 *
 * Layouts, each in a fresh file with the project's pragmas:
 *   - v5: migrations 1-5, `users.user_id` the table's PRIMARY KEY
 *   - v6: migration 6, `user_id` a UNIQUE index a first sync drops and rebuilds
 * Scenarios:
 *   1. first sync of BENCH_LAYOUT_USERS (default 300,000) into an empty mirror,
 *      the WAL checkpoint after it timed apart
 *   2. re-sync with 1% of the users changed (rate over the whole directory)
 *   3. offline lookups by client_user_id (a reader connection, 100,000 hits)
 * Then, on the v6 file: what each part of a user costs on disk (dbstat), and
 * what an analyst's query pays when a mapped column is read from `raw`
 * instead (the generated-column alternative).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkpointMirror, openMirror, type Db } from '../db/open.js';
import { MIGRATIONS } from '../db/migrations.js';
import type { StagedRecord } from '../db/mirrored-user.js';
import { parseUserRecord } from '../src/service/user-record.js';
import { clientIdLookupsPerSecond } from './client-id-lookups.js';
import { generateUserJson, userKeys, type UserKeys } from '../src/stand-in/user-generator.js';
import { sqliteRunWriter, type RunWriter } from '../src/sync/run-writer.js';
import { pageOf } from '../test/support/mirror-fixtures.js';

const USERS = Number(process.env.BENCH_LAYOUT_USERS ?? 300_000);
const PAGE = 500;
const LOOKUPS = 100_000;
const MB = 1024 * 1024;

interface Row {
  layout: string;
  scenario: string;
  seconds: number;
  rate: number;
  extra: string;
}

const LAYOUTS = [
  { name: 'v5: user_id PRIMARY KEY', migrations: MIGRATIONS.filter((m) => m.version <= 5) },
  { name: 'v6: user_id UNIQUE index, dropped during a first sync', migrations: MIGRATIONS },
];

/** Page `p` of the directory, parsed; `changed` rewrites the users whose index passes it. */
function page(keys: UserKeys, p: number, changed: (i: number) => boolean = () => false): StagedRecord[] {
  const out: StagedRecord[] = [];
  for (let i = p * PAGE; i < Math.min(USERS, (p + 1) * PAGE); i++) {
    let json = generateUserJson(keys, i);
    // A field the mapping does not know: the bytes change, so the record is rewritten.
    if (changed(i)) json = `${json.slice(0, -1)},"bench_revision":2}`;
    const parsed = parseUserRecord(JSON.parse(json), 0);
    if (!parsed.ok) throw new Error(`generated user ${i} is invalid: ${parsed.reason}`);
    out.push({ user: parsed.user, rawJson: json, warnings: parsed.warnings });
  }
  return out;
}

/** One run over every page; only the writer's work is timed. */
function run(writer: RunWriter, keys: UserKeys, changed?: (i: number) => boolean): { seconds: number; created: number; updated: number } {
  let timed = 0;
  let t = performance.now();
  const runId = writer.beginRun(USERS);
  timed += performance.now() - t;
  for (let p = 0; p * PAGE < USERS; p++) {
    const records = page(keys, p, changed);
    t = performance.now();
    writer.stagePage(runId, pageOf(records), 0);
    timed += performance.now() - t;
  }
  t = performance.now();
  const result = writer.publish(runId, { deletionsChecked: true, deletions: [] });
  writer.finishRun(runId, { status: 'succeeded', pages: Math.ceil(USERS / PAGE), usersSeen: USERS, ...result });
  timed += performance.now() - t;
  return { seconds: timed / 1000, created: result.created, updated: result.updated };
}

function measureLayout(dir: string, layout: (typeof LAYOUTS)[number], keys: UserKeys): Row[] {
  const path = join(dir, `${layout.migrations.length}.db`);
  const db = openMirror(path, { migrations: layout.migrations });
  const rows: Row[] = [];
  try {
    const writer = sqliteRunWriter(db);
    const first = run(writer, keys);
    if (first.created !== USERS) throw new Error(`${layout.name}: first sync created ${first.created}, not ${USERS}`);
    const checkpoint = checkpointMirror(db).ms / 1000;
    const bytes = statSync(path).size;
    rows.push({
      layout: layout.name,
      scenario: 'first sync',
      seconds: first.seconds,
      rate: USERS / first.seconds,
      extra: `then checkpoint ${checkpoint.toFixed(1)} s; ${Math.round(bytes / USERS)} bytes/user on disk`,
    });
    const changed = (i: number) => i % 100 === 0;
    const again = run(writer, keys, changed);
    if (again.updated !== Math.ceil(USERS / 100)) throw new Error(`${layout.name}: re-sync updated ${again.updated}`);
    rows.push({
      layout: layout.name,
      scenario: 're-sync, 1% changed',
      seconds: again.seconds,
      rate: USERS / again.seconds,
      extra: `${again.updated.toLocaleString('en-US')} rows rewritten`,
    });
    checkpointMirror(db);
    const perSecond = clientIdLookupsPerSecond(path, keys, USERS, LOOKUPS);
    rows.push({
      layout: layout.name,
      scenario: 'lookup by client_user_id',
      seconds: LOOKUPS / perSecond,
      rate: perSecond,
      extra: 'lookups/s, reader connection',
    });
    if (layout.migrations === MIGRATIONS) process.stdout.write(`\n${storageTable(db)}\n\n${readerCostTable(db)}\n`);
  } finally {
    db.close();
  }
  return rows;
}

/** Bytes on disk per user for each table and index (dbstat), and the mapped columns' share of `users`. */
function storageTable(db: Db): string {
  const parts = db
    .prepare<[], { name: string; bytes: number }>(
      `SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC LIMIT 12`,
    )
    .all();
  const mapped = db
    .prepare<[], { raw: number; mapped: number; hash: number }>(
      `SELECT avg(length(raw)) AS raw, avg(coalesce(length(created_on), 0) + coalesce(length(fallback_time_zone_id), 0)
         + coalesce(length(fallback_time_zone_source_slug), 0) + coalesce(length(fallback_time_zone_updated_at), 0)
         + coalesce(length(fallback_birth_date), 0) + coalesce(length(fallback_birth_date_source_slug), 0)
         + coalesce(length(fallback_birth_date_updated_at), 0) + coalesce(length(ingestion_start), 0) + coalesce(length(ingestion_end), 0)) AS mapped,
         avg(length(content_hash)) AS hash FROM users`,
    )
    .get();
  const lines = parts.map((p) => `| ${p.name} | ${Math.round(p.bytes / USERS)} |`);
  const note =
    mapped === undefined
      ? ''
      : `\nper users row: raw ${Math.round(mapped.raw)} bytes, the nine mapped columns ${Math.round(mapped.mapped)}, content_hash ${Math.round(mapped.hash)}`;
  return `| table or index (v6) | bytes per user |\n|---|---:|\n${lines.join('\n')}${note}`;
}

/** An analyst's scan over a mapped column, stored versus read out of `raw` (what a generated VIRTUAL column would do). */
function readerCostTable(db: Db): string {
  const since = '2024-01-01T00:00:00.000Z';
  const timed = (sql: string) => {
    const stmt = db.prepare<[string], number>(sql).pluck();
    const t = performance.now();
    const n = stmt.get(since) ?? 0;
    return { n, ms: performance.now() - t };
  };
  const stored = timed(`SELECT count(*) FROM users WHERE created_on >= ?`);
  const fromRaw = timed(`SELECT count(*) FROM users WHERE raw ->> '$.created_on' >= ?`);
  return [
    '| analyst query over all users | ms | matches |',
    '|---|---:|---:|',
    `| created_on >= …, stored column | ${stored.ms.toFixed(0)} | ${stored.n} |`,
    `| raw ->> '$.created_on' >= …, read from raw | ${fromRaw.ms.toFixed(0)} | ${fromRaw.n} |`,
  ].join('\n');
}

function main(): void {
  const before = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-layout-'));
  const keys = userKeys(7);
  const rows: Row[] = [];
  try {
    for (const layout of LAYOUTS) {
      process.stderr.write(`bench:layout: ${layout.name}, ${USERS.toLocaleString('en-US')} users\n`);
      rows.push(...measureLayout(dir, layout, keys));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const base = (scenario: string) => rows.find((r) => r.scenario === scenario)?.rate ?? 1;
  const body = rows.map(
    (r) =>
      `| ${r.layout} | ${r.scenario} | ${r.seconds.toFixed(2)} | ${fmt(r.rate)} | ${(r.rate / base(r.scenario)).toFixed(2)}x | ${r.extra} |`,
  );
  process.stdout.write(
    `\n| layout | scenario | seconds | per second | vs v5 | |\n|---|---|---:|---:|---:|---|\n${body.join('\n')}\n\n` +
      `node ${process.version}; writer work only (records generated and parsed outside the timing); rss now ${Math.round(process.memoryUsage().rss / MB)} MB\n` +
      `load average before: ${before}, after: ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}\n`,
  );
}

main();
