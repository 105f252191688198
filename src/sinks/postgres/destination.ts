/**
 * The PostgreSQL destination: loads a mirror snapshot by COPY (baseline),
 * applies batches of feed events (applyBatch) and says where it stands
 * (readPosition). Every write is one transaction together with the
 * position it reaches, so a process killed at any point leaves the
 * destination at the previous position, whole: nothing applied twice,
 * nothing lost, no half-loaded table visible.
 *
 * - A baseline TRUNCATEs the tables, drops their indexes, COPYs the
 *   snapshot in, builds the indexes and records the snapshot's cursor, all
 *   in one transaction. Readers see the previous contents until the COMMIT
 *   (they wait on the tables' lock meanwhile, then read the new ones); a
 *   kill rolls all of it back, indexes included, and the next run starts
 *   it again. No staging copy stays behind: the tables are the load.
 * - A batch first locks the position row and checks it is the one the
 *   batch follows (two appliers of one schema cannot both apply it), then
 *   applies its changes wave by wave (./rows.ts `waves`), then moves the
 *   position, and commits.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { FeedPosition, MirrorSnapshot } from '../../../db/sink-snapshot.js';
import type { FieldPolicy } from '../field-policy.js';
import { SOURCE_COLUMNS } from '../../../db/user-row.js';
import { changeOfEvent, copyLine, snapshotTables, USER_COLUMNS, waves, type Change, type Values } from './rows.js';
import { INDEXES, prepareSchema, q, TABLES, type TableName } from './schema.js';

/** Where the destination stands: the feed it follows and the last event applied. */
export interface DestinationPosition {
  cursor: number;
  epoch: string;
  /** The field policy's `name:fingerprint` the rows were written under. */
  fieldPolicy: string;
  completeSince: string | null;
  baselineAt: string;
  appliedAt: string;
}

/** A feed event as the destination takes it: its cursor and its stored body. */
export interface FeedEventBody {
  cursor: number;
  body: string;
}

class PositionMovedError extends Error {
  constructor(expected: string, found: string) {
    super(`the destination's position moved under this batch (expected ${expected}, found ${found}): another writer applies this schema`);
    this.name = 'PositionMovedError';
  }
}

/** The rows a baseline loaded, per table. */
export type BaselineCounts = Record<TableName, number>;

/** PostgreSQL types of the columns that are not text: how a text value is cast in a statement. */
const TYPES: Readonly<Record<string, string>> = {
  user_id: 'uuid',
  team_id: 'uuid',
  created_on: 'timestamptz',
  fallback_time_zone_updated_at: 'timestamptz',
  fallback_birth_date: 'date',
  fallback_birth_date_updated_at: 'timestamptz',
  ingestion_start: 'date',
  ingestion_end: 'date',
  raw: 'jsonb',
  deleted_at: 'timestamptz',
  valid_from: 'timestamptz',
  valid_to: 'timestamptz',
  connected_at: 'timestamptz',
  disconnected_at: 'timestamptz',
};
const cast = (col: string, expr = col): string => (TYPES[col] === undefined ? expr : `${expr}::${TYPES[col]}`);

/** COPY input: rows in COPY's text format, ~64 KiB a chunk. */
function* copyChunks(rows: Iterable<Values | undefined>, count: { n: number }): Generator<string> {
  let chunk = '';
  for (const v of rows) {
    if (v === undefined) continue;
    chunk += copyLine(v);
    count.n++;
    if (chunk.length >= 65_536) {
      yield chunk;
      chunk = '';
    }
  }
  if (chunk !== '') yield chunk;
}

export class PostgresDestination {
  private readonly s: string;

  constructor(
    private readonly client: pg.ClientBase,
    readonly schema: string,
    private readonly policy: FieldPolicy,
  ) {
    this.s = q(schema);
  }

  /** Creates or migrates the schema (refusing a newer one): call once per connection, before anything else. */
  async ensureSchema(): Promise<void> {
    await prepareSchema(this.client, this.schema);
  }

  /** The position, or undefined before the first baseline committed. */
  async readPosition(): Promise<DestinationPosition | undefined> {
    const r = await this.client.query<{
      cursor: string | null;
      epoch: string | null;
      field_policy: string | null;
      complete_since: Date | null;
      baseline_at: Date | null;
      applied_at: Date | null;
    }>(`SELECT cursor, epoch, field_policy, complete_since, baseline_at, applied_at FROM ${this.s}.sink_position WHERE id = 1`);
    const row = r.rows[0];
    if (row === undefined || row.cursor === null || row.epoch === null || row.baseline_at === null) return undefined;
    return {
      cursor: Number(row.cursor),
      epoch: row.epoch,
      fieldPolicy: row.field_policy ?? '',
      completeSince: row.complete_since?.toISOString() ?? null,
      baselineAt: row.baseline_at.toISOString(),
      appliedAt: (row.applied_at ?? row.baseline_at).toISOString(),
    };
  }

  /** Replaces the tables' contents by the snapshot's and takes its position, in one transaction. */
  async baseline(snapshot: MirrorSnapshot): Promise<BaselineCounts> {
    const { s, policy } = this;
    const counts: BaselineCounts = { users: 0, sources: 0, versions: 0, source_history: 0 };
    await this.client.query('BEGIN');
    try {
      await this.client.query(`SELECT 1 FROM ${s}.sink_position WHERE id = 1 FOR UPDATE`);
      await this.client.query(`TRUNCATE ${TABLES.map((t) => `${s}.${t}`).join(', ')}`);
      for (const i of INDEXES) await this.client.query(i.drop(s));
      const load = async (table: TableName, columns: readonly string[], rows: Iterable<Values | undefined>) => {
        const count = { n: 0 };
        await pipeline(
          Readable.from(copyChunks(rows, count)),
          this.client.query(copyFrom(`COPY ${s}.${table} (${columns.join(', ')}) FROM STDIN`)),
        );
        counts[table] = count.n;
      };
      // One table at a time: the snapshot's iterators share its one connection.
      for (const { table, columns, rows } of snapshotTables(snapshot, policy)) await load(table, columns, rows());
      for (const i of INDEXES) await this.client.query(i.create(s));
      const p = snapshot.position;
      await this.client.query(
        `UPDATE ${s}.sink_position SET epoch = $1, cursor = $2, field_policy = $3, complete_since = $4,
           baseline_at = now(), applied_at = now() WHERE id = 1`,
        [p.epoch, p.cursor, policy.id, p.completeSince],
      );
      await this.client.query('COMMIT');
    } catch (err) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
    // Fresh statistics for the analysts' planner: the load replaced every row.
    await this.client.query(`ANALYZE ${TABLES.map((t) => `${s}.${t}`).join(', ')}`);
    return counts;
  }

  /**
   * Applies `events` (the feed after `after.cursor`, in order, none of them
   * mirror.* events: ./rows.ts `changeOfEvent` says which ask for a
   * rebaseline, and the caller stops before them) and moves the position to
   * `to`, in one transaction. Returns the changes applied.
   */
  async applyBatch(events: readonly FeedEventBody[], after: { cursor: number; epoch: string }, to: FeedPosition): Promise<number> {
    const changes = events.map((e) => changeOfEvent(e.body, this.policy));
    const rebaseline = changes.find((c) => c.kind === 'rebaseline');
    if (rebaseline !== undefined) throw new Error(`event ${rebaseline.cursor} asks for a rebaseline: ${rebaseline.why}`);
    const userChanges = changes as Exclude<Change, { kind: 'rebaseline' }>[];
    const { s } = this;
    await this.client.query('BEGIN');
    try {
      const at = await this.client.query<{ cursor: string | null; epoch: string | null }>(
        `SELECT cursor, epoch FROM ${s}.sink_position WHERE id = 1 FOR UPDATE`,
      );
      const found = at.rows[0];
      if (found === undefined || Number(found.cursor) !== after.cursor || found.epoch !== after.epoch)
        throw new PositionMovedError(`${after.epoch}:${after.cursor}`, `${found?.epoch ?? 'none'}:${found?.cursor ?? 'none'}`);
      for (const wave of waves(userChanges)) await this.applyWave(wave);
      await this.client.query(`UPDATE ${s}.sink_position SET cursor = $1, complete_since = $2, applied_at = now() WHERE id = 1`, [
        to.cursor,
        to.completeSince,
      ]);
      await this.client.query('COMMIT');
    } catch (err) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
    return userChanges.length;
  }

  /** One wave (no user twice), in the mirror's own order (db/history.ts): versions close, rows change, versions open, connections. */
  private async applyWave(wave: readonly Exclude<Change, { kind: 'rebaseline' }>[]): Promise<void> {
    const { s } = this;
    const ups = wave.filter((c) => c.kind === 'upsert');
    const dels = wave.filter((c) => c.kind === 'delete');
    const all = { ids: wave.map((c) => c.userId), at: wave.map((c) => c.at) };
    const query = (sql: string, params: unknown[]) => this.client.query(sql, params);

    await query(
      // The closing version keeps its record: the users row's, still the one before this change.
      `UPDATE ${s}.versions AS v SET valid_to = w.at::timestamptz, end_cause = w.cause,
         raw = coalesce(v.raw, (SELECT u.raw FROM ${s}.users AS u WHERE u.user_id = v.user_id))
       FROM unnest($1::text[], $2::text[], $3::text[]) AS w(user_id, at, cause)
       WHERE v.user_id = w.user_id::uuid AND v.valid_to IS NULL`,
      [all.ids, all.at, wave.map((c) => (c.kind === 'delete' ? c.cause : 'updated'))],
    );
    if (ups.length > 0) {
      const cols = USER_COLUMNS.filter((c) => c !== 'deleted_at');
      const arrays = cols.map((_, i) => ups.map((c) => c.user[i] ?? null));
      await query(
        `INSERT INTO ${s}.users (${cols.join(', ')}, deleted_at)
         SELECT ${cols.map((c) => cast(c, `w.${c}`)).join(', ')}, NULL
         FROM unnest(${cols.map((_, i) => `$${i + 1}::text[]`).join(', ')}) AS w(${cols.join(', ')})
         ON CONFLICT (user_id) DO UPDATE SET ${cols
           .filter((c) => c !== 'user_id')
           .map((c) => `${c} = excluded.${c}`)
           .join(', ')}, deleted_at = NULL`,
        arrays,
      );
      await query(`DELETE FROM ${s}.sources WHERE user_id = ANY($1::uuid[])`, [ups.map((c) => c.userId)]);
      const sources = ups.flatMap((c) => c.sources);
      if (sources.length > 0)
        await query(
          `INSERT INTO ${s}.sources (${SOURCE_COLUMNS.join(', ')})
           SELECT ${SOURCE_COLUMNS.map((c) => cast(c, `w.${c}`)).join(', ')}
           FROM unnest(${SOURCE_COLUMNS.map((_, i) => `$${i + 1}::text[]`).join(', ')}) AS w(${SOURCE_COLUMNS.join(', ')})`,
          SOURCE_COLUMNS.map((_, i) => sources.map((r) => r[i] ?? null)),
        );
      const col = (name: (typeof USER_COLUMNS)[number]) => USER_COLUMNS.indexOf(name);
      await query(
        `INSERT INTO ${s}.versions (user_id, team_id, client_user_id, valid_from)
         SELECT w.user_id::uuid, w.team_id::uuid, w.client_user_id, w.at::timestamptz
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS w(user_id, team_id, client_user_id, at)`,
        [
          ups.map((c) => c.userId),
          ups.map((c) => c.user[col('team_id')] ?? null),
          ups.map((c) => c.user[col('client_user_id')] ?? null),
          ups.map((c) => c.at),
        ],
      );
    }
    if (dels.length > 0)
      await query(
        `UPDATE ${s}.users AS u SET deleted_at = w.at::timestamptz FROM unnest($1::text[], $2::text[]) AS w(user_id, at)
         WHERE u.user_id = w.user_id::uuid`,
        [dels.map((c) => c.userId), dels.map((c) => c.at)],
      );
    // Connections: a deleted user's all close; a listed one's close when no longer listed with the same upstream created_on.
    await query(
      `UPDATE ${s}.source_history AS h SET disconnected_at = w.at::timestamptz,
         ended_by = CASE WHEN w.deleted THEN 'user_deleted' ELSE 'disconnected' END
       FROM unnest($1::text[], $2::text[], $3::boolean[]) AS w(user_id, at, deleted)
       WHERE h.user_id = w.user_id::uuid AND h.disconnected_at IS NULL
         AND (w.deleted OR NOT EXISTS (SELECT 1 FROM ${s}.sources AS c
           WHERE c.user_id = h.user_id AND c.slug = h.slug AND c.created_on IS NOT DISTINCT FROM h.created_on))`,
      [all.ids, all.at, wave.map((c) => c.kind === 'delete')],
    );
    if (ups.length > 0)
      await query(
        `INSERT INTO ${s}.source_history (user_id, slug, created_on, connected_at)
         SELECT c.user_id, c.slug, c.created_on, w.at::timestamptz
         FROM unnest($1::text[], $2::text[]) AS w(user_id, at) JOIN ${s}.sources AS c ON c.user_id = w.user_id::uuid
         WHERE NOT EXISTS (SELECT 1 FROM ${s}.source_history AS h WHERE h.user_id = c.user_id AND h.slug = c.slug AND h.disconnected_at IS NULL)
         ORDER BY c.user_id, c.slug`,
        [ups.map((c) => c.userId), ups.map((c) => c.at)],
      );
  }
}
