/**
 * The PostgreSQL sink's decisions, pure: which column values a user, a
 * source, a version and a connection take in the destination under the
 * field policy, what a feed event asks of the destination, how a batch of
 * events is cut into waves that set-based statements can apply, and how a
 * row is written in COPY's text format. The I/O is ./destination.ts's.
 *
 * The policy is applied to every value that leaves: a field the policy
 * drops has its typed columns NULL and is absent from `raw`; the
 * client_user_id is passed, HMAC'd or NULL in `users` and `versions` alike;
 * a policy that drops `connected_sources` leaves `sources` and
 * `source_history` empty.
 */
import { ChangeEventSchema } from '../../../db/change-event.js';
import type { MirrorSnapshot, SnapshotConnection, SnapshotSource, SnapshotVersion } from '../../../db/sink-snapshot.js';
import {
  RECORD_FIELD_OF,
  SOURCE_COLUMNS,
  USER_COLUMNS as MIRROR_USER_COLUMNS,
  toSourceRows,
  toUserRow,
  type UserRowOut,
} from '../../../db/user-row.js';
import { parseUser } from '../../service/user-record.js';
import type { FieldPolicy } from '../field-policy.js';
import type { TableName } from './schema.js';

/** `users` columns in load order: the mirror's (db/user-row.ts) but its content hash, and when the user was deleted. */
type UserColumn = Exclude<(typeof MIRROR_USER_COLUMNS)[number], 'content_hash'> | 'deleted_at';
export const USER_COLUMNS: readonly UserColumn[] = [
  ...MIRROR_USER_COLUMNS.filter((c): c is Exclude<typeof c, 'content_hash'> => c !== 'content_hash'),
  'deleted_at',
];
const VERSION_COLUMNS = ['user_id', 'team_id', 'client_user_id', 'raw', 'valid_from', 'valid_to', 'end_cause'] as const;
const CONNECTION_COLUMNS = ['user_id', 'slug', 'created_on', 'connected_at', 'disconnected_at', 'ended_by'] as const;

export type Values = (string | null)[];

/** The top-level record field each typed column comes from: the column leaves only when the policy keeps the field. */
const FIELD_OF: Readonly<Record<string, string>> = { team_id: 'team_id', ...RECORD_FIELD_OF };

/** The record as it may leave: the mirror's bytes when the policy passes everything, else the policy's copy. */
function rawFor(raw: string, policy: FieldPolicy): string {
  if (policy.passesAll) return raw;
  const parsed: unknown = JSON.parse(raw);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return raw;
  return JSON.stringify(policy.applyToUser(parsed as Record<string, unknown>));
}

/** A `users` row's values in USER_COLUMNS order. `user_id` always leaves: it is the key every table joins on. */
export function userValues(u: UserRowOut, policy: FieldPolicy): Values {
  return USER_COLUMNS.map((c) => {
    if (c === 'user_id' || c === 'deleted_at') return u[c];
    if (c === 'client_user_id') return policy.clientUserId(u.client_user_id) ?? null;
    if (c === 'raw') return rawFor(u.raw, policy);
    const field = FIELD_OF[c];
    return field === undefined || policy.keeps(field) ? u[c] : null;
  });
}

function sourceValues(s: SnapshotSource, policy: FieldPolicy): Values | undefined {
  if (!policy.keeps('connected_sources')) return undefined;
  return SOURCE_COLUMNS.map((c) => s[c]);
}

function versionValues(v: SnapshotVersion, policy: FieldPolicy): Values {
  return [
    v.user_id,
    policy.keeps('team_id') ? v.team_id : null,
    policy.clientUserId(v.client_user_id) ?? null,
    // An open version's record is the users row's (the view user_history joins it): no second copy.
    v.raw === null || v.valid_to === null ? null : rawFor(v.raw, policy),
    v.valid_from,
    v.valid_to,
    v.end_cause,
  ];
}

function connectionValues(c: SnapshotConnection, policy: FieldPolicy): Values | undefined {
  if (!policy.keeps('connected_sources')) return undefined;
  return CONNECTION_COLUMNS.map((k) => c[k]);
}

/** A loaded table: its columns, and its rows from the snapshot under the policy (undefined: a row that does not leave). */
export interface TableLoad {
  table: TableName;
  columns: readonly string[];
  rows: () => Iterable<Values | undefined>;
}

/** The snapshot's four tables as the destination loads them, in load order; read one to its end before the next. */
export function snapshotTables(snapshot: MirrorSnapshot, policy: FieldPolicy): TableLoad[] {
  return [
    { table: 'users', columns: USER_COLUMNS, rows: () => mapRows(snapshot.users(), (u) => userValues(u, policy)) },
    { table: 'sources', columns: SOURCE_COLUMNS, rows: () => mapRows(snapshot.sources(), (r) => sourceValues(r, policy)) },
    { table: 'versions', columns: VERSION_COLUMNS, rows: () => mapRows(snapshot.versions(), (v) => versionValues(v, policy)) },
    {
      table: 'source_history',
      columns: CONNECTION_COLUMNS,
      rows: () => mapRows(snapshot.connections(), (c) => connectionValues(c, policy)),
    },
  ];
}

function* mapRows<T>(rows: Iterable<T>, f: (row: T) => Values | undefined): Generator<Values | undefined> {
  for (const r of rows) yield f(r);
}

/** What one feed event asks of the destination. */
export type Change =
  | {
      kind: 'upsert';
      cursor: number;
      at: string;
      userId: string;
      /** USER_COLUMNS values (deleted_at NULL). */
      user: Values;
      /** SOURCE_COLUMNS values of the user's sources now. */
      sources: Values[];
    }
  | { kind: 'delete'; cursor: number; at: string; userId: string; cause: 'verified' | 'superseded' }
  /** The feed restarted under the destination: a first sync into the mirror it baselined empty, or a restore. */
  | { kind: 'rebaseline'; cursor: number; why: string };

/** A stored event's body as the destination applies it. The body is the mirror's own, validated all the same. */
export function changeOfEvent(body: string, policy: FieldPolicy): Change {
  const event = ChangeEventSchema.parse(JSON.parse(body));
  const { cursor, timestamp: at } = event;
  switch (event.type) {
    case 'mirror.baseline':
      return { kind: 'rebaseline', cursor, why: 'the mirror had its first sync after the destination was loaded' };
    case 'mirror.restored':
      return { kind: 'rebaseline', cursor, why: 'the mirror was restored from a backup' };
    case 'user.deleted':
      return { kind: 'delete', cursor, at, userId: event.data.user_id, cause: event.data.reason };
    default: {
      const parsed = parseUser(event.data.user);
      if (!parsed.ok) throw new Error(`event ${event.id}: its record is not a user: ${parsed.issues}`);
      const row = toUserRow(parsed.user, JSON.stringify(event.data.user), '');
      const user = userValues({ ...row, raw: JSON.stringify(event.data.user), deleted_at: null }, policy);
      const sources = toSourceRows(parsed.user).flatMap((s) => {
        const v = sourceValues(s, policy);
        return v === undefined ? [] : [v];
      });
      return { kind: 'upsert', cursor, at, userId: parsed.user.user_id, user, sources: policy.keeps('connected_sources') ? sources : [] };
    }
  }
}

type UserChange = Exclude<Change, { kind: 'rebaseline' }>;

/**
 * Cuts changes into waves in which no user appears twice, keeping each
 * user's changes in feed order (its n-th change is in wave n). A wave is
 * applied with set-based statements; users are independent of each other
 * (no constraint spans two users), so reordering across users changes
 * nothing. A batch of one run has one change per user: one wave.
 */
export function waves(changes: readonly UserChange[]): UserChange[][] {
  const seen = new Map<string, number>();
  const out: UserChange[][] = [];
  for (const c of changes) {
    const n = seen.get(c.userId) ?? 0;
    seen.set(c.userId, n + 1);
    (out[n] ??= []).push(c);
  }
  return out;
}

// COPY's text format: a tab between values, \N for NULL, a newline after the row; backslash, tab, newline and CR escaped.
const NEEDS_ESCAPE = /[\\\t\n\r]/;

export function copyLine(values: readonly (string | null)[]): string {
  let line = '';
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (i > 0) line += '\t';
    if (v === null || v === undefined) line += '\\N';
    else line += NEEDS_ESCAPE.test(v) ? v.replace(/[\\\t\n\r]/g, escapeChar) : v;
  }
  return line + '\n';
}

function escapeChar(c: string): string {
  return c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r';
}
