/**
 * What an export does, decided before any file is opened, and the manifest
 * that describes it afterwards. Pure: the snapshot's facts and the previous
 * manifest come in, a plan (which rows of which table, into which file) and
 * a manifest go out; src/export/run.ts reads and writes.
 *
 * - **full**: every table as the snapshot holds it.
 * - **incremental**: continues from a previous manifest's snapshot: the
 *   change events after its cursor, the versions and source connections that
 *   began or ended after its time, the users those events touched. Refused
 *   when the feed is another one (a rebuilt or restored mirror: new epoch) or
 *   is behind the manifest (a restore from an older backup).
 * - **as-of**: the directory as it was at a time: the users current then
 *   (from history), the versions and connections begun by then (their ends
 *   after it unknown then: NULL), the events published by then. Refused
 *   before history is complete and inside a restore's gap. A time after the
 *   snapshot's latest publish is the snapshot itself.
 */
import { z } from 'zod';
import type { HistoryWindow, SnapshotFacts } from '../../db/export-reader.js';
import { formatIssues } from '../runtime/zod-issues.js';
import { COLUMNS, EXPORT_LAYOUT_VERSION, TABLES, type ColumnKind, type TableName } from './tables.js';

export type ExportFormat = 'parquet' | 'ndjson';

export interface ExportRequest {
  tables: readonly TableName[];
  format: ExportFormat;
  /** An instant (`YYYY-MM-DDTHH:MM:SS.sssZ`). */
  asOf?: string;
  /** The manifest an incremental export continues from. */
  since?: Manifest;
}

/** Which rows one file holds. */
type TableSource =
  | { table: 'users'; rows: 'current' }
  | { table: 'users'; rows: 'touched'; afterCursor: number }
  | { table: 'users'; rows: 'as-of'; at: string }
  | { table: 'versions' | 'sources'; window: HistoryWindow }
  | { table: 'changes'; afterCursor: number; at?: string };

export interface PlannedFile {
  table: TableName;
  file: string;
  source: TableSource;
}

type ExportKind = 'full' | 'incremental' | 'as-of';

export interface ExportPlan {
  kind: ExportKind;
  format: ExportFormat;
  asOf?: string;
  since?: { cursor: number; at: string | null };
  files: PlannedFile[];
}

export class ExportRefused extends Error {
  override name = 'ExportRefused';
}

const INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** A time as the mirror stores it: `2026-06-01`, `2026-06-01T12:00:00Z`, any offset → UTC milliseconds. */
export function toInstant(text: string): string {
  const t = /^\d{4}-\d{2}-\d{2}$/.test(text) ? `${text}T00:00:00.000Z` : text;
  const ms = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(t) ? Date.parse(t) : Number.NaN;
  if (Number.isNaN(ms)) throw new ExportRefused(`as-of: ${JSON.stringify(text.slice(0, 40))} is not a date or a date-time with an offset`);
  return new Date(ms).toISOString();
}

function fileName(table: TableName, format: ExportFormat): string {
  return `${table}.${format === 'parquet' ? 'parquet' : 'ndjson'}`;
}

export function planExport(request: ExportRequest, facts: SnapshotFacts): ExportPlan {
  if (request.tables.length === 0) throw new ExportRefused('no table to export');
  if (request.asOf !== undefined && request.since !== undefined)
    throw new ExportRefused('an export is either as of a time or incremental, not both');
  const files = (source: (table: TableName) => TableSource): PlannedFile[] =>
    TABLES.filter((t) => request.tables.includes(t)).map((table) => ({
      table,
      file: fileName(table, request.format),
      source: source(table),
    }));

  if (request.asOf !== undefined) {
    const at = request.asOf;
    if (!INSTANT.test(at)) throw new ExportRefused(`as-of ${JSON.stringify(at)} is not YYYY-MM-DDTHH:MM:SS.sssZ`);
    if (facts.historySince === null || at < facts.historySince)
      throw new ExportRefused(`as-of ${at} is before the mirror's history begins (${facts.historySince ?? 'no complete sync yet'})`);
    const gap = facts.gaps.find((g) => g.from <= at && (g.to === null || at < g.to));
    if (gap !== undefined)
      throw new ExportRefused(`as-of ${at} falls where a restore left history blank (${gap.from} to ${gap.to ?? 'now'})`);
    const window: HistoryWindow = { kind: 'as-of', at };
    return {
      kind: 'as-of',
      format: request.format,
      asOf: at,
      files: files((table) => {
        if (table === 'users') return { table, rows: 'as-of', at };
        if (table === 'changes') return { table, afterCursor: 0, at };
        return { table, window };
      }),
    };
  }

  if (request.since !== undefined) {
    const prev = request.since.snapshot;
    if (prev.epoch !== facts.epoch)
      throw new ExportRefused(
        `the previous export read change feed epoch ${prev.epoch ?? 'none'}, the mirror's is ${facts.epoch ?? 'none'} (rebuilt or restored): make a full export`,
      );
    if (prev.cursor > facts.cursor)
      throw new ExportRefused(
        `the previous export reached cursor ${prev.cursor}, the mirror only ${facts.cursor} (restored from an older backup?): make a full export`,
      );
    const window: HistoryWindow = prev.at === null ? { kind: 'all' } : { kind: 'since', after: prev.at };
    return {
      kind: 'incremental',
      format: request.format,
      since: { cursor: prev.cursor, at: prev.at },
      files: files((table) => {
        if (table === 'users') return { table, rows: 'touched', afterCursor: prev.cursor };
        if (table === 'changes') return { table, afterCursor: prev.cursor };
        return { table, window };
      }),
    };
  }

  return {
    kind: 'full',
    format: request.format,
    files: files((table) => {
      if (table === 'users') return { table, rows: 'current' };
      if (table === 'changes') return { table, afterCursor: 0 };
      return { table, window: { kind: 'all' } };
    }),
  };
}

/** The type a column has in the files, as the manifest names it. */
const KIND_NAMES: Record<ColumnKind, string> = {
  string: 'STRING',
  timestamp: 'TIMESTAMP (UTC, ms)',
  date: 'DATE',
  int64: 'INT64',
  boolean: 'BOOLEAN',
  json: 'JSON',
  list: 'LIST<STRING>',
};

const ManifestFileSchema = z.object({
  table: z.enum(TABLES),
  file: z.string().regex(/^[a-z]+\.(parquet|ndjson)$/, 'must be a table file name'),
  rows: z.number().int().nonnegative(),
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 hex digits'),
  columns: z.array(z.object({ name: z.string(), type: z.string(), nullable: z.boolean() })),
});

export const ManifestSchema = z.object({
  manifest_version: z.literal(1),
  layout_version: z.number().int(),
  schema_version: z.number().int(),
  kind: z.enum(['full', 'incremental', 'as-of']),
  format: z.enum(['parquet', 'ndjson']),
  created_at: z.string(),
  as_of: z.string().nullable(),
  since: z.object({ cursor: z.number().int().nonnegative(), at: z.string().nullable() }).nullable(),
  snapshot: z.object({
    cursor: z.number().int().nonnegative(),
    at: z.string().nullable(),
    run_id: z.number().int().nullable(),
    epoch: z.string().nullable(),
    history_since: z.string().nullable(),
  }),
  /** Fields the field policy left out or changed (src/sinks/field-policy.ts); null when none applied. */
  field_policy: z.string().nullable(),
  files: z.array(ManifestFileSchema),
});
export type Manifest = z.output<typeof ManifestSchema>;

/** A manifest read from a file: checked, the error naming the field. */
export function parseManifest(text: string, origin: string): Manifest {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ExportRefused(`${origin} is not JSON`);
  }
  const parsed = ManifestSchema.safeParse(json);
  if (!parsed.success) throw new ExportRefused(`${origin} is not an export manifest: ${formatIssues(parsed.error.issues)}`);
  return parsed.data;
}

/** What a file writer reports of one file. */
export interface WrittenFile {
  table: TableName;
  file: string;
  rows: number;
  bytes: number;
  sha256: string;
}

export function buildManifest(
  plan: ExportPlan,
  facts: SnapshotFacts,
  written: readonly WrittenFile[],
  createdAt: string,
  fieldPolicy: string | null = null,
  columns: (table: TableName) => ReadonlyArray<{ name: string; kind: ColumnKind; required?: boolean }> = (t) => COLUMNS[t],
): Manifest {
  return {
    manifest_version: 1,
    layout_version: EXPORT_LAYOUT_VERSION,
    schema_version: facts.schemaVersion,
    kind: plan.kind,
    format: plan.format,
    created_at: createdAt,
    as_of: plan.asOf ?? null,
    since: plan.since ?? null,
    snapshot: { cursor: facts.cursor, at: facts.at, run_id: facts.runId, epoch: facts.epoch, history_since: facts.historySince },
    field_policy: fieldPolicy,
    files: written.map((w) => ({
      ...w,
      columns: columns(w.table).map((c) => ({ name: c.name, type: KIND_NAMES[c.kind], nullable: c.required !== true })),
    })),
  };
}

/** The folder an export goes into, under the export directory: sortable by time. */
export function exportFolderName(createdAt: string): string {
  return `export-${createdAt.replace(/[:.]/g, '-')}`;
}

/** Export folders to delete so that `keep` remain: the oldest first. Names not of exports are never touched. */
export function foldersToRotate(names: readonly string[], keep: number): string[] {
  const exports = names.filter((n) => /^export-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.test(n)).sort();
  return keep <= 0 ? [] : exports.slice(0, Math.max(0, exports.length - keep));
}

/** The newest export folder among `names` (the one `--incremental` continues from). */
export function newestExport(names: readonly string[]): string | undefined {
  return names
    .filter((n) => /^export-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.test(n))
    .sort()
    .at(-1);
}
