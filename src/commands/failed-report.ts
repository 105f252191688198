/**
 * How `removals` and `webhooks` show failed jobs and their retries: the
 * failed list as a table, and for a retry a line per job (stdout for
 * re-queued, stderr otherwise) or the JSON results, and the exit code
 * (0 all re-queued, 1 some not, 3 the one job asked for does not exist).
 */
import { z } from 'zod';
import type { RetryResult } from '../../jobs/retry-failed.js';
import { echoId } from '../runtime/line-text.js';

/** The flags of a command with a failed list and retries (`removals`, `webhooks`), for parseCommandArgs. */
export const FAILED_JOB_FLAGS = {
  failed: { type: 'boolean' },
  json: { type: 'boolean' },
  limit: { type: 'string' },
  all: { type: 'boolean' },
} as const;

/** Their meaning, for the command's zod schema (beside its `positionals`). */
export const failedJobArgs = {
  failed: z.boolean().default(false),
  json: z.boolean().default(false),
  all: z.boolean().default(false),
  limit: z.coerce.number().int().min(1).max(100_000).default(1_000),
};

/** `noun` names what a job is (`removal`, `webhook`) in the total line of `--all`. */
export function reportRetries(results: readonly RetryResult[], all: boolean, json: boolean, noun: string): number {
  if (json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  for (const r of results) {
    if (json) break;
    if (r.result === 'retried') process.stdout.write(`job ${r.jobId}: re-queued\n`);
    else if (r.result === 'not_found') process.stderr.write(`job ${echoId(r.jobId)}: no such job\n`);
    else process.stderr.write(`job ${r.jobId}: is ${r.state}, not failed; left alone\n`);
  }
  if (all && !json) process.stdout.write(`${results.filter((r) => r.result === 'retried').length} failed ${noun}(s) re-queued\n`);
  if (!all && results[0]?.result === 'not_found') return 3;
  return results.every((r) => r.result === 'retried') ? 0 : 1;
}

/** Columns padded to their widest cell; the last one (a reason) runs free. Cells must be `printable`. */
export function renderTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (i === header.length - 1 ? 0 : (row[i] ?? '').length))));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ');
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

/** Stored text came from callers: keep one row per line and no terminal escapes. */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  const flat = text.replace(/[\u0000-\u001f\u007f]/g, ' ');
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat;
}
