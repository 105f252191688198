/**
 * The sinks' field policy (src/sinks/field-policy.ts) applied to an export:
 * what it does not let leave is absent from the files. Pure.
 *
 * - A top-level field of the record that does not leave is removed from
 *   every `raw` (users, versions) and from the events' bodies (as the sinks
 *   do), and the columns mapped from it are not in the files at all
 *   (`fallback_birth_date` takes `fallback_birth_date`,
 *   `fallback_birth_date_source_slug` and `fallback_birth_date_updated_at`
 *   with it); without `connected_sources`, the users' `sources` column and
 *   the `sources` file are left out.
 * - `client_user_id`: passed, dropped (the column is not in the files), or
 *   replaced by its HMAC in the column, the records and the bodies alike, so
 *   the files still join on it.
 * - `user_id` and `team_id` columns stay: they are the mirror's keys, what
 *   every file joins on (a policy that drops them removes them from `raw`).
 */
import { RECORD_FIELD_OF } from '../../db/user-row.js';
import type { FieldPolicy } from '../sinks/field-policy.js';
import { COLUMNS, type Column, type ExportRecord, type TableName } from './tables.js';

/** The record's top-level field a column is mapped from; undefined for the mirror's own columns. */
const FIELD_OF: Readonly<Record<string, string>> = { ...RECORD_FIELD_OF, client_user_id: 'client_user_id', sources: 'connected_sources' };

export interface ExportShape {
  /** The policy's id (`name:fingerprint`) for the manifest; null when none applies. */
  id: string | null;
  /** Whether a table's file is written at all. */
  writes(table: TableName): boolean;
  columns(table: TableName): readonly Column[];
  apply(table: TableName, row: ExportRecord): ExportRecord;
}

export const NO_POLICY: ExportShape = { id: null, writes: () => true, columns: (t) => COLUMNS[t], apply: (_t, row) => row };

export function exportShape(policy: FieldPolicy | undefined): ExportShape {
  if (policy === undefined || policy.passesAll) return policy === undefined ? NO_POLICY : { ...NO_POLICY, id: policy.id };
  const kept = (c: Column) => {
    const field = FIELD_OF[c.name];
    return field === undefined || policy.keeps(field);
  };
  const columns = Object.fromEntries(
    (Object.keys(COLUMNS) as TableName[]).map((t) => [t, t === 'changes' || t === 'sources' ? COLUMNS[t] : COLUMNS[t].filter(kept)]),
  ) as Record<TableName, readonly Column[]>;
  const record = (raw: string | null): string | null => {
    if (raw === null) return null;
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return raw;
    return JSON.stringify(policy.applyToUser(parsed as Record<string, unknown>));
  };
  return {
    id: policy.id,
    writes: (table) => table !== 'sources' || policy.keeps('connected_sources'),
    columns: (table) => columns[table],
    apply(table, row) {
      if (table === 'changes') return { ...row, body: policy.applyToEvent(String(row.body)) };
      if (table === 'sources') return row;
      const out: ExportRecord = {};
      for (const c of columns[table]) out[c.name] = row[c.name] ?? null;
      if (typeof row.client_user_id === 'string' && 'client_user_id' in out)
        out.client_user_id = policy.clientUserId(row.client_user_id) ?? null;
      out.raw = record(typeof row.raw === 'string' ? row.raw : null);
      return out;
    },
  };
}
