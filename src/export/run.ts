/**
 * An export of the mirror for a lake (the library's `exportMirror`, the
 * `user-mirror export` command, the daemon's EXPORT_CRON): one read
 * snapshot (db/export-reader.ts), the plan decided from it (plan.ts), each
 * table streamed into its checked file (files.ts), and the manifest written
 * last. The export is built in a hidden folder and renamed to
 * `export-<time>` only when every file and the manifest are whole: a folder
 * of that name is always complete, and an incremental export continues
 * from the newest such folder.
 */
import { closeSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ExportSnapshot } from '../../db/export-reader.js';
import { createPrivateFile, createPrivateFolder } from '../../db/file-modes.js';
import { openMirror } from '../../db/open.js';
import { writeTableFile } from './files.js';
import { removeStalePartials, syncFile } from '../../db/backup.js';
import {
  buildManifest,
  ExportRefused,
  exportFolderName,
  foldersToRotate,
  newestExport,
  parseManifest,
  planExport,
  toInstant,
  type ExportFormat,
  type ExportPlan,
  type Manifest,
  type PlannedFile,
  type WrittenFile,
} from './plan.js';
import { compileFieldPolicy, FieldPolicySchema, type FieldPolicy } from '../sinks/field-policy.js';
import { errorMessage } from '../runtime/line-text.js';
import { formatIssues } from '../runtime/zod-issues.js';
import { exportShape, NO_POLICY, type ExportShape } from './policy.js';
import {
  changeRecord,
  sourceRecord,
  TABLES,
  userAsOfRecord,
  userRecord,
  versionRecord,
  type ExportRecord,
  type TableName,
} from './tables.js';

const MANIFEST_FILE = 'manifest.json';

export interface ExportOptions {
  /** The mirror file (MIRROR_DB). */
  mirrorPath: string;
  /** The export directory: each export is a folder `export-<time>` in it. */
  outDir: string;
  /** Default: all four. */
  tables?: readonly TableName[];
  /** Default `parquet`. */
  format?: ExportFormat;
  /** The directory as it was at this time (a date, or a date-time with an offset). */
  asOf?: string;
  /** Continue from this manifest (a path): only what changed since it. */
  sinceManifest?: string;
  /** Continue from the newest export in `outDir`; a full export when there is none. */
  incremental?: boolean;
  /** Keep this many exports in `outDir` (the oldest beyond are deleted after a good export); 0 keeps all. */
  keep?: number;
  /** The field policy (src/sinks/field-policy.ts): what it does not let leave is absent from the files (./policy.ts). */
  policy?: FieldPolicy;
  /** The clock, for tests. */
  now?: () => Date;
}

export interface ExportResult {
  /** The export's folder. */
  dir: string;
  manifest: Manifest;
  ms: number;
  /** Export folders rotation deleted. */
  rotated: string[];
}

/** Reads the newest complete export's manifest in `outDir`, if any. */
export function latestManifest(outDir: string): { folder: string; manifest: Manifest } | undefined {
  if (!existsSync(outDir)) return undefined;
  const names = readdirSync(outDir).filter((n) => existsSync(join(outDir, n, MANIFEST_FILE)));
  const folder = newestExport(names);
  if (folder === undefined) return undefined;
  const path = join(outDir, folder, MANIFEST_FILE);
  return { folder, manifest: parseManifest(readFileSync(path, 'utf8'), path) };
}

export async function exportMirror(options: ExportOptions): Promise<ExportResult> {
  const started = Date.now();
  const now = options.now ?? (() => new Date());
  const format = options.format ?? 'parquet';
  const tables = options.tables ?? TABLES;
  const asOf = options.asOf === undefined ? undefined : toInstant(options.asOf);
  let since: Manifest | undefined;
  if (options.sinceManifest !== undefined) since = parseManifest(readFileSync(options.sinceManifest, 'utf8'), options.sinceManifest);
  else if (options.incremental === true) since = latestManifest(options.outDir)?.manifest;
  if (since !== undefined && since.format !== format)
    throw new ExportRefused(`the previous export is ${since.format}, this one would be ${format}: give the same --format`);

  const db = openMirror(options.mirrorPath, { readonly: true });
  let snapshot: ExportSnapshot | undefined;
  const createdAt = now().toISOString();
  const folder = exportFolderName(createdAt);
  const building = join(options.outDir, `.${folder}.partial-${process.pid}`);
  try {
    snapshot = new ExportSnapshot(db);
    const facts = snapshot.facts;
    const shape = exportShape(options.policy);
    const plan = planExport(
      {
        tables: tables.filter((t) => shape.writes(t)),
        format,
        ...(asOf === undefined ? {} : { asOf }),
        ...(since === undefined ? {} : { since }),
      },
      facts,
    );
    // Private like the mirror's folder when they do not exist (db/file-modes.ts checks what it made).
    createPrivateFolder(options.outDir);
    // An export killed mid-write (SIGKILL, the OOM killer, the host down) leaves its hidden folder, as large as
    // the files it had written, and nothing else would remove it; one whose process still runs is kept.
    for (const path of removeStalePartials(options.outDir))
      process.stderr.write(`removed ${path}: left by an export that did not finish\n`);
    createPrivateFolder(building);
    const written: WrittenFile[] = [];
    const kv = { 'user_mirror.schema_version': String(facts.schemaVersion), 'user_mirror.cursor': String(facts.cursor) };
    for (const planned of plan.files) {
      const rows = rowsOf(snapshot, planned, plan, facts.epoch, shape);
      written.push(await writeTableFile(building, planned.table, planned.file, format, shape.columns(planned.table), rows, kv));
    }
    snapshot.close();
    const manifest = buildManifest(plan, facts, written, createdAt, shape.id, (t) => shape.columns(t));
    writeManifest(building, manifest);
    syncFile(building);
    const dir = join(options.outDir, folder);
    renameSync(building, dir);
    syncFile(options.outDir);
    const rotated = rotateExports(options.outDir, options.keep ?? 0);
    return { dir, manifest, ms: Date.now() - started, rotated };
  } catch (err) {
    rmSync(building, { recursive: true, force: true });
    throw err;
  } finally {
    snapshot?.close();
    db.close();
  }
}

function rowsOf(
  snapshot: ExportSnapshot,
  planned: PlannedFile,
  plan: ExportPlan,
  epoch: string | null,
  shape: ExportShape,
): Iterable<ExportRecord> {
  const rows = mapped(snapshot, planned, plan, epoch);
  if (shape === NO_POLICY) return rows;
  return (function* () {
    for (const row of rows) yield shape.apply(planned.table, row);
  })();
}

/** A field policy file (JSON, src/sinks/field-policy.ts), checked and compiled; its HMAC key file read when it hashes. */
export function readPolicyFile(path: string): FieldPolicy {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ExportRefused(`field policy ${path}: ${err instanceof SyntaxError ? 'not JSON' : errorMessage(err)}`);
  }
  const parsed = FieldPolicySchema.safeParse(json);
  if (!parsed.success) throw new ExportRefused(`field policy ${path}: ${formatIssues(parsed.error.issues)}`);
  return compileFieldPolicy(parsed.data, (keyPath) => readFileSync(keyPath));
}

function* mapped(snapshot: ExportSnapshot, planned: PlannedFile, plan: ExportPlan, epoch: string | null): Generator<ExportRecord> {
  const source = planned.source;
  switch (source.table) {
    case 'users':
      if (source.rows === 'as-of') for (const v of snapshot.usersAsOf(source.at)) yield userAsOfRecord(v);
      else for (const u of snapshot.users(source.rows === 'touched' ? source.afterCursor : undefined)) yield userRecord(u);
      return;
    case 'versions':
      for (const v of snapshot.versions(source.window)) yield versionRecord(v, plan.asOf);
      return;
    case 'sources':
      for (const s of snapshot.sources(source.window)) yield sourceRecord(s, plan.asOf);
      return;
    case 'changes':
      for (const c of snapshot.changes(source.afterCursor, source.at)) yield changeRecord(c, epoch);
      return;
  }
}

function writeManifest(dir: string, manifest: Manifest): void {
  const path = join(dir, MANIFEST_FILE);
  // Created empty with the policy's mode; writing into it keeps the mode.
  createPrivateFile(path);
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, JSON.stringify(manifest, null, 2) + '\n');
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function rotateExports(outDir: string, keep: number): string[] {
  const victims = foldersToRotate(readdirSync(outDir), keep);
  for (const name of victims) rmSync(join(outDir, name), { recursive: true, force: true });
  return victims;
}
