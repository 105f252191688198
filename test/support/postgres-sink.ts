/**
 * For the PostgreSQL sink's tests: a sink pass as a child process (the
 * built src/sinks/postgres/main.js), and the four tables and the position
 * read from both sides in one comparable form (the mirror's rows and the
 * destination's, timestamps as the mirror's ISO text, records parsed).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import type pg from 'pg';
import type { Db } from '../../db/open.js';
import { ROOT } from './mirror-fixtures.js';

export const SINK_MAIN = join(ROOT, 'dist/src/sinks/postgres/main.js');

export interface SinkChild {
  child: ChildProcess;
  /** stdout so far (JSON log lines). */
  out(): string;
  err(): string;
  exited: Promise<number | null>;
}

export function startSinkChild(mirrorPath: string, options: Record<string, unknown>): SinkChild {
  const child = spawn(process.execPath, [SINK_MAIN, mirrorPath, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, out: () => out, err: () => err, exited };
}

/** Runs a pass to its end; fails with its output unless it exits 0. */
export async function runSinkPass(mirrorPath: string, options: Record<string, unknown>): Promise<string> {
  const c = startSinkChild(mirrorPath, options);
  const code = await c.exited;
  if (code !== 0) throw new Error(`sink pass exited ${code}:\n${c.out()}\n${c.err()}`);
  return c.out();
}

export type Row = Record<string, unknown>;

export interface Tables {
  users: Row[];
  sources: Row[];
  versions: Row[];
  connections: Row[];
  position: { cursor: number; epoch: string };
}

const parse = (raw: unknown): unknown => (typeof raw === 'string' ? JSON.parse(raw) : raw);

/** The mirror as the destination should hold it (under a policy that passes everything). */
export function mirrorTables(db: Db): Tables {
  const users = db.prepare(MIRROR_SQL.users).all() as Row[];
  const sources = db.prepare(MIRROR_SQL.sources).all() as Row[];
  const versions = db.prepare(MIRROR_SQL.versions).all() as Row[];
  const connections = db.prepare(MIRROR_SQL.connections).all() as Row[];
  const cursor = db.prepare(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'change_events'), 0)`).pluck().get() as number;
  const epoch = db.prepare(`SELECT epoch FROM change_feed`).pluck().get() as string;
  for (const r of [...users, ...versions]) r.raw = parse(r.raw);
  return { users, sources, versions, connections, position: { cursor, epoch } };
}

/** The four tables' queries on the mirror, ordered as the destination's (DESTINATION_SQL). */
const MIRROR_SQL = {
  users: `SELECT u.user_id, u.team_id, u.client_user_id, u.created_on, u.fallback_time_zone_id, u.fallback_time_zone_source_slug,
         u.fallback_time_zone_updated_at, u.fallback_birth_date, u.fallback_birth_date_source_slug, u.fallback_birth_date_updated_at,
         u.ingestion_start, u.ingestion_end, u.raw,
         -- The deletion's publish: the timestamp of the user's last user.deleted event.
         CASE WHEN u.deleted_at IS NULL THEN NULL ELSE
           (SELECT max(e.at) FROM change_events AS e WHERE e.user_id = u.user_id AND e.type = 'user.deleted') END AS deleted_at
       FROM users AS u ORDER BY u.user_id`,
  sources: `SELECT user_id, slug, name, logo, created_on, descriptor FROM connected_sources ORDER BY user_id, slug`,
  versions: `SELECT user_id, team_id, client_user_id, raw, valid_from, valid_to, end_cause FROM user_history ORDER BY user_id, valid_from`,
  connections: `SELECT user_id, slug, created_on, connected_at, disconnected_at, ended_by FROM source_history ORDER BY user_id, slug, connected_at`,
} as const;

const ts = (c: string) => `to_char(${c} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${c}`;

/** The destination's tables in `schema`, in the mirror's form. */
export async function destinationTables(client: pg.ClientBase, schema: string): Promise<Tables> {
  const rows = async (sql: string) => (await client.query<Row>(sql)).rows;
  const q = destinationSql(schema);
  const [users, sources, versions, connections] = [
    await rows(q.users),
    await rows(q.sources),
    await rows(q.versions),
    await rows(q.connections),
  ];
  const p = (await rows(`SELECT cursor, epoch FROM "${schema}".sink_position`))[0] ?? {};
  return { users, sources, versions, connections, position: { cursor: Number(p.cursor), epoch: String(p.epoch) } };
}

/** The four tables' queries on the destination, in the mirror's form (MIRROR_SQL). */
function destinationSql(schema: string): Record<keyof typeof MIRROR_SQL, string> {
  const s = `"${schema}"`;
  return {
    users: `SELECT user_id::text, team_id::text, client_user_id, ${ts('created_on')}, fallback_time_zone_id, fallback_time_zone_source_slug,
       ${ts('fallback_time_zone_updated_at')}, fallback_birth_date::text, fallback_birth_date_source_slug, ${ts('fallback_birth_date_updated_at')},
       ingestion_start::text, ingestion_end::text, raw, ${ts('deleted_at')}
     FROM ${s}.users ORDER BY user_id::text`,
    sources: `SELECT user_id::text, slug, name, logo, ${ts('created_on')}, descriptor FROM ${s}.sources ORDER BY user_id::text, slug`,
    versions: `SELECT user_id::text, team_id::text, client_user_id, raw, ${ts('valid_from')}, ${ts('valid_to')}, end_cause
     FROM ${s}.user_history ORDER BY user_id::text, valid_from`,
    connections: `SELECT user_id::text, slug, ${ts('created_on')}, ${ts('connected_at')}, ${ts('disconnected_at')}, ended_by
     FROM ${s}.source_history ORDER BY user_id::text, slug, connected_at`,
  };
}

/** Canonical JSON: keys sorted at every level (jsonb keeps its own key order, the mirror the record's). */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v ?? null);
}

/** Per table: rows and a digest of them in order, each row canonical (raw parsed): equal tables, equal digests, at any size. */
export type Digests = Record<keyof typeof MIRROR_SQL, { rows: number; sha256: string }>;

function digester() {
  const h = createHash('sha256');
  let rows = 0;
  return {
    add(r: Row) {
      if ('raw' in r) r.raw = parse(r.raw);
      h.update(canonical(r)).update('\n');
      rows++;
    },
    done: () => ({ rows, sha256: h.digest('hex') }),
  };
}

export function mirrorDigests(db: Db): Digests {
  const out = {} as Digests;
  for (const table of Object.keys(MIRROR_SQL) as (keyof typeof MIRROR_SQL)[]) {
    const d = digester();
    for (const r of db.prepare(MIRROR_SQL[table]).iterate()) d.add(r as Row);
    out[table] = d.done();
  }
  return out;
}

/** The destination's digests, read through a cursor (a million rows never sit in memory). */
export async function destinationDigests(client: pg.ClientBase, schema: string): Promise<Digests> {
  const out = {} as Digests;
  const sql = destinationSql(schema);
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  try {
    for (const table of Object.keys(sql) as (keyof typeof MIRROR_SQL)[]) {
      const d = digester();
      await client.query(`DECLARE digest_rows NO SCROLL CURSOR FOR ${sql[table]}`);
      for (;;) {
        const page = await client.query<Row>('FETCH 5000 FROM digest_rows');
        for (const r of page.rows) d.add(r);
        if (page.rows.length < 5000) break;
      }
      await client.query('CLOSE digest_rows');
      out[table] = d.done();
    }
  } finally {
    await client.query('COMMIT');
  }
  return out;
}
