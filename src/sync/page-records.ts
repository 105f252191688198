/**
 * Splits one fetched page into what the writer stages and what it sets aside.
 * Pure. Each raw record is serialised exactly once, here: that string is both
 * what the mirror keeps and what it compares to spot an unchanged user, so
 * nothing downstream needs to serialise it again.
 *
 * A record whose JSON is larger than `maxRecordBytes` (SYNC_MAX_RECORD_BYTES)
 * is set aside too, valid or not, with only its ids kept: one runaway field
 * must not put megabytes into `users.raw` or `rejected_records.raw`. Setting
 * it aside rather than failing the page keeps the other users of the page
 * current, and a rejected record with a readable user_id still counts as
 * seen, so the user keeps the row it had and is never a deletion candidate.
 */
import type { UserPage } from '../service/client.js';
import type { RejectedRecordInput, StagedRecord } from '../../db/mirror-writer.js';

export interface SplitPage {
  staged: StagedRecord[];
  rejected: RejectedRecordInput[];
}

export const DEFAULT_MAX_RECORD_BYTES = 1024 * 1024;

/** Longest id kept from an oversized record; real ids are UUIDs and short client ids. */
const MAX_KEPT_ID = 256;

export function splitPage(page: UserPage, offset: number, maxRecordBytes: number = DEFAULT_MAX_RECORD_BYTES): SplitPage {
  const staged: StagedRecord[] = [];
  const rejected: RejectedRecordInput[] = [];
  for (const record of page.records) {
    const raw = page.raw[record.index];
    const rawJson = JSON.stringify(raw) ?? 'null';
    const bytes = byteLengthAbove(rawJson, maxRecordBytes);
    if (bytes !== undefined) {
      const reason = `users[${record.index}]: record is ${bytes} bytes, above SYNC_MAX_RECORD_BYTES (${maxRecordBytes}); not stored`;
      rejected.push({ offset, index: record.index, reason, raw: idsOf(raw) });
    } else if (record.ok) staged.push({ user: record.user, rawJson, warnings: record.warnings });
    else rejected.push({ offset, index: record.index, reason: record.reason, raw: record.raw });
  }
  return { staged, rejected };
}

/** The UTF-8 size of `json` when it is above `max`, else undefined; counts bytes only for strings that might be. */
function byteLengthAbove(json: string, max: number): number | undefined {
  // A UTF-16 code unit is at most 3 UTF-8 bytes.
  if (json.length * 3 <= max) return undefined;
  const bytes = Buffer.byteLength(json, 'utf8');
  return bytes > max ? bytes : undefined;
}

function idsOf(raw: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof raw !== 'object' || raw === null) return out;
  for (const key of ['user_id', 'client_user_id']) {
    const value: unknown = (raw as Record<string, unknown>)[key];
    if (typeof value === 'string' && value.length <= MAX_KEPT_ID) out[key] = value;
  }
  return out;
}
