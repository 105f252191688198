/**
 * The service's HTTP surface as the servers that imitate it speak it (the
 * stand-in, the replica): the list query, FastAPI-shaped 422s, and the key
 * comparison. Path segments, which the client writes too, are
 * ./path-segment.ts.
 */
import { hash, timingSafeEqual } from 'node:crypto';
import { MAX_PAGE_LIMIT } from './schemas.js';

/**
 * Request validation with FastAPI / Pydantic v2 error items, so a client's
 * 422 handling meets the same `{"detail": [{type, loc, msg, input, ctx}]}`
 * bodies as upstream. Messages follow Pydantic's wording.
 */
export interface ValidationItem {
  type: string;
  loc: Array<string | number>;
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

export type Checked<T> = { ok: true; value: T } | { ok: false; item: ValidationItem };

export interface IntBounds {
  default: number;
  ge?: number;
  le?: number;
}

/** Pydantic's lax int from a string: optional sign, digits, optionally `.0…`, surrounding blanks. */
const LAX_INT = /^\s*([+-]?\d+)(?:\.0+)?\s*$/;

/** A query parameter; when repeated the last value counts, as with Starlette. */
export function queryInt(params: URLSearchParams, name: string, bounds: IntBounds): Checked<number> {
  const input = params.getAll(name).at(-1);
  if (input === undefined) return { ok: true, value: bounds.default };
  const loc = ['query', name];
  const digits = LAX_INT.exec(input)?.[1];
  if (digits === undefined) {
    return fail('int_parsing', loc, 'Input should be a valid integer, unable to parse string as an integer', input);
  }
  const value = Number(digits);
  if (!Number.isSafeInteger(value)) {
    return fail('int_parsing_size', loc, 'Unable to parse input string as an integer, exceeded maximum size', input);
  }
  if (bounds.ge !== undefined && value < bounds.ge) {
    return fail('greater_than_equal', loc, `Input should be greater than or equal to ${bounds.ge}`, input, { ge: bounds.ge });
  }
  if (bounds.le !== undefined && value > bounds.le) {
    return fail('less_than_equal', loc, `Input should be less than or equal to ${bounds.le}`, input, { le: bounds.le });
  }
  return { ok: true, value };
}

const HEX_OR_DASH = /[^0-9a-fA-F-]/;
const GROUP_LENGTHS = [8, 4, 4, 4, 12];

/** A UUID path parameter, returned in canonical lowercase hyphenated form. */
export function pathUuid(input: string, name: string): Checked<string> {
  const raw = input.toLowerCase().startsWith('urn:uuid:') ? input.slice(9) : input;
  const problem = uuidProblem(raw);
  if (problem !== undefined) {
    return fail('uuid_parsing', ['path', name], `Input should be a valid UUID, ${problem}`, input, { error: problem });
  }
  const hex = raw.replaceAll('-', '').toLowerCase();
  return { ok: true, value: `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}` };
}

/** The uuid crate's wording, which Pydantic passes through. */
function uuidProblem(raw: string): string | undefined {
  const bad = HEX_OR_DASH.exec(raw);
  if (bad !== null) {
    return `invalid character: expected an optional prefix of \`urn:uuid:\` followed by [0-9a-fA-F-], found \`${bad[0]}\` at ${bad.index + 1}`;
  }
  if (!raw.includes('-'))
    return raw.length === 32 ? undefined : `invalid length: expected length 32 for simple format, found ${raw.length}`;
  const groups = raw.split('-');
  if (groups.length !== 5) return `invalid group count: expected 5, found ${groups.length}`;
  const at = groups.findIndex((g, i) => g.length !== GROUP_LENGTHS[i]);
  return at === -1 ? undefined : `invalid group length in group ${at}: expected ${GROUP_LENGTHS[at]}, found ${groups[at]?.length}`;
}

/** The items of the checks that failed, in order. */
export function failedItems(checks: ReadonlyArray<Checked<unknown>>): ValidationItem[] {
  return checks.flatMap((c) => (c.ok ? [] : [c.item]));
}

export function validationErrorBody(items: readonly ValidationItem[]): string {
  return JSON.stringify({ detail: items });
}

function fail(type: string, loc: Array<string | number>, msg: string, input: unknown, ctx?: Record<string, unknown>): Checked<never> {
  return { ok: false, item: ctx === undefined ? { type, loc, msg, input } : { type, loc, msg, input, ctx } };
}

/**
 * The list endpoint's query, as the service reads it: `offset` (default 0,
 * at least 0) and `limit` (default 100, 1..500). Shared by the stand-in and
 * the replica, so both refuse the same queries with the same 422 items.
 */
const DEFAULT_LIMIT = 100;

export type ListQuery = { ok: true; offset: number; limit: number } | { ok: false; items: ValidationItem[] };

export function parseListQuery(params: URLSearchParams): ListQuery {
  const offset = queryInt(params, 'offset', { default: 0, ge: 0 });
  const limit = queryInt(params, 'limit', { default: DEFAULT_LIMIT, ge: 1, le: MAX_PAGE_LIMIT });
  if (offset.ok && limit.ok) return { ok: true, offset: offset.value, limit: limit.value };
  return { ok: false, items: failedItems([offset, limit]) };
}

/**
 * Constant-time key comparison: both sides are hashed first, so neither the
 * content nor the length of the expected key leaks through timing.
 */
export function keyDigest(value: string): Buffer {
  // One-shot: half the cost of createHash().update().digest(), and the replica pays it per request.
  return hash('sha256', value, 'buffer');
}

/** `expected` is a digest from keyDigest, computed once by the caller. */
export function offeredKeyMatches(offered: string | string[] | undefined, expected: Buffer): boolean {
  if (typeof offered !== 'string') return false;
  return timingSafeEqual(keyDigest(offered), expected);
}
