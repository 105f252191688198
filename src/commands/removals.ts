/**
 * `user-mirror removals`: the state of the member-removal queue.
 *
 *   removals                        job counts per state (and audit counts, if AUDIT_DB exists)
 *   removals --failed [--json] [--limit N]
 *                                   failed removals: BullMQ's failed set joined with the audit
 *   removals retry <job_id>         re-queue one failed job with a fresh attempt budget
 *   removals retry --all            re-queue every failed job
 *
 * Exit codes: 0 ok, 1 some retry failed, 2 usage or configuration, 3 no such job.
 */
import { existsSync } from 'node:fs';
import { z } from 'zod';
import { parseCommandArgs } from '../cli-args.js';
import { QUEUE_ENV, readConfig } from '../config.js';
import type { Db } from '../../db/open.js';
import { openAudit } from '../../db/open-audit.js';
import { AUDIT_LOCATION_ENV, auditLocation } from '../audit-location.js';
import { createRemovalAudit } from '../../db/removal-audit.js';
import { createRedisConnection } from '../../jobs/redis-connection.js';
import { createRemovalQueue, type RemovalQueue } from '../../jobs/removal-producer.js';
import {
  listFailedRemovals,
  retryAllFailedRemovals,
  retryFailedRemoval,
  type FailedRemoval,
  type RetryResult,
} from '../../jobs/failed-removals.js';

const OPTIONS = {
  failed: { type: 'boolean' },
  json: { type: 'boolean' },
  limit: { type: 'string' },
  all: { type: 'boolean' },
} as const;

const Args = z
  .object({
    positionals: z.union([z.tuple([]), z.tuple([z.literal('retry')]), z.tuple([z.literal('retry'), z.string().min(1)])], {
      error: "expected nothing, 'retry <job_id>' or 'retry --all'",
    }),
    failed: z.boolean().default(false),
    json: z.boolean().default(false),
    all: z.boolean().default(false),
    limit: z.coerce.number().int().min(1).max(100_000).default(1_000),
  })
  .superRefine((a, ctx) => {
    const retry = a.positionals[0] === 'retry';
    if (retry && a.positionals.length === 1 && !a.all) ctx.addIssue({ code: 'custom', path: ['all'], message: 'retry needs a job id or --all' });
    if (retry && a.positionals.length === 2 && a.all) ctx.addIssue({ code: 'custom', path: ['all'], message: 'give a job id or --all, not both' });
    if (!retry && a.all) ctx.addIssue({ code: 'custom', path: ['all'], message: 'only with retry' });
    if (retry && a.failed) ctx.addIssue({ code: 'custom', path: ['failed'], message: 'not with retry' });
  });

export default async function main(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, OPTIONS, Args);
  const config = readConfig([...QUEUE_ENV, ...AUDIT_LOCATION_ENV]);
  const auditPath = auditLocation(config);
  const redis = createRedisConnection(config.REDIS_URL, { role: 'producer', connectionName: 'user-mirror:removals' });
  const queue = createRemovalQueue(redis, config.QUEUE_PREFIX);
  // Read-only and optional: this command may run where the worker's audit file is not.
  const db: Db | undefined = existsSync(auditPath) ? openAudit(auditPath, { readonly: true }) : undefined;
  try {
    if (args.positionals[0] === 'retry') {
      const jobId = args.positionals[1];
      const results = jobId === undefined ? await retryAllFailedRemovals(queue) : [await retryFailedRemoval(queue, jobId)];
      return reportRetries(results, jobId === undefined, args.json);
    }
    if (args.failed) {
      const audit = db !== undefined && hasAuditTable(db) ? createRemovalAudit(db) : undefined;
      const failed = await listFailedRemovals(queue, audit, args.limit);
      process.stdout.write(args.json ? `${JSON.stringify(failed, null, 2)}\n` : renderFailed(failed));
      return 0;
    }
    return await reportCounts(queue, db, args.json);
  } finally {
    db?.close();
    await queue.close().catch(() => undefined);
    redis.disconnect();
  }
}

async function reportCounts(queue: RemovalQueue, db: Db | undefined, json: boolean): Promise<number> {
  const jobs = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed');
  const audit =
    db !== undefined && hasAuditTable(db)
      ? Object.fromEntries(
          db
            .prepare<[], { status: string; n: number }>('SELECT status, count(*) AS n FROM member_removals GROUP BY status ORDER BY status')
            .all()
            .map((r) => [r.status, r.n]),
        )
      : undefined;
  if (json) {
    process.stdout.write(`${JSON.stringify({ queue: jobs, audit: audit ?? null }, null, 2)}\n`);
    return 0;
  }
  const lines = ['queue:', ...Object.entries(jobs).map(([state, n]) => `  ${state.padEnd(12)} ${n}`)];
  if (audit !== undefined) lines.push('audit:', ...Object.entries(audit).map(([status, n]) => `  ${status.padEnd(14)} ${n}`));
  else lines.push('audit: (no audit database at AUDIT_DB)');
  process.stdout.write(`${lines.join('\n')}\n`);
  return 0;
}

function reportRetries(results: readonly RetryResult[], all: boolean, json: boolean): number {
  if (json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  for (const r of results) {
    if (json) break;
    if (r.result === 'retried') process.stdout.write(`job ${r.jobId}: re-queued\n`);
    else if (r.result === 'not_found') process.stderr.write(`job ${r.jobId}: no such job\n`);
    else process.stderr.write(`job ${r.jobId}: is ${r.state}, not failed; left alone\n`);
  }
  if (all && !json) process.stdout.write(`${results.filter((r) => r.result === 'retried').length} failed removal(s) re-queued\n`);
  if (!all && results[0]?.result === 'not_found') return 3;
  return results.every((r) => r.result === 'retried') ? 0 : 1;
}

function renderFailed(rows: readonly FailedRemoval[]): string {
  if (rows.length === 0) return 'no failed removals\n';
  const header = ['JOB_ID', 'ORG_ID', 'MEMBER_ID', 'ATTEMPTS', 'FAILED_AT', 'RETRYABLE', 'REASON'];
  const table = rows.map((r) => [
    r.job_id,
    printable(r.org_id ?? '-'),
    printable(r.member_id ?? '-'),
    String(r.attempts),
    r.failed_at ?? '-',
    r.in_queue ? 'yes' : 'no',
    printable(r.reason ?? '-'),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => (i === header.length - 1 ? 0 : (row[i] ?? '').length))));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ');
  return `${[line(header), ...table.map(line)].join('\n')}\n`;
}

/** Stored text came from callers: keep one row per line and no terminal escapes. */
function printable(text: string): string {
  const flat = text.replace(/[\u0000-\u001f\u007f]/g, ' ');
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat;
}

function hasAuditTable(db: Db): boolean {
  return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'member_removals'").get() !== undefined;
}
