/**
 * `npm run bench:layout-candidates`: how fast candidate layouts of `users` +
 * `connected_sources` take writes, with better-sqlite3 directly (no HTTP, no
 * RunWriter), so that a layout is chosen by measurement. bench/write-layout.ts
 * measures the two shipped schemas through the sync's own writer; this one
 * measures layouts that were never shipped, by the same SQL procedure each.
 *
 * Layouts, each in a fresh file (16 KiB pages, WAL, synchronous NORMAL):
 *   A. migration 1: `user_id TEXT NOT NULL PRIMARY KEY`, a rowid table
 *   B. migration 6: `user_id` a UNIQUE index, dropped for a first sync
 *   C. B without `users_content`
 *   D. B with fewer stored bytes: a 16-byte BLOB `content_hash`, the nine
 *      mapped columns VIRTUAL, generated from `raw` (upstream text, not the
 *      normalised timestamps: the difference is counted and printed)
 *   E. WITHOUT ROWID, keyed by `user_id`
 * Scenarios: 1. first sync of BENCH_LAYOUT_USERS (default 300,000) into an empty
 * mirror (the first-sync procedure of db/first-sync-load.ts, without the
 * change and warning rows: the same for every layout), COMMIT and
 * checkpoint(TRUNCATE) included; 2. re-sync, 1% of the users upserted with
 * their sources replaced, in one transaction, COMMIT and checkpoint included;
 * 3. 100,000 random lookups by client_user_id from a read-only connection;
 * 4. an analyst's scan of `created_on` (what virtual columns cost readers).
 * Records are the stand-in's, mapped by db/user-row.ts, generated and parsed
 * a page at a time outside the timing. Every scenario checks its result.
 */
import { hash } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Db } from '../db/open.js';
import { SOURCE_COLUMNS, toSourceRows, toUserRow, USER_COLUMNS } from '../db/user-row.js';
import { cols, marks, type Cell } from '../db/user-writes.js';
import type { User } from '../src/service/schemas.js';
import { parseUserRecord } from '../src/service/user-record.js';
import { clientIdLookupsPerSecond } from './client-id-lookups.js';
import { contentHash } from '../db/user-row.js';
import { Prng } from '../src/stand-in/random.js';
import { generateUserJson, userIdFor, userKeys, type UserKeys } from '../src/stand-in/user-generator.js';

const USERS = Number(process.env.BENCH_LAYOUT_USERS ?? 300_000);
const PAGE = 500;
/** What a statement binds: the project's cells, and layout D's binary hash. */
type Value = Cell | Buffer;
const LOOKUPS = 100_000;
const NOW = '2026-11-24T00:00:00.000Z';

/** The users columns mapped from the record that layout D generates from `raw` instead of storing. */
const FROM_RAW = {
  created_on: '$.created_on',
  fallback_time_zone_id: '$.fallback_time_zone.id',
  fallback_time_zone_source_slug: '$.fallback_time_zone.source_slug',
  fallback_time_zone_updated_at: '$.fallback_time_zone.updated_at',
  fallback_birth_date: '$.fallback_birth_date.value',
  fallback_birth_date_source_slug: '$.fallback_birth_date.source_slug',
  fallback_birth_date_updated_at: '$.fallback_birth_date.updated_at',
  ingestion_start: '$.ingestion_start',
  ingestion_end: '$.ingestion_end',
} as const;
type FromRaw = keyof typeof FROM_RAW;
const isFromRaw = (c: string): c is FromRaw => Object.hasOwn(FROM_RAW, c);

const INDEXES = {
  users_user_id: `CREATE UNIQUE INDEX users_user_id ON users (user_id)`,
  users_active_client_user: `CREATE UNIQUE INDEX users_active_client_user ON users (team_id, client_user_id) WHERE deleted_at IS NULL`,
  users_client_user_id: `CREATE INDEX users_client_user_id ON users (client_user_id)`,
  users_content: `CREATE INDEX users_content ON users (user_id, content_hash, deleted_at)`,
  connected_sources_slug: `CREATE INDEX connected_sources_slug ON connected_sources (slug)`,
};
type IndexName = keyof typeof INDEXES;

interface Layout {
  name: string;
  key: 'primary key' | 'unique index' | 'without rowid';
  compact: boolean;
  /** Dropped before a first sync and built after it, in this order (the user_id key first, as the writer does). */
  indexes: IndexName[];
}

const ALL: IndexName[] = ['users_user_id', 'users_active_client_user', 'users_client_user_id', 'users_content', 'connected_sources_slug'];
const LAYOUTS: Layout[] = [
  { name: 'A', key: 'primary key', compact: false, indexes: ALL.filter((i) => i !== 'users_user_id') },
  { name: 'B', key: 'unique index', compact: false, indexes: ALL },
  { name: 'C', key: 'unique index', compact: false, indexes: ALL.filter((i) => i !== 'users_content') },
  { name: 'D', key: 'unique index', compact: true, indexes: ALL },
  { name: 'E', key: 'without rowid', compact: false, indexes: ALL.filter((i) => i !== 'users_user_id') },
];

/** The columns a layout's INSERT binds: D leaves out the generated ones. */
const insertedColumns = (l: Layout) => [...USER_COLUMNS.filter((c) => !(l.compact && isFromRaw(c))), 'first_seen_at', 'last_seen_at'];

function schema(l: Layout): string {
  const column = (c: string) => {
    if (c === 'user_id') return `user_id TEXT NOT NULL${l.key === 'unique index' ? '' : ' PRIMARY KEY'}`;
    if (isFromRaw(c)) return l.compact ? `${c} TEXT AS (raw ->> '${FROM_RAW[c]}') VIRTUAL` : `${c} TEXT`;
    if (c === 'content_hash') return `content_hash ${l.compact ? 'BLOB' : 'TEXT'} NOT NULL`;
    return `${c} TEXT NOT NULL`;
  };
  const users = [...USER_COLUMNS, 'first_seen_at', 'last_seen_at'].map(column).join(',\n  ');
  return `CREATE TABLE users (\n  ${users},\n  deleted_at TEXT\n) STRICT${l.key === 'without rowid' ? ', WITHOUT ROWID' : ''};
    CREATE TABLE connected_sources (user_id TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL, logo TEXT, created_on TEXT,
      descriptor TEXT NOT NULL CHECK (descriptor IN ('provider', 'source')), PRIMARY KEY (user_id, slug)) STRICT, WITHOUT ROWID;
    ${l.indexes.map((i) => `${INDEXES[i]};`).join('\n')}`;
}

/** One generated user: its parsed record, its text, and the bytes its row is built from. */
interface Rec {
  user: User;
  json: string;
  hash: string;
}

function record(keys: UserKeys, i: number, changed = false): Rec {
  let json = generateUserJson(keys, i);
  // A field the mapping does not know: the bytes (and so the hash) change, the sources do not.
  if (changed) json = `${json.slice(0, -1)},"bench_revision":2}`;
  const parsed = parseUserRecord(JSON.parse(json), i);
  if (!parsed.ok) throw new Error(`generated user ${i} is invalid: ${parsed.reason}`);
  return { user: parsed.user, json, hash: contentHash(json) };
}

function userCells(l: Layout, r: Rec): Value[] {
  const row = toUserRow(r.user, r.json, r.hash);
  const out: Value[] = [];
  for (const c of USER_COLUMNS) {
    if (l.compact && isFromRaw(c)) continue;
    // D: the digest's first 16 bytes, binary, instead of `v3:` + 43 base64url characters.
    out.push(l.compact && c === 'content_hash' ? hash('sha256', r.json, 'buffer').subarray(0, 16) : row[c]);
  }
  out.push(NOW, NOW);
  return out;
}

const sourceCells = (u: User): Cell[][] => toSourceRows(u).map((s) => SOURCE_COLUMNS.map((c) => s[c]));

function open(path: string): Db {
  const db = new Database(path);
  db.pragma('page_size = 16384');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('cache_size = -16384');
  // As the sync's store: the run checkpoints once, after COMMIT.
  db.pragma('wal_autocheckpoint = 0');
  return db;
}

function timed(f: () => void): number {
  const t = performance.now();
  f();
  return (performance.now() - t) / 1000;
}

/** Seconds per phase of a first sync: users, sources (TEMP rows + the sorted insert), each index, COMMIT + checkpoint. */
type Phases = Map<string, number>;

function firstSync(db: Db, l: Layout, keys: UserKeys): { phases: Phases; sources: number } {
  const phases: Phases = new Map();
  const add = (phase: string, s: number) => phases.set(phase, (phases.get(phase) ?? 0) + s);
  db.exec(`CREATE TEMP TABLE bulk_sources (${cols(SOURCE_COLUMNS)})`);
  const insertUser = db.prepare<Value[]>(`INSERT INTO users (${cols(insertedColumns(l))}) VALUES (${marks(insertedColumns(l).length)})`);
  const bulkSource = db.prepare<Value[]>(`INSERT INTO bulk_sources VALUES (${marks(SOURCE_COLUMNS.length)})`);
  let sources = 0;
  add(
    'begin, drop indexes',
    timed(() => {
      db.exec('BEGIN');
      for (const i of l.indexes) db.exec(`DROP INDEX ${i}`);
    }),
  );
  for (let p = 0; p * PAGE < USERS; p++) {
    const page: Rec[] = [];
    for (let i = p * PAGE; i < Math.min(USERS, (p + 1) * PAGE); i++) page.push(record(keys, i));
    const rows = page.map((r) => ({ user: userCells(l, r), sources: sourceCells(r.user) }));
    sources += rows.reduce((n, r) => n + r.sources.length, 0);
    add(
      'users insert',
      timed(() => rows.forEach((r) => insertUser.run(...r.user))),
    );
    add(
      'sources load',
      timed(() => rows.forEach((r) => r.sources.forEach((s) => bulkSource.run(...s)))),
    );
  }
  for (const i of l.indexes.filter((n) => n.startsWith('users')))
    add(
      `index ${i}`,
      timed(() => db.exec(INDEXES[i])),
    );
  add(
    'sources load',
    timed(() => db.exec(`INSERT INTO connected_sources SELECT * FROM bulk_sources ORDER BY user_id, slug; DROP TABLE bulk_sources`)),
  );
  if (l.indexes.includes('connected_sources_slug'))
    add(
      'index connected_sources_slug',
      timed(() => db.exec(INDEXES.connected_sources_slug)),
    );
  add(
    'COMMIT + checkpoint',
    timed(() => {
      db.exec('COMMIT');
      db.pragma('wal_checkpoint(TRUNCATE)');
    }),
  );
  return { phases, sources };
}

/** 1% of the users, at random, upserted with their sources replaced; returns the changed users and the timed seconds. */
function resync(db: Db, l: Layout, keys: UserKeys): { changed: number[]; seconds: number } {
  const prng = new Prng(99, 1);
  const changed = [...new Set(Array.from({ length: Math.ceil(USERS / 100) }, () => Math.floor(prng.float() * USERS)))];
  const others = insertedColumns(l).filter((c) => c !== 'user_id' && c !== 'first_seen_at');
  const upsert = db.prepare<Value[]>(
    `INSERT INTO users (${cols(insertedColumns(l))}) VALUES (${marks(insertedColumns(l).length)})
     ON CONFLICT (user_id) DO UPDATE SET ${others.map((c) => `${c} = excluded.${c}`).join(', ')}`,
  );
  const dropSources = db.prepare<[string]>(`DELETE FROM connected_sources WHERE user_id = ?`);
  const insertSource = db.prepare<Value[]>(`INSERT INTO connected_sources VALUES (${marks(SOURCE_COLUMNS.length)})`);
  let seconds = timed(() => db.exec('BEGIN'));
  for (let p = 0; p * PAGE < changed.length; p++) {
    const page = changed.slice(p * PAGE, (p + 1) * PAGE).map((i) => record(keys, i, true));
    const rows = page.map((r) => ({ id: r.user.user_id, user: userCells(l, r), sources: sourceCells(r.user) }));
    seconds += timed(() => {
      for (const r of rows) {
        upsert.run(...r.user);
        dropSources.run(r.id);
        for (const s of r.sources) insertSource.run(...s);
      }
    });
  }
  seconds += timed(() => {
    db.exec('COMMIT');
    db.pragma('wal_checkpoint(TRUNCATE)');
  });
  return { changed, seconds };
}

/** Random lookups by client_user_id from a read-only connection; each must return its user's record. */
function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`check failed: ${what}`);
}

interface Row {
  layout: string;
  scenario: string;
  users: number;
  seconds: number;
  rate: number;
  bytesPerUser?: number;
  note: string;
  load: string;
}

const load1 = () => loadavg()[0]?.toFixed(2) ?? '?';

function measure(dir: string, l: Layout, keys: UserKeys): { rows: Row[]; phases: Phases } {
  const path = join(dir, `${l.name}.db`);
  const db = open(path);
  const rows: Row[] = [];
  const one = <T>(scenario: string, f: () => T, row: (r: T, load: string) => Row) => {
    const before = load1();
    process.stderr.write(`bench:layout-candidates: ${l.name} ${scenario}\n`);
    const r = f();
    rows.push(row(r, `${before} → ${load1()}`));
  };
  const count = (sql: string) => db.prepare<[], number>(sql).pluck().get() ?? -1;
  const onDisk = () => statSync(path).size + (existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0);
  let phases: Phases = new Map();
  try {
    db.exec(schema(l));
    one(
      '1. first sync',
      () => firstSync(db, l, keys),
      (r, load) => {
        phases = r.phases;
        check(count(`SELECT count(*) FROM users`) === USERS, `${l.name}: users rows`);
        check(count(`SELECT count(*) FROM connected_sources`) === r.sources, `${l.name}: source rows`);
        const built = count(
          `SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name IN (${l.indexes.map((i) => `'${i}'`).join(', ')})`,
        );
        check(built === l.indexes.length, `${l.name}: indexes built`);
        const seconds = [...r.phases.values()].reduce((a, b) => a + b, 0);
        return {
          layout: l.name,
          scenario: '1. first sync',
          users: USERS,
          seconds,
          rate: USERS / seconds,
          bytesPerUser: onDisk() / USERS,
          note: '',
          load,
        };
      },
    );
    one(
      '2. re-sync, 1% changed',
      () => resync(db, l, keys),
      (r, load) => {
        const probe = r.changed[0] ?? 0;
        const raw = db.prepare<[string], string>(`SELECT raw FROM users WHERE user_id = ?`).pluck().get(userIdFor(keys, probe));
        check(raw?.endsWith(`"bench_revision":2}`) === true, `${l.name}: changed user ${probe} rewritten`);
        check(count(`SELECT count(*) FROM users`) === USERS, `${l.name}: users rows after re-sync`);
        const note = `${r.changed.length} upserts, ${((r.seconds * 1e6) / r.changed.length).toFixed(0)} µs each`;
        return {
          layout: l.name,
          scenario: '2. re-sync, 1% changed',
          users: USERS,
          seconds: r.seconds,
          rate: USERS / r.seconds,
          bytesPerUser: onDisk() / USERS,
          note,
          load,
        };
      },
    );
    one(
      '3. lookup by client_user_id',
      () => clientIdLookupsPerSecond(path, keys, USERS, LOOKUPS),
      (perSecond, load) => ({
        layout: l.name,
        scenario: '3. lookup by client_user_id',
        users: LOOKUPS,
        seconds: LOOKUPS / perSecond,
        rate: perSecond,
        note: 'lookups/s, read-only connection',
        load,
      }),
    );
    one(
      '4. scan created_on',
      () => {
        const stmt = db.prepare<[string], number>(`SELECT count(*) FROM users WHERE created_on >= ?`).pluck();
        let n = 0;
        const seconds = timed(() => (n = stmt.get('2024-01-01') ?? 0));
        return { n, seconds };
      },
      (r, load) => ({
        layout: l.name,
        scenario: '4. scan created_on',
        users: USERS,
        seconds: r.seconds,
        rate: USERS / r.seconds,
        note: `${r.n} match${l.compact ? `; ${normalisedDiffers(db, keys)}` : ''}`,
        load,
      }),
    );
  } finally {
    db.close();
  }
  return { rows, phases };
}

/** Layout D's generated created_on is upstream's text: how often it differs from the stored, normalised value. */
function normalisedDiffers(db: Db, keys: UserKeys): string {
  const get = db.prepare<[string], string | null>(`SELECT created_on FROM users WHERE user_id = ?`).pluck();
  let differ = 0;
  const sample = 1_000;
  for (let i = 0; i < sample; i++) {
    const r = record(keys, (i * 7_919) % USERS);
    if (get.get(r.user.user_id) !== toUserRow(r.user, r.json, r.hash).created_on) differ++;
  }
  return `generated created_on differs from the stored normalised one for ${differ} of ${sample} users`;
}

function main(): void {
  const before = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-layouts-'));
  const keys = userKeys(7);
  const rows: Row[] = [];
  const breakdowns: [string, Phases][] = [];
  try {
    for (const l of LAYOUTS) {
      const m = measure(dir, l, keys);
      rows.push(...m.rows);
      if (l.name === 'A' || l.name === 'B') breakdowns.push([l.name, m.phases]);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const base = (scenario: string) => rows.find((r) => r.layout === 'A' && r.scenario === scenario)?.rate ?? Number.NaN;
  const table = rows.map(
    (r) =>
      `| ${r.layout} | ${r.scenario} | ${fmt(r.users)} | ${r.seconds.toFixed(2)} | ${fmt(r.rate)} | ${(r.rate / base(r.scenario)).toFixed(2)}× | ` +
      `${r.bytesPerUser === undefined ? '' : fmt(r.bytesPerUser)} | ${r.load} | ${r.note} |`,
  );
  const phaseRows = breakdowns.flatMap(([name, phases]) => {
    const total = [...phases.values()].reduce((a, b) => a + b, 0);
    return [...phases].map(([phase, s]) => `| ${name} | ${phase} | ${s.toFixed(2)} | ${((100 * s) / total).toFixed(0)}% |`);
  });
  process.stdout.write(
    `\n| layout | scenario | users | seconds | users/s | vs A | bytes/user | load 1-min | |\n|---|---|---:|---:|---:|---:|---:|---|---|\n${table.join('\n')}\n\n` +
      `| layout | first-sync phase | seconds | share |\n|---|---|---:|---:|\n${phaseRows.join('\n')}\n\n` +
      `node ${process.version}; timed: SQLite work only (records generated and parsed outside); ` +
      `load average before: ${before}, after: ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}\n`,
  );
}

main();
