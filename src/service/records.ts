/**
 * Validates the records of one list page one by one, so that a single bad
 * record is reported with its path (`users[37].user_id`) instead of failing
 * the page. Pure: no I/O.
 */
import { UserSchema, type User } from './schemas.js';
import { formatIssues } from './issue-path.js';

export type ParsedRecord =
  | { ok: true; index: number; user: User }
  | { ok: false; index: number; reason: string; raw: unknown };

export function parseUserRecord(raw: unknown, index: number): ParsedRecord {
  const result = UserSchema.safeParse(raw);
  if (result.success) return { ok: true, index, user: result.data };
  return { ok: false, index, reason: formatIssues(result.error.issues, `users[${index}]`), raw };
}

export function parseUserRecords(raws: readonly unknown[]): ParsedRecord[] {
  return raws.map((raw, index) => parseUserRecord(raw, index));
}
