/**
 * Cuts a list page's body into the byte ranges of its records, without
 * parsing them. Pure: no I/O.
 *
 * Why: on a re-sync nearly every record is byte-for-byte what the mirror
 * already holds. Parsing, validating and re-serialising such a record costs
 * ~15 µs; finding its bounds and its user_id in the bytes costs ~1 µs, and
 * a re-sync does one or the other for every user of the directory, every
 * run. The sync hashes each range, asks its ledger, and parses only
 * the records whose bytes changed: a byte-identical record already passed
 * validation when it was stored.
 *
 * What is checked here, and what is left to the parse: the envelope is
 * walked strictly (an object; members separated by commas; `users` an array
 * of values separated by commas; nothing after the object), and every
 * envelope member other than `users` is handed to JSON.parse. The inside of
 * a record is only walked for its bounds (strings, brackets): a record the
 * sync does not parse is one whose bytes hash to a stored, valid record; any
 * other record is parsed with JSON.parse, which rejects what this walk let through.
 */

export interface RecordSpan {
  start: number;
  end: number;
  /**
   * The record's top-level `user_id` when it is a plain string (no escapes),
   * the last one if repeated (as JSON.parse keeps); undefined otherwise: the
   * record must then be parsed to learn who it is.
   */
  userId: string | undefined;
  /**
   * Where the record's top-level `team_id` string lies (its bytes between the
   * quotes) when it is a plain string; -1 or unset otherwise. A follower checks
   * every record's team with it (src/sync/leader-check.ts) without parsing.
   */
  teamAt?: number;
  teamEnd?: number;
}

export type SpanScan =
  { ok: true; spans: RecordSpan[]; members: Record<string, unknown>; hasRecords: boolean } | { ok: false; reason: string };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

class Malformed extends Error {}

/**
 * `records`: the member holding the array of records, `users` on a list page; a follower reads its
 * leader's feed pages (`{"events": [...], "next": N}`, src/sync/follow-feed.ts) with `events`.
 * `hasRecords` then says whether that member is an array.
 */
export function scanRecordSpans(body: Buffer, records = 'users'): SpanScan {
  try {
    return scanEnvelope(body, records);
  } catch (err) {
    if (err instanceof Malformed || err instanceof SyntaxError) return { ok: false, reason: err.message };
    throw err;
  }
}

function scanEnvelope(b: Buffer, records: string): SpanScan {
  let i = expect(b, skipWs(b, 0), OPEN_OBJECT);
  const members: Record<string, unknown> = {};
  const spans: RecordSpan[] = [];
  let hasRecords = false;
  i = skipWs(b, i);
  if (b[i] === CLOSE_OBJECT) i++;
  else {
    for (;;) {
      if (b[i] !== QUOTE) throw new Malformed(`expected a member name at byte ${i}`);
      const keyEnd = stringEnd(b, i);
      const key = JSON.parse(b.toString('utf8', i, keyEnd + 1)) as string;
      i = skipWs(b, expect(b, skipWs(b, keyEnd + 1), COLON));
      if (key === records && b[i] === OPEN_ARRAY) {
        // A repeated records member: JSON.parse keeps the last one.
        spans.length = 0;
        hasRecords = true;
        i = scanUsers(b, i, spans);
      } else {
        const end = valueEnd(b, i);
        members[key] = JSON.parse(b.toString('utf8', i, end));
        if (key === records) hasRecords = false;
        i = end;
      }
      i = skipWs(b, i);
      if (b[i] === COMMA) {
        i = skipWs(b, i + 1);
        continue;
      }
      i = expect(b, i, CLOSE_OBJECT);
      break;
    }
  }
  if (skipWs(b, i) !== b.length) throw new Malformed(`unexpected bytes after the page object at byte ${i}`);
  return { ok: true, spans, members, hasRecords };
}

/** `i` at `[`; pushes each element's span; returns the index after `]`. */
function scanUsers(b: Buffer, i: number, spans: RecordSpan[]): number {
  i = skipWs(b, i + 1);
  if (b[i] === CLOSE_ARRAY) return i + 1;
  for (;;) {
    const start = i;
    let userId: string | undefined;
    let teamAt = -1;
    let teamEnd = -1;
    if (b[i] === OPEN_OBJECT) {
      const scanned = scanRecord(b, i);
      i = scanned.end;
      userId = scanned.userId;
      teamAt = scanned.teamAt;
      teamEnd = scanned.teamEnd;
    } else i = valueEnd(b, i);
    spans.push({ start, end: i, userId, teamAt, teamEnd });
    i = skipWs(b, i);
    if (b[i] === COMMA) {
      i = skipWs(b, i + 1);
      continue;
    }
    return expect(b, i, CLOSE_ARRAY);
  }
}

/**
 * `i` at a record's `{`. Tracks, at depth 1, whether a string is a member
 * name, to find `"user_id": "<value>"`; a nested value is skipped by
 * valueEnd, whose loop tracks nothing else. Loops in JS, no native call
 * per string: it runs over every byte of every record, and a native call
 * per string (indexOf) cost more than the bytes themselves (measured: 3.6
 * vs ~1 µs per record).
 */
function scanRecord(b: Buffer, i: number): { end: number; userId: string | undefined; teamAt: number; teamEnd: number } {
  const n = b.length;
  let depth = 0;
  let expectName = false;
  let nextIsUserId = false;
  let nextIsTeamId = false;
  let afterColon = false;
  let userId: string | undefined;
  // The last plain `team_id` string's bounds, as JSON.parse keeps the last; -1: none.
  let teamAt = -1;
  let teamEnd = -1;
  for (; i < n; i++) {
    const c = b[i];
    if (c === QUOTE) {
      const start = i + 1;
      let escaped = false;
      for (i = start; i < n; i++) {
        const d = b[i];
        if (d === QUOTE) break;
        if (d === BACKSLASH) {
          escaped = true;
          i++;
        }
      }
      if (i >= n) throw new Malformed(`unterminated string at byte ${start - 1}`);
      if (depth === 1) {
        if (expectName) {
          const seven = !escaped && i - start === 7;
          nextIsUserId = seven && isUserIdKey(b, start);
          nextIsTeamId = seven && !nextIsUserId && isTeamIdKey(b, start);
          expectName = false;
        } else if (afterColon && nextIsUserId) {
          // An escaped id would need decoding: leave it to the parse.
          userId = escaped ? undefined : b.toString('utf8', start, i);
          nextIsUserId = false;
        } else if (afterColon && nextIsTeamId) {
          teamAt = escaped ? -1 : start;
          teamEnd = escaped ? -1 : i;
          nextIsTeamId = false;
        }
      }
      afterColon = false;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth === 1) {
        if (afterColon && nextIsUserId) {
          userId = undefined;
          nextIsUserId = false;
        }
        if (afterColon && nextIsTeamId) {
          teamAt = -1;
          nextIsTeamId = false;
        }
        // A nested value holds no member of the record's: only its end matters.
        i = valueEnd(b, i) - 1;
        afterColon = false;
        continue;
      }
      depth++;
      expectName = depth === 1 && c === OPEN_OBJECT;
      afterColon = false;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      depth--;
      if (depth === 0) return { end: i + 1, userId, teamAt, teamEnd };
    } else if (depth === 1) {
      if (c === COMMA) {
        expectName = true;
        afterColon = false;
      } else if (c === COLON) afterColon = true;
      else if (afterColon && (nextIsUserId || nextIsTeamId) && !isWs(c ?? 0)) {
        // A non-string user_id or team_id: the parse will reject the record; who it is stays unknown.
        if (nextIsUserId) userId = undefined;
        else teamAt = -1;
        nextIsUserId = false;
        nextIsTeamId = false;
      }
    }
  }
  throw new Malformed('unterminated record');
}

/**
 * Whether the 7 bytes at `s` spell `user_id`. Compared in line: a native
 * Buffer.compare per member name cost more than the rest of the record's
 * scan of those bytes (~0.2 µs of ~1.5 per record, measured).
 */
function isUserIdKey(b: Buffer, s: number): boolean {
  return (
    b[s] === 0x75 &&
    b[s + 1] === 0x73 &&
    b[s + 2] === 0x65 &&
    b[s + 3] === 0x72 &&
    b[s + 4] === 0x5f &&
    b[s + 5] === 0x69 &&
    b[s + 6] === 0x64
  );
}

/** Whether the 7 bytes at `s` spell `team_id` (as isUserIdKey). */
function isTeamIdKey(b: Buffer, s: number): boolean {
  return (
    b[s] === 0x74 &&
    b[s + 1] === 0x65 &&
    b[s + 2] === 0x61 &&
    b[s + 3] === 0x6d &&
    b[s + 4] === 0x5f &&
    b[s + 5] === 0x69 &&
    b[s + 6] === 0x64
  );
}

/**
 * The index of the quote closing the string whose opening quote is at
 * `open`. A loop in JS, not indexOf: most strings are short ones inside
 * records, where a native call per string costs more than the bytes (see
 * scanRecord).
 */
function stringEnd(b: Buffer, open: number): number {
  const n = b.length;
  for (let i = open + 1; i < n; i++) {
    const d = b[i];
    if (d === QUOTE) return i;
    if (d === BACKSLASH) i++;
  }
  throw new Malformed(`unterminated string at byte ${open}`);
}

/** The index just after the value starting at `i` (any JSON value; only bounds are checked). */
function valueEnd(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return stringEnd(b, i) + 1;
  if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
    let depth = 0;
    for (; i < b.length; i++) {
      const d = b[i];
      if (d === QUOTE) i = stringEnd(b, i);
      else if (d === OPEN_OBJECT || d === OPEN_ARRAY) depth++;
      else if (d === CLOSE_OBJECT || d === CLOSE_ARRAY) {
        if (--depth === 0) return i + 1;
      }
    }
    throw new Malformed('unterminated value');
  }
  let j = i;
  while (j < b.length) {
    const d = b[j] ?? 0;
    if (d === COMMA || d === CLOSE_OBJECT || d === CLOSE_ARRAY || isWs(d)) break;
    j++;
  }
  if (j === i) throw new Malformed(`expected a value at byte ${i}`);
  return j;
}

function expect(b: Buffer, i: number, byte: number): number {
  if (b[i] !== byte) throw new Malformed(`expected '${String.fromCharCode(byte)}' at byte ${i}`);
  return i + 1;
}

function skipWs(b: Buffer, i: number): number {
  while (i < b.length && isWs(b[i] ?? 0)) i++;
  return i;
}

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}
