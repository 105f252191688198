/**
 * A change event: its shape, the one every surface carries (feed pages,
 * `changes --json` lines, webhook bodies), and how a change of the mirror
 * becomes one. Pure: no I/O. The feed that stores them is change-feed.ts;
 * docs/change-event.schema.json is rendered from ChangeEventSchema and
 * docs/changes.md explains it.
 *
 * - `created` with the user deleted before the change is `user.restored`.
 * - `updated` names the top-level fields whose value changed (structurally:
 *   key order inside is not a change), their values before (`previous`, from
 *   the user's state before the run: its last version) and the
 *   connected-source slugs gained and lost; `deleted` says whether the service confirmed it or a newer
 *   record took the user's key.
 * - The record is embedded as the bytes the mirror holds, never re-serialised.
 */
import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';

export const CHANGE_EVENT_TYPES = [
  'user.created',
  'user.updated',
  'user.deleted',
  'user.restored',
  'mirror.baseline',
  'mirror.restored',
] as const;
export type ChangeEventType = (typeof CHANGE_EVENT_TYPES)[number];

/** What CHANGES_BASELINE chooses for a first sync into an empty mirror. */
export type BaselineMode = 'marker' | 'events';

const common = {
  id: z
    .string()
    .regex(/^evt_[0-9a-f]+_[0-9]+$/)
    .describe('Stable and unique: the same on every delivery of this event (webhook-id); deduplicate on it'),
  cursor: z.number().int().positive().describe('Position in the feed, increasing in commit order: ask for events after it'),
  timestamp: z.iso.datetime().describe('When the change was published in the mirror (UTC)'),
  run_id: z.number().int().positive().nullable().describe('The sync run that published the change; null for an online resolve'),
};
const who = {
  user_id: z.string().describe("The service's user id (UUID)"),
  team_id: z.string().describe('The team (UUID)'),
  client_user_id: z.string().describe("The team's own id for the user"),
};
const user = z.record(z.string(), z.unknown()).describe('The user record as mirrored: the bytes the service listed, as JSON');

/**
 * The event schema's version, stated in docs/change-event.schema.json (`schema_version`) and
 * by the sinks beside each event. 2: `user.updated` carries `previous`.
 */
export const CHANGE_EVENT_SCHEMA_VERSION = 2;

/** One event as every surface carries it (feed pages, JSON lines, webhook bodies). */
export const ChangeEventSchema = z
  .discriminatedUnion('type', [
    z.object({ ...common, type: z.literal('user.created'), data: z.object({ ...who, user }) }),
    z.object({ ...common, type: z.literal('user.restored'), data: z.object({ ...who, user }) }),
    z.object({
      ...common,
      type: z.literal('user.updated'),
      data: z.object({
        ...who,
        user,
        /** Top-level fields of the record whose value changed, appeared or went. */
        changed_fields: z.array(z.string()),
        /** Connected-source slugs the user gained and lost. */
        sources_added: z.array(z.string()),
        sources_removed: z.array(z.string()),
        previous: z
          .record(z.string(), z.unknown())
          .optional()
          .describe(
            'The values the changed fields had before: each of changed_fields that the earlier record held (one that appeared is absent). Since schema_version 2; absent in events published before',
          ),
      }),
    }),
    z.object({
      ...common,
      type: z.literal('user.deleted'),
      data: z.object({
        ...who,
        user: z.null(),
        /** `verified`: the service confirmed the user gone; `superseded`: another user took its client_user_id. */
        reason: z.enum(['verified', 'superseded']),
      }),
    }),
    z.object({
      ...common,
      type: z.literal('mirror.baseline'),
      data: z.object({ users: z.number().int().nonnegative(), note: z.string() }),
    }),
    z.object({
      ...common,
      type: z.literal('mirror.restored'),
      data: z.object({
        /** When the backup the mirror was restored from was taken. */
        backup_at: z.iso.datetime(),
        /** The last cursor the backup held: events after it up to this event's cursor were the lost file's and are not in the feed. */
        backup_cursor: z.number().int().nonnegative(),
        /** The replaced file's last cursor, when it could be read; null when it was lost. */
        replaced_cursor: z.number().int().nonnegative().nullable(),
        note: z.string(),
      }),
    }),
  ])
  .meta({ schema_version: CHANGE_EVENT_SCHEMA_VERSION });
export type ChangeEvent = z.infer<typeof ChangeEventSchema>;

/** A user's state before its change: absent, or its row as it was. */
export interface Before {
  raw: string | null;
  deletedAt: string | null;
}

/** One change to turn into an event. */
export interface ChangeInput {
  change: 'created' | 'updated' | 'deleted';
  cause: string | null;
  userId: string;
  teamId: string;
  clientUserId: string;
  /** The record as now mirrored. */
  raw: string;
  before: Before | undefined;
}

/** The event type and its `data` members for one change (pure: the feed's decision). */
export function describeChange(c: ChangeInput): { type: ChangeEventType; data: string } {
  const ids = `"user_id":${JSON.stringify(c.userId)},"team_id":${JSON.stringify(c.teamId)},"client_user_id":${JSON.stringify(c.clientUserId)}`;
  if (c.change === 'deleted') {
    const reason = c.cause === 'superseded' ? 'superseded' : 'verified';
    return { type: 'user.deleted', data: `{${ids},"user":null,"reason":"${reason}"}` };
  }
  if (c.change === 'created') {
    const restored = c.before?.raw != null && c.before.deletedAt !== null;
    return { type: restored ? 'user.restored' : 'user.created', data: `{${ids},"user":${c.raw}}` };
  }
  const before = objectOrEmpty(c.before?.raw ?? null);
  const diff = diffObjects(before, objectOrEmpty(c.raw));
  const previous: Record<string, unknown> = {};
  for (const field of diff.fields) if (Object.hasOwn(before, field)) previous[field] = before[field];
  const lists = `"changed_fields":${JSON.stringify(diff.fields)},"sources_added":${JSON.stringify(diff.added)},"sources_removed":${JSON.stringify(diff.removed)},"previous":${JSON.stringify(previous)}`;
  return { type: 'user.updated', data: `{${ids},"user":${c.raw},${lists}}` };
}

/** Top-level fields that differ, and connected-source slugs gained and lost, between two records. */
export function diffRecords(beforeRaw: string | null, afterRaw: string): { fields: string[]; added: string[]; removed: string[] } {
  return diffObjects(objectOrEmpty(beforeRaw), objectOrEmpty(afterRaw));
}

function diffObjects(
  before: Record<string, unknown>,
  after: Record<string, unknown>,
): { fields: string[]; added: string[]; removed: string[] } {
  const fields = [...new Set([...Object.keys(before), ...Object.keys(after)])]
    .filter((k) => !isDeepStrictEqual(before[k], after[k]))
    .sort();
  const was = slugsOf(before);
  const now = slugsOf(after);
  return { fields, added: [...now].filter((s) => !was.has(s)).sort(), removed: [...was].filter((s) => !now.has(s)).sort() };
}

// The object checks here are written out: db/ imports nothing from src/, where isRecord lives (src/runtime/is-record.ts).
function objectOrEmpty(raw: string | null): Record<string, unknown> {
  if (raw === null) return {};
  try {
    const v: unknown = JSON.parse(raw);
    return isObject(v) ? v : {};
  } catch {
    return {};
  }
}

/** The slugs of a record's connected sources, `provider` preferred to the deprecated `source`, as the mirror reads them. */
function slugsOf(record: Record<string, unknown>): Set<string> {
  const out = new Set<string>();
  const list = record['connected_sources'];
  if (!Array.isArray(list)) return out;
  for (const entry of list) {
    if (typeof entry !== 'object' || entry === null) continue;
    const e = entry as Record<string, unknown>;
    const slug = slugOf(e['provider']) ?? slugOf(e['source']);
    if (slug !== undefined) out.add(slug);
  }
  return out;
}

function slugOf(descriptor: unknown): string | undefined {
  if (typeof descriptor !== 'object' || descriptor === null) return undefined;
  const slug = (descriptor as Record<string, unknown>)['slug'];
  return typeof slug === 'string' && slug !== '' ? slug : undefined;
}

/** The stored body: the envelope around `data`, with the id the cursor makes. */
export function envelope(epoch: string, cursor: number, type: ChangeEventType, at: string, runId: number | null, data: string): string {
  return `{"id":"evt_${epoch}_${cursor}","cursor":${cursor},"type":"${type}","timestamp":"${at}","run_id":${runId ?? 'null'},"data":${data}}`;
}

/**
 * A stored event as read back from its bytes by whoever receives them (a follower, from its leader's feed
 * pages: src/sync/follow-feed.ts): the type, the cursor, the user, and the record as the exact bytes
 * `envelope` and describeChange embedded, never re-serialised.
 */
export type ReadEvent =
  | { type: 'user.created' | 'user.updated' | 'user.restored'; cursor: number; userId: string; record: Buffer }
  | { type: 'user.deleted'; cursor: number; userId: string; record: null }
  | { type: 'mirror.baseline' | 'mirror.restored'; cursor: number };

/**
 * The reader of what `envelope` writes. The whole event is parsed (it must be valid JSON), and the
 * record's bytes are found by walking the event's members and then data's (`data.user`), whatever their
 * order or spacing and whatever the strings around them hold: no search for a byte pattern, which a
 * record, an id or an update's `previous` could hold too. Throws an Error saying what is wrong.
 */
export function readEvent(body: Buffer): ReadEvent {
  let event: unknown;
  try {
    event = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new Error(`the event is not valid JSON: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  if (!isObject(event)) throw new Error('the event is not a JSON object');
  const { type, cursor, data } = event;
  if (!CHANGE_EVENT_TYPES.some((t) => t === type)) throw new Error(`unknown event type ${JSON.stringify(type) ?? 'undefined'}`);
  const known = type as ChangeEventType;
  if (typeof cursor !== 'number' || !Number.isInteger(cursor)) throw new Error(`a ${known} event has no integer cursor`);
  if (known === 'mirror.baseline' || known === 'mirror.restored') return { type: known, cursor };
  const userId = isObject(data) ? data['user_id'] : undefined;
  if (typeof userId !== 'string') throw new Error(`a ${known} event names no user_id`);
  if (known === 'user.deleted') return { type: known, cursor, userId, record: null };
  const at = memberAt(body, memberAt(body, { start: 0, end: body.length }, 'data'), 'user');
  const record = body.subarray(at.start, at.end);
  const parsed: unknown = JSON.parse(record.toString('utf8'));
  if (!isObject(parsed) || parsed['user_id'] !== userId) throw new Error(`the record in the event of user ${userId} names another user`);
  return { type: known, cursor, userId, record };
}

/** A value's bytes: [start, end). */
interface ByteRange {
  start: number;
  end: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The bytes of member `name`'s value in the object that `within` holds (valid JSON: readEvent parsed it
 * first), the last one if repeated, as JSON.parse keeps.
 */
function memberAt(b: Buffer, within: ByteRange, name: string): ByteRange {
  let found: ByteRange | undefined;
  let i = skipSpace(b, within.start);
  if (b[i] !== 0x7b) throw new Error(`the event's member holding "${name}" is not an object`);
  i = skipSpace(b, i + 1);
  while (i < within.end && b[i] === QUOTE) {
    const keyEnd = stringEnd(b, i);
    const key = JSON.parse(b.toString('utf8', i, keyEnd)) as string;
    const start = skipSpace(b, skipSpace(b, keyEnd) + 1);
    const end = valueEnd(b, start);
    if (key === name) found = { start, end };
    i = skipSpace(b, end);
    if (b[i] === 0x2c) i = skipSpace(b, i + 1);
  }
  if (found === undefined) throw new Error(`the event has no "${name}"`);
  return found;
}

/** Just past the string whose opening quote is at `open`. */
function stringEnd(b: Buffer, open: number): number {
  for (let i = open + 1; i < b.length; i++) {
    if (b[i] === BACKSLASH) i++;
    else if (b[i] === QUOTE) return i + 1;
  }
  return b.length;
}

/** Just past the JSON value starting at `i`: a string, an object or array (by depth, strings skipped), or a literal. */
function valueEnd(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return stringEnd(b, i);
  let depth = 0;
  for (let j = i; j < b.length; j++) {
    const d = b[j];
    if (d === QUOTE) j = stringEnd(b, j) - 1;
    else if (d === 0x7b || d === 0x5b) depth++;
    else if (d === 0x7d || d === 0x5d) {
      if (depth === 0) return j;
      if (--depth === 0) return j + 1;
    } else if (depth === 0 && (d === 0x2c || isSpace(d))) return j;
  }
  return b.length;
}

function skipSpace(b: Buffer, i: number): number {
  while (i < b.length && isSpace(b[i])) i++;
  return i;
}

function isSpace(c: number | undefined): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
