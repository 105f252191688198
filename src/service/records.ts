/**
 * Validates the records of one list page one by one, so that a single bad
 * record is reported with its path (`users[37].user_id`) instead of failing
 * the page. Only a record without a valid identity is bad; other fields that
 * break their rule become field warnings (./user-record.ts). Pure: no I/O.
 */
import type { User } from './schemas.js';
import { parseUser, type FieldWarning } from './user-record.js';

export type ParsedRecord =
  | { ok: true; index: number; user: User; warnings: FieldWarning[] }
  | { ok: false; index: number; reason: string; raw: unknown };

export function parseUserRecord(raw: unknown, index: number): ParsedRecord {
  const parsed = parseUser(raw, `users[${index}]`);
  if (parsed.ok) return { ok: true, index, user: parsed.user, warnings: parsed.warnings };
  return { ok: false, index, reason: parsed.issues, raw };
}

export function parseUserRecords(raws: readonly unknown[]): ParsedRecord[] {
  return raws.map((raw, index) => parseUserRecord(raw, index));
}
