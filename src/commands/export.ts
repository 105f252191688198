/**
 * `user-mirror export [--out <dir>] [--tables users,versions,sources,changes] [--as-of <time>]
 *  [--format parquet|ndjson] [--since-manifest <file> | --incremental] [--policy <file>] [--json]`
 *
 * The mirror as files for a lake (src/export/run.ts): users, versions,
 * sources and changes as typed Parquet (or NDJSON), from one read snapshot,
 * with a manifest, into `<out>/export-<time>/`. `--out` defaults to
 * EXPORT_DIR. Without `--as-of`, `--since-manifest` or `--incremental`:
 * everything. With EXPORT_DIR and no other option but `--json` it is the
 * scheduled form (the daemon runs it on EXPORT_CRON): incremental from the
 * newest export there (full for the first, or when the mirror's feed was
 * rebuilt), rotated to EXPORT_KEEP, and `last-export.json` written whether
 * it succeeded or not, for `status` and `/metrics`.
 *
 * Exit codes: 0 written; 1 the export failed (nothing left under its name);
 * 2 usage or configuration error, or an export the mirror cannot give (an
 * as-of time before history, an incremental export from another feed).
 */
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig } from '../runtime/config.js';
import { ExportRefused } from '../export/plan.js';
import { exportMirror, readPolicyFile, type ExportResult } from '../export/run.js';
import type { FieldPolicy } from '../sinks/field-policy.js';
import { errorMessage } from '../runtime/line-text.js';
import { exportIntoFolder } from '../export/scheduled.js';
import { TABLES } from '../export/tables.js';

const Args = z.object({
  out: z.string().min(1, 'must not be empty').optional(),
  tables: z
    .string()
    .transform((s) => s.split(',').map((t) => t.trim()))
    .pipe(z.array(z.enum(TABLES, { error: `must list tables among ${TABLES.join(', ')}` })).min(1))
    .optional(),
  'as-of': z.string().min(1, 'must not be empty').optional(),
  format: z.enum(['parquet', 'ndjson'], { error: 'must be parquet or ndjson' }).optional(),
  'since-manifest': z.string().min(1, 'must not be empty').optional(),
  policy: z.string().min(1, 'must not be empty').optional(),
  incremental: z.boolean().optional(),
  json: z.boolean().optional(),
  positionals: z.array(z.string()).max(0, 'takes no positional argument'),
});

export default async function exportCommand(argv: string[]): Promise<number> {
  const args = parseCommandArgs(
    argv,
    {
      out: { type: 'string' },
      tables: { type: 'string' },
      'as-of': { type: 'string' },
      format: { type: 'string' },
      'since-manifest': { type: 'string' },
      policy: { type: 'string' },
      incremental: { type: 'boolean' },
      json: { type: 'boolean' },
    },
    Args,
  );
  const config = readConfig(['MIRROR_DB', 'EXPORT_DIR', 'EXPORT_KEEP', 'EXPORT_POLICY']);
  if (args['since-manifest'] !== undefined && args.incremental === true)
    throw new UsageError('--since-manifest names the export to continue from; --incremental takes the newest in the folder: give one');
  const out = args.out ?? config.EXPORT_DIR;
  const policyFile = args.policy ?? config.EXPORT_POLICY;
  let policy: FieldPolicy | undefined;
  try {
    policy = policyFile === undefined ? undefined : readPolicyFile(policyFile);
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }
  if (out === undefined) throw new UsageError('give --out <dir>, or set EXPORT_DIR');
  const scheduled =
    args.out === undefined &&
    args.tables === undefined &&
    args['as-of'] === undefined &&
    args.format === undefined &&
    args.policy === undefined &&
    args['since-manifest'] === undefined &&
    args.incremental === undefined;
  if (scheduled) {
    const record = await exportIntoFolder(out, config.MIRROR_DB, config.EXPORT_KEEP, policy === undefined ? {} : { policy });
    if (!record.ok) {
      process.stderr.write(`export failed: ${record.error ?? 'unknown'}\n`);
      if (args.json === true) process.stdout.write(JSON.stringify(record) + '\n');
      return 1;
    }
    process.stdout.write(args.json === true ? JSON.stringify(record) + '\n' : `${record.dir ?? out}\n`);
    return 0;
  }
  let result: ExportResult;
  try {
    result = await exportMirror({
      mirrorPath: config.MIRROR_DB,
      outDir: out,
      ...(args.tables === undefined ? {} : { tables: args.tables }),
      ...(args.format === undefined ? {} : { format: args.format }),
      ...(args['as-of'] === undefined ? {} : { asOf: args['as-of'] }),
      ...(args['since-manifest'] === undefined ? {} : { sinceManifest: args['since-manifest'] }),
      ...(args.incremental === true ? { incremental: true } : {}),
      ...(policy === undefined ? {} : { policy }),
    });
  } catch (err) {
    if (err instanceof ExportRefused) throw new UsageError(err.message);
    throw err;
  }
  if (args.json === true) {
    process.stdout.write(JSON.stringify({ dir: result.dir, ms: result.ms, manifest: result.manifest }) + '\n');
    return 0;
  }
  const m = result.manifest;
  const lines = [`${m.kind} export: ${result.dir}`, `  snapshot: cursor ${m.snapshot.cursor}, ${m.snapshot.at ?? 'no publish yet'}`];
  for (const f of m.files) lines.push(`  ${f.file.padEnd(18)} ${String(f.rows).padStart(10)} rows ${String(f.bytes).padStart(12)} bytes`);
  lines.push(`  in ${result.ms} ms`);
  process.stdout.write(lines.join('\n') + '\n');
  return 0;
}
