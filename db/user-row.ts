/**
 * How a user record becomes mirror rows: the column values of `users` and
 * `connected_sources`, and the content hash that tells a changed record from
 * an unchanged one, tagged with the mapping's version. The record's own
 * shape is ./mirrored-user.ts's. Pure: no I/O, no clock.
 */
import { hash } from 'node:crypto';
import type { ConnectedSource, MirroredUser, SourceDescriptor } from './mirrored-user.js';

/**
 * Bump when the mapping below changes, so that the next sync rewrites every
 * row (the stored hashes no longer match) instead of leaving old columns.
 */
// v2: offset-less date-times read as UTC; fields that break their rule are NULL (with a field_warnings row).
// v3: the hash and `raw` are the record's bytes as received, no longer JSON.stringify of the parsed record.
const ROW_FORMAT = 'v3';

/**
 * The `users` columns that come from the record itself, in the order the
 * writer binds them: the one list SQL and mapping are built from (the table
 * itself is migration 1's, which never changes).
 */
export const USER_COLUMNS = [
  'user_id',
  'team_id',
  'client_user_id',
  'created_on',
  'fallback_time_zone_id',
  'fallback_time_zone_source_slug',
  'fallback_time_zone_updated_at',
  'fallback_birth_date',
  'fallback_birth_date_source_slug',
  'fallback_birth_date_updated_at',
  'ingestion_start',
  'ingestion_end',
  'content_hash',
  'raw',
] as const;

type UserColumn = (typeof USER_COLUMNS)[number];
type Identity = 'user_id' | 'team_id' | 'client_user_id' | 'raw' | 'content_hash';

/** Column values of one `users` row that come from the record itself. */
export type UserRow = { [C in Identity]: string } & { [C in Exclude<UserColumn, Identity>]: string | null };

/**
 * A `users` row as it leaves the mirror (an export, db/export-reader.ts; a destination's snapshot,
 * db/sink-snapshot.ts): the record's columns and `raw` (not the content hash), and when the user was deleted.
 * What only an export reads is optional: the mirror's first and last sight, and the connected sources' slugs.
 */
export type UserRowOut = Omit<UserRow, 'content_hash'> & {
  /**
   * NULL while active. An export reads the row's own; a destination's snapshot the publish of the deletion
   * (the version it closed, so the time the deletion's event carries), or the row's own for one from before history.
   */
  deleted_at: string | null;
  first_seen_at?: string;
  last_seen_at?: string;
  /** Slugs joined by a unit separator (U+001F, db/export-reader.ts SLUG_SEPARATOR), sorted; null when none. */
  sources?: string | null;
};

/**
 * The record's top-level field each typed `users` column is mapped from (toUserRow), where every reader
 * outside the mirror means the same by it: a column leaves only when the field policy keeps its field.
 * Each reader adds its own keys (an export's client_user_id and sources, the PostgreSQL sink's team_id).
 */
export const RECORD_FIELD_OF: Readonly<Record<string, string>> = {
  created_on: 'created_on',
  fallback_time_zone_id: 'fallback_time_zone',
  fallback_time_zone_source_slug: 'fallback_time_zone',
  fallback_time_zone_updated_at: 'fallback_time_zone',
  fallback_birth_date: 'fallback_birth_date',
  fallback_birth_date_source_slug: 'fallback_birth_date',
  fallback_birth_date_updated_at: 'fallback_birth_date',
  ingestion_start: 'ingestion_start',
  ingestion_end: 'ingestion_end',
};

export const SOURCE_COLUMNS = ['user_id', 'slug', 'name', 'logo', 'created_on', 'descriptor'] as const;

export interface SourceRow {
  user_id: string;
  slug: string;
  name: string;
  logo: string | null;
  created_on: string | null;
  descriptor: 'provider' | 'source';
}

/** What the mirror holds for a user_id, as far as "must we write it?" needs. */
export interface LiveState {
  content_hash: string;
  deleted_at: string | null;
}

/** A record must be (re)written when it is new, changed, or comes back after a deletion. */
export function needsWrite(live: LiveState | undefined, hashOfRecord: string): boolean {
  return live === undefined || live.deleted_at !== null || live.content_hash !== hashOfRecord;
}

export function toUserRow(user: MirroredUser, rawJson: string, hashOfRecord: string): UserRow {
  const tz = user.fallback_time_zone ?? undefined;
  const birth = user.fallback_birth_date ?? undefined;
  return {
    user_id: user.user_id,
    team_id: user.team_id,
    client_user_id: user.client_user_id,
    created_on: toUtcTimestamp(user.created_on),
    fallback_time_zone_id: tz?.id ?? null,
    fallback_time_zone_source_slug: tz?.source_slug ?? null,
    fallback_time_zone_updated_at: toUtcTimestamp(tz?.updated_at),
    fallback_birth_date: birth?.value ?? null,
    fallback_birth_date_source_slug: birth?.source_slug ?? null,
    fallback_birth_date_updated_at: toUtcTimestamp(birth?.updated_at),
    ingestion_start: user.ingestion_start ?? null,
    ingestion_end: user.ingestion_end ?? null,
    raw: rawJson,
    content_hash: hashOfRecord,
  };
}

/**
 * One row per slug. `provider` is preferred over the deprecated `source`
 * (docs/service-notes.md). A slug listed twice keeps its first entry in list
 * order, so the same record always yields the same rows.
 */
export function toSourceRows(user: MirroredUser): SourceRow[] {
  const rows: SourceRow[] = [];
  const slugs = new Set<string>();
  for (const cs of user.connected_sources) {
    const picked = descriptorOf(cs);
    if (picked === undefined || slugs.has(picked.descriptor.slug)) continue;
    slugs.add(picked.descriptor.slug);
    rows.push({
      user_id: user.user_id,
      slug: picked.descriptor.slug,
      name: picked.descriptor.name,
      logo: picked.descriptor.logo ?? null,
      created_on: toUtcTimestamp(cs.created_on),
      descriptor: picked.from,
    });
  }
  return rows;
}

function descriptorOf(cs: ConnectedSource): { descriptor: SourceDescriptor; from: 'provider' | 'source' } | undefined {
  if (cs.provider !== undefined) return { descriptor: cs.provider, from: 'provider' };
  if (cs.source !== undefined) return { descriptor: cs.source, from: 'source' };
  return undefined;
}

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/i;

/**
 * `2022-08-04T12:42:45.596792+00:00` → `2022-08-04T12:42:45.596Z`. One fixed
 * width (milliseconds, truncated) so that text order is time order in SQL;
 * the exact upstream value stays in `raw`. A value without an offset is
 * UTC: the service states all its times are UTC (db/SCHEMA.md). Unparseable
 * input is kept as is rather than dropped (the wire schema has already
 * vouched for it).
 */
export function toUtcTimestamp(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return utcFastPath(value) ?? utcSlowPath(value);
}

/** The two shapes the service sends in UTC, by string surgery: this runs several times per record. */
function utcFastPath(v: string): string | undefined {
  if (v.length < 20 || v[10] !== 'T' || v[13] !== ':' || v[16] !== ':') return undefined;
  const utcTail = v.endsWith('Z') ? 1 : v.endsWith('+00:00') ? 6 : 0;
  if (utcTail === 0) return undefined;
  const head = v.slice(0, 19);
  const fraction = v.slice(19, v.length - utcTail);
  if (fraction === '') return `${head}.000Z`;
  if (!/^\.\d+$/.test(fraction)) return undefined;
  return `${head}${fraction.slice(0, 4).padEnd(4, '0')}Z`;
}

function utcSlowPath(value: string): string {
  const m = DATE_TIME.exec(value);
  if (m === null) return value;
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  const ms = Number((frac ?? '').padEnd(3, '0').slice(0, 3));
  const date = new Date(0);
  date.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  date.setUTCHours(Number(h), Number(mi), Number(s ?? '0'), ms);
  if (zone !== undefined && zone.toUpperCase() !== 'Z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    date.setTime(date.getTime() - sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2, 4) || '0')) * 60_000);
  }
  return Number.isNaN(date.getTime()) ? value : date.toISOString();
}

/** The tag every content hash of this ROW_FORMAT starts with. */
const HASH_PREFIX = `${ROW_FORMAT}:`;

/**
 * The content hash: how the sync tells a changed record from an unchanged
 * one without parsing it. Stored in `users.content_hash` and compared by the
 * run's ledger (src/sync/run-ledger.ts).
 *
 * SHA-256 (not a weaker hash) because with SHA extensions it is the fastest
 * digest node offers; collisions are not the concern, speed is: it runs for
 * every record of every sync. Over the record's UTF-8 bytes: the same digest
 * for the received bytes and for the string they decode to. The mapping's
 * version (ROW_FORMAT) tags the digest, so a new mapping makes every stored
 * hash differ and the next sync rewrites every row; the tag is prepended to
 * the digest, not to the input, so the (long) record is never copied.
 */
export function contentHash(record: string | Uint8Array): string {
  return `${HASH_PREFIX}${hash('sha256', record, 'base64url')}`;
}

/** SHA-256 in base64url, unpadded: ceil(256 / 6) characters. */
const DIGEST_CHARS = 43;

/**
 * A record's SHA-256 digest as node writes it in base64url: its content
 * hash without the tag. What the sync computes for every listed record and
 * its ledger fingerprints (a byte per character, four to a word: all 256
 * bits, no decoding); the few records it writes are stored with the tag
 * (contentHashOfDigest). A string, not a Buffer: node returns a digest as a
 * Buffer in 1.8 µs and as a string in 1.0 (an 800-byte record, measured).
 */
export type ContentDigest = string & { readonly contentDigest: unique symbol };

export function contentDigest(record: Uint8Array): ContentDigest {
  return hash('sha256', record, 'base64url') as ContentDigest;
}

/** The stored text of a digest: contentHash of the same record. */
export function contentHashOfDigest(digest: ContentDigest): string {
  return `${HASH_PREFIX}${digest}`;
}

/**
 * Where the digest starts in a stored content hash of this ROW_FORMAT, or
 * -1 for any other text (another format's hash: never the content of a
 * record listed now). An index, not a slice: the ledger reads every active
 * user's hash at the start of a run.
 */
export function digestStart(stored: string): number {
  return stored.length === HASH_PREFIX.length + DIGEST_CHARS && stored.startsWith(HASH_PREFIX) ? HASH_PREFIX.length : -1;
}
