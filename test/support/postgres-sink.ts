/**
 * For the PostgreSQL sink's tests: a sink pass as a child process (the
 * built src/sinks/postgres/main.js), and the four tables and the position
 * read from both sides in one comparable form (the mirror's rows and the
 * destination's, timestamps as the mirror's ISO text, records parsed).
 */
import { spawn, type ChildProcess } from 'node:child_process';
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
  const users = db
    .prepare(
      `SELECT u.user_id, u.team_id, u.client_user_id, u.created_on, u.fallback_time_zone_id, u.fallback_time_zone_source_slug,
         u.fallback_time_zone_updated_at, u.fallback_birth_date, u.fallback_birth_date_source_slug, u.fallback_birth_date_updated_at,
         u.ingestion_start, u.ingestion_end, u.raw,
         -- The deletion's publish: the timestamp of the user's last user.deleted event.
         CASE WHEN u.deleted_at IS NULL THEN NULL ELSE
           (SELECT max(e.at) FROM change_events AS e WHERE e.user_id = u.user_id AND e.type = 'user.deleted') END AS deleted_at
       FROM users AS u ORDER BY u.user_id`,
    )
    .all() as Row[];
  const sources = db
    .prepare(`SELECT user_id, slug, name, logo, created_on, descriptor FROM connected_sources ORDER BY user_id, slug`)
    .all() as Row[];
  const versions = db
    .prepare(`SELECT user_id, team_id, client_user_id, raw, valid_from, valid_to, end_cause FROM user_history ORDER BY user_id, valid_from`)
    .all() as Row[];
  const connections = db
    .prepare(
      `SELECT user_id, slug, created_on, connected_at, disconnected_at, ended_by FROM source_history ORDER BY user_id, slug, connected_at`,
    )
    .all() as Row[];
  const cursor = db.prepare(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'change_events'), 0)`).pluck().get() as number;
  const epoch = db.prepare(`SELECT epoch FROM change_feed`).pluck().get() as string;
  for (const r of [...users, ...versions]) r.raw = parse(r.raw);
  return { users, sources, versions, connections, position: { cursor, epoch } };
}

const ts = (c: string) => `to_char(${c} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${c}`;

/** The destination's tables in `schema`, in the mirror's form. */
export async function destinationTables(client: pg.ClientBase, schema: string): Promise<Tables> {
  const s = `"${schema}"`;
  const rows = async (sql: string) => (await client.query<Row>(sql)).rows;
  const users = await rows(
    `SELECT user_id::text, team_id::text, client_user_id, ${ts('created_on')}, fallback_time_zone_id, fallback_time_zone_source_slug,
       ${ts('fallback_time_zone_updated_at')}, fallback_birth_date::text, fallback_birth_date_source_slug, ${ts('fallback_birth_date_updated_at')},
       ingestion_start::text, ingestion_end::text, raw, ${ts('deleted_at')}
     FROM ${s}.users ORDER BY user_id::text`,
  );
  const sources = await rows(
    `SELECT user_id::text, slug, name, logo, ${ts('created_on')}, descriptor FROM ${s}.sources ORDER BY user_id::text, slug`,
  );
  const versions = await rows(
    `SELECT user_id::text, team_id::text, client_user_id, raw, ${ts('valid_from')}, ${ts('valid_to')}, end_cause
     FROM ${s}.user_history ORDER BY user_id::text, valid_from`,
  );
  const connections = await rows(
    `SELECT user_id::text, slug, ${ts('created_on')}, ${ts('connected_at')}, ${ts('disconnected_at')}, ended_by
     FROM ${s}.source_history ORDER BY user_id::text, slug, connected_at`,
  );
  const p = (await rows(`SELECT cursor, epoch FROM ${s}.sink_position`))[0] ?? {};
  return { users, sources, versions, connections, position: { cursor: Number(p.cursor), epoch: String(p.epoch) } };
}
