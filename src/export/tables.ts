/**
 * The exported tables: their columns, each with one type (no unions: a
 * column holds its type or NULL, never a string in one row and a number in
 * the next), and how a mirror row becomes an exported row. Pure: no I/O.
 *
 * Types are the lake's, not SQLite's text: times are TIMESTAMP (UTC,
 * milliseconds), dates DATE, run ids and cursors INT64, flags BOOLEAN, the
 * record and the event body JSON (the text as the mirror holds it, carried
 * once: never a JSON string of JSON), a user's sources a LIST of slugs.
 */
import type { ExportChangeRow, ExportSourceRow, ExportVersionRow } from '../../db/export-reader.js';
import { SLUG_SEPARATOR } from '../../db/export-reader.js';
import { toUserRow, type UserRowOut } from '../../db/user-row.js';
import { parseUser } from '../service/user-record.js';

export const TABLES = ['users', 'versions', 'sources', 'changes'] as const;
export type TableName = (typeof TABLES)[number];

export type ColumnKind = 'string' | 'timestamp' | 'date' | 'int64' | 'boolean' | 'json' | 'list';

export interface Column {
  name: string;
  kind: ColumnKind;
  /** Never NULL. */
  required?: boolean;
}

/**
 * A value of an exported row: text, a time as epoch milliseconds, a date as
 * days since 1970-01-01, an integer, a flag, JSON text, a list of slugs, or
 * null. The writers (src/export/files.ts) give each its file's form.
 */
export type Cell = string | number | boolean | string[] | null;
export type ExportRecord = Record<string, Cell>;

/** Bump when a column is added, removed, renamed or retyped; the manifest carries it. */
export const EXPORT_LAYOUT_VERSION = 1;

const req = (name: string, kind: ColumnKind): Column => ({ name, kind, required: true });
const opt = (name: string, kind: ColumnKind): Column => ({ name, kind });

export const COLUMNS: Record<TableName, readonly Column[]> = {
  users: [
    req('user_id', 'string'),
    req('team_id', 'string'),
    req('client_user_id', 'string'),
    opt('created_on', 'timestamp'),
    opt('fallback_time_zone_id', 'string'),
    opt('fallback_time_zone_source_slug', 'string'),
    opt('fallback_time_zone_updated_at', 'timestamp'),
    opt('fallback_birth_date', 'date'),
    opt('fallback_birth_date_source_slug', 'string'),
    opt('fallback_birth_date_updated_at', 'timestamp'),
    opt('ingestion_start', 'date'),
    opt('ingestion_end', 'date'),
    opt('first_seen_at', 'timestamp'),
    opt('last_seen_at', 'timestamp'),
    opt('deleted_at', 'timestamp'),
    req('sources', 'list'),
    opt('raw', 'json'),
  ],
  versions: [
    opt('version_id', 'int64'),
    req('user_id', 'string'),
    req('team_id', 'string'),
    req('client_user_id', 'string'),
    req('valid_from', 'timestamp'),
    opt('valid_to', 'timestamp'),
    req('deleted', 'boolean'),
    opt('end_cause', 'string'),
    opt('opened_run', 'int64'),
    opt('closed_run', 'int64'),
    req('backfilled', 'boolean'),
    opt('raw', 'json'),
  ],
  sources: [
    opt('connection_id', 'int64'),
    req('user_id', 'string'),
    req('slug', 'string'),
    opt('created_on', 'timestamp'),
    req('connected_at', 'timestamp'),
    opt('disconnected_at', 'timestamp'),
    opt('ended_by', 'string'),
    opt('opened_run', 'int64'),
    opt('closed_run', 'int64'),
    req('backfilled', 'boolean'),
  ],
  changes: [
    req('cursor', 'int64'),
    req('event_id', 'string'),
    req('type', 'string'),
    opt('run_id', 'int64'),
    opt('user_id', 'string'),
    req('published_at', 'timestamp'),
    req('body', 'json'),
  ],
};

/**
 * A stored time (`YYYY-MM-DDTHH:MM:SS.sssZ`) as epoch milliseconds. The form the mirror writes is read by
 * its digits (Date.parse was a twentieth of an export's time); days past the 28th, years before 1000 and any other form
 * go through Date.parse, so an impossible date is NULL as before.
 */
export function instant(text: string | null): number | null {
  if (text === null) return null;
  if (text.length === 24 && text.charCodeAt(23) === 90 /* Z */ && text.charCodeAt(10) === 84 /* T */) {
    const y = digits(text, 0, 4);
    const mo = digits(text, 5, 2);
    const d = digits(text, 8, 2);
    const h = digits(text, 11, 2);
    const mi = digits(text, 14, 2);
    const s = digits(text, 17, 2);
    const ms = digits(text, 20, 3);
    const separators =
      text.charCodeAt(4) === 45 &&
      text.charCodeAt(7) === 45 &&
      text.charCodeAt(13) === 58 &&
      text.charCodeAt(16) === 58 &&
      text.charCodeAt(19) === 46;
    if (
      separators &&
      y >= 1000 &&
      mo >= 1 &&
      mo <= 12 &&
      d >= 1 &&
      d <= 28 &&
      h >= 0 &&
      h <= 23 &&
      mi >= 0 &&
      mi <= 59 &&
      s >= 0 &&
      s <= 59 &&
      ms >= 0
    )
      return Date.UTC(y, mo - 1, d, h, mi, s, ms);
  }
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : ms;
}

/** The decimal number of `n` ASCII digits at `at`, or -1 when one is not a digit. */
function digits(text: string, at: number, n: number): number {
  let v = 0;
  for (let i = at; i < at + n; i++) {
    const c = text.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

/** A stored date (`YYYY-MM-DD`) as days since 1970-01-01. */
export function day(text: string | null): number | null {
  if (text === null) return null;
  const ms = Date.parse(`${text}T00:00:00.000Z`);
  return Number.isNaN(ms) ? null : Math.round(ms / 86_400_000);
}

function slugs(joined: string | null): string[] {
  return joined === null || joined === '' ? [] : joined.split(SLUG_SEPARATOR);
}

export function userRecord(r: UserRowOut): ExportRecord {
  return {
    user_id: r.user_id,
    team_id: r.team_id,
    client_user_id: r.client_user_id,
    created_on: instant(r.created_on),
    fallback_time_zone_id: r.fallback_time_zone_id,
    fallback_time_zone_source_slug: r.fallback_time_zone_source_slug,
    fallback_time_zone_updated_at: instant(r.fallback_time_zone_updated_at),
    fallback_birth_date: day(r.fallback_birth_date),
    fallback_birth_date_source_slug: r.fallback_birth_date_source_slug,
    fallback_birth_date_updated_at: instant(r.fallback_birth_date_updated_at),
    ingestion_start: day(r.ingestion_start),
    ingestion_end: day(r.ingestion_end),
    first_seen_at: instant(r.first_seen_at ?? null),
    last_seen_at: instant(r.last_seen_at ?? null),
    deleted_at: instant(r.deleted_at),
    sources: slugs(r.sources ?? null),
    raw: r.raw,
  };
}

/**
 * A user as it was at an as-of time: the version current then, its mapped
 * columns read from the version's record as the sync maps them
 * (db/user-row.ts), the sources connected then. The mirror's own
 * bookkeeping (first/last seen, deleted) is not history's: NULL.
 */
export function userAsOfRecord(v: ExportVersionRow & { sources: string | null }): ExportRecord {
  let mapped: ReturnType<typeof toUserRow> | undefined;
  if (v.raw !== null) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(v.raw);
    } catch {
      parsed = undefined;
    }
    const user = parsed === undefined ? undefined : parseUser(parsed);
    if (user?.ok === true) mapped = toUserRow(user.user, v.raw, '');
  }
  return {
    user_id: v.user_id,
    team_id: v.team_id,
    client_user_id: v.client_user_id,
    created_on: instant(mapped?.created_on ?? null),
    fallback_time_zone_id: mapped?.fallback_time_zone_id ?? null,
    fallback_time_zone_source_slug: mapped?.fallback_time_zone_source_slug ?? null,
    fallback_time_zone_updated_at: instant(mapped?.fallback_time_zone_updated_at ?? null),
    fallback_birth_date: day(mapped?.fallback_birth_date ?? null),
    fallback_birth_date_source_slug: mapped?.fallback_birth_date_source_slug ?? null,
    fallback_birth_date_updated_at: instant(mapped?.fallback_birth_date_updated_at ?? null),
    ingestion_start: day(mapped?.ingestion_start ?? null),
    ingestion_end: day(mapped?.ingestion_end ?? null),
    first_seen_at: null,
    last_seen_at: null,
    deleted_at: null,
    sources: slugs(v.sources),
    raw: v.raw,
  };
}

/** A version; with `asOf`, an end later than it is not yet known then, so the version is open. */
export function versionRecord(v: ExportVersionRow, asOf?: string): ExportRecord {
  const ended = v.valid_to !== null && (asOf === undefined || v.valid_to <= asOf);
  return {
    version_id: v.id,
    user_id: v.user_id,
    team_id: v.team_id,
    client_user_id: v.client_user_id,
    valid_from: instant(v.valid_from),
    valid_to: ended ? instant(v.valid_to) : null,
    deleted: ended && v.ended_in_deletion === 1,
    end_cause: ended ? v.end_cause : null,
    opened_run: v.opened_run,
    closed_run: ended ? v.closed_run : null,
    backfilled: v.backfilled === 1,
    raw: v.raw,
  };
}

export function sourceRecord(s: ExportSourceRow, asOf?: string): ExportRecord {
  const ended = s.disconnected_at !== null && (asOf === undefined || s.disconnected_at <= asOf);
  return {
    connection_id: s.id,
    user_id: s.user_id,
    slug: s.slug,
    created_on: instant(s.created_on),
    connected_at: instant(s.connected_at),
    disconnected_at: ended ? instant(s.disconnected_at) : null,
    ended_by: ended ? s.ended_by : null,
    opened_run: s.opened_run,
    closed_run: ended ? s.closed_run : null,
    backfilled: s.backfilled === 1,
  };
}

/** The event id is the body's own (`evt_<epoch>_<cursor>`); read from its first bytes, not by parsing the body. */
export function changeRecord(c: ExportChangeRow, epoch: string | null): ExportRecord {
  const id = /^\{"id":"([^"]+)"/.exec(c.body)?.[1] ?? `evt_${epoch ?? '0'}_${c.cursor}`;
  return {
    cursor: c.cursor,
    event_id: id,
    type: c.type,
    run_id: c.run_id,
    user_id: c.user_id,
    published_at: instant(c.at),
    body: c.body,
  };
}
