/**
 * Decodes one fetched page, as bytes cut into records, into what the run
 * writer stages and what it sets aside, one record at a time as the writer
 * stores them (`pageWrites`).
 * Each record's bytes are hashed and shown to the run's ledger (`sight`)
 * before anything else: a record whose bytes are
 * those of the stored user is never decoded, parsed or validated (it passed
 * validation when it was stored; ROW_FORMAT in db/user-row.ts covers rule
 * changes). Only new and changed records are parsed, and a repeat listing
 * (the directory moved under the scan) even when it matches the mirror: the
 * earlier listing is already written into the run, and this one restores
 * the user as it was. The bytes as received
 * are what the mirror keeps in `raw`, so nothing is serialised again.
 *
 * A record larger than `maxRecordBytes` (SYNC_MAX_RECORD_BYTES) is set aside,
 * valid or not, with only its ids kept: one runaway field must not put
 * megabytes into `users.raw` or `rejected_records.raw`. Setting it aside
 * rather than failing the page keeps the other users of the page current,
 * and a rejected record with a readable user_id still counts as seen, so the
 * user keeps the row it had and is never a deletion candidate. A record that
 * is not valid JSON on its own is set aside the same way.
 */
import type { MirroredUser, StagedRecord } from '../../db/mirrored-user.js';
import { contentDigest, contentHashOfDigest, type ContentDigest } from '../../db/user-row.js';
import type { RecordSpan } from '../service/page-spans.js';
import type { User } from '../service/schemas.js';
import { parseUserRecord, type ReceivedUser } from '../service/user-record.js';
import type { Sighting } from './run-ledger.js';
import type { DriftTally } from './drift-tally.js';
import type { UserWrite } from '../../db/user-writes.js';
import { isRecord } from '../runtime/is-record.js';

/** Holds when T is assignable to U; otherwise `tsc` fails where it is used. */
type Assignable<T extends U, U> = T;
/**
 * The wire and the store state their record shapes each on its own (neither
 * imports the other); the sync hands the one to the other, so these lines
 * fail `tsc` here when the service's parsed User and db's MirroredUser, or a
 * received record and a staged one, drift apart.
 */
type _ParsedUserIsMirrored = Assignable<User, MirroredUser>;
type _ReceivedUserIsStaged = Assignable<ReceivedUser, StagedRecord<User>>;

/** A page's bytes and each record's byte range in them (the client's RecordPage is one). */
export interface PageBytes {
  body: Buffer;
  spans: readonly RecordSpan[];
}

export interface RejectedRecordInput {
  offset: number;
  index: number;
  reason: string;
  raw: unknown;
}

/** What a page took besides its writes: the records set aside, and counts. */
export interface PageTally {
  rejected: RejectedRecordInput[];
  /** Records listed and readable: every record but the rejected ones. */
  seen: number;
  /** Of the writes, those that change the mirror (a repeat listing equal to the run's start does not). */
  changed: number;
  /** Records whose user_id was already listed in this run, this page included: drift. */
  duplicates: number;
  /** Where the warnings and unknown keys of the records written are counted: the run's (./drift-tally.ts). */
  schemaDrift?: DriftTally;
}

export type Sight = (userId: string, digest: ContentDigest) => Sighting;

export const DEFAULT_MAX_RECORD_BYTES = 1024 * 1024;

/** Longest id kept from an oversized record; real ids are UUIDs and short client ids. */
const MAX_KEPT_ID = 256;

export function emptyTally(): PageTally {
  return { rejected: [], seen: 0, changed: 0, duplicates: 0 };
}

/**
 * The page's writes, one record at a time, as the consumer asks for them,
 * counting into `tally`: a writer that stores each before it asks for the
 * next keeps one record in memory, not the page (500 parsed records alive at
 * once outlived the young generation's collections and were copied into the
 * old one: a first sync spent 16% of its time in the GC).
 */
export function* pageWrites(
  page: PageBytes,
  offset: number,
  sight: Sight,
  tally: PageTally,
  maxRecordBytes: number = DEFAULT_MAX_RECORD_BYTES,
): Generator<UserWrite> {
  const { spans, body } = page;
  for (let index = 0; index < spans.length; index++) {
    const span = spans[index];
    if (span === undefined) continue;
    const write = listRecord(body, span, index, offset, sight, maxRecordBytes, tally);
    if (write !== undefined) yield write;
  }
}

function listRecord(
  body: Buffer,
  span: RecordSpan,
  index: number,
  offset: number,
  sight: Sight,
  max: number,
  out: PageTally,
): UserWrite | undefined {
  const bytes = span.end - span.start;
  if (bytes > max) {
    const reason = `users[${index}]: record is ${bytes} bytes, above SYNC_MAX_RECORD_BYTES (${max}); not stored`;
    out.rejected.push({ offset, index, reason, raw: idsOf(jsonOrUndefined(body.toString('utf8', span.start, span.end))) });
    return undefined;
  }
  const digest = contentDigest(body.subarray(span.start, span.end));
  let sighting = span.userId === undefined ? undefined : sight(span.userId, digest);
  if (sighting === 'unchanged') {
    out.seen++;
    return undefined;
  }
  const rawJson = body.toString('utf8', span.start, span.end);
  const raw = jsonOrUndefined(rawJson);
  if (raw === undefined) {
    out.rejected.push({
      offset,
      index,
      reason: `users[${index}]: record is not valid JSON`,
      raw: span.userId === undefined ? {} : { user_id: span.userId },
    });
    return undefined;
  }
  const parsed = parseUserRecord(raw, index);
  if (!parsed.ok) {
    out.rejected.push({ offset, index, reason: parsed.reason, raw: parsed.raw });
    return undefined;
  }
  sighting ??= sight(parsed.user.user_id, digest);
  out.seen++;
  const repeat = sighting === 'repeat-write' || sighting === 'repeat-unchanged';
  if (repeat) out.duplicates++;
  if (sighting === 'unchanged') return undefined;
  out.schemaDrift?.addRecord(raw, parsed.warnings);
  const sameAsStart = sighting === 'repeat-unchanged';
  if (!sameAsStart) out.changed++;
  return { record: { user: parsed.user, rawJson, warnings: parsed.warnings }, digest: contentHashOfDigest(digest), repeat, sameAsStart };
}

function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function idsOf(raw: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!isRecord(raw)) return out;
  for (const key of ['user_id', 'client_user_id']) {
    const value = raw[key];
    if (typeof value === 'string' && value.length <= MAX_KEPT_ID) out[key] = value;
  }
  return out;
}
