/**
 * `user-mirror removals`: the state of the member-removal queue of the
 * management target MANAGEMENT_URL names, read from Redis, so it is the
 * whole estate's (every host's workers), not this host's share.
 *
 *   removals [--json]               job counts per state; recent outcomes per host (from Redis);
 *                                   this host's audit counts; removals without a target, if any
 *   removals --failed [--json] [--limit N]
 *                                   failed removals: BullMQ's failed set joined with this host's audit,
 *                                   with the host whose worker failed each (its audit holds the row)
 *   removals retry <job_id>|--all   re-queue failed jobs with a fresh attempt budget
 *   removals adopt <job_id>|--all   move removals queued without a target (an older producer) into
 *                                   this target's queue (jobs/removals/unbound.ts)
 *   removals target                 print this MANAGEMENT_URL's target id and queue (for producers)
 *
 * Exit codes: 0 ok, 1 some retry or adoption failed, or (listing) this host's
 * audit cannot be written (a worker here could not record its removals:
 * read-only, not this account's, a full disk; said first), or Redis is
 * unreachable, refuses the credentials or does not answer (named within
 * seconds: jobs/command-redis.ts), 2 usage or configuration, 3 no such job.
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { FAILED_JOB_FLAGS, failedJobArgs, printable, renderTable, reportRetries } from './failed-report.js';
import type { Db } from '../../db/open.js';
import { auditLocation, openAudit } from '../../db/open-audit.js';
import { checkAuditLocation } from '../runtime/audit-location-check.js';
import { hasTable } from '../../db/has-table.js';
import { createRemovalAudit, removalCountsByStatus } from '../../db/removal-audit.js';
import { whyNotWritable } from '../runtime/writable-file.js';
import { echoId, errorMessage } from '../runtime/line-text.js';
import { readWithQueueSettings } from '../../jobs/redis-connection.js';
import { withCommandRedis } from '../../jobs/command-redis.js';
import { createRemovalQueue, type RemovalQueue } from '../../jobs/removals/queue-handle.js';
import { removalQueueName, type ManagementTarget } from '../../jobs/removals/contract.js';
import {
  adoptUnbound,
  countUnbound,
  openUnboundQueue,
  unboundTotal,
  UNBOUND_FIX,
  type AdoptResult,
  type UnboundCounts,
} from '../../jobs/removals/unbound.js';
import {
  listFailedRemovals,
  recentOutcomesByHost,
  retryAllFailedRemovals,
  retryFailedRemoval,
  type FailedRemoval,
  type HostOutcomes,
} from '../../jobs/removals/failed.js';
import { urlTarget } from '../../jobs/url-target.js';
import { AUDIT_LOCATION_ENV } from '../../db/audit-location.js';

const Args = z
  .object({
    positionals: z.union(
      [
        z.tuple([]),
        z.tuple([z.literal('target')]),
        z.tuple([z.enum(['retry', 'adopt'])]),
        z.tuple([z.enum(['retry', 'adopt']), z.string().min(1)]),
      ],
      { error: "expected nothing, 'retry <job_id>|--all', 'adopt <job_id>|--all' or 'target'" },
    ),
    ...failedJobArgs,
  })
  .superRefine((a, ctx) => {
    const verb = a.positionals[0];
    const bulk = verb === 'retry' || verb === 'adopt';
    if (bulk && a.positionals.length === 1 && !a.all)
      ctx.addIssue({ code: 'custom', path: ['all'], message: `${verb} needs a job id or --all` });
    if (bulk && a.positionals.length === 2 && a.all)
      ctx.addIssue({ code: 'custom', path: ['all'], message: 'give a job id or --all, not both' });
    if (!bulk && a.all) ctx.addIssue({ code: 'custom', path: ['all'], message: 'only with retry or adopt' });
    if (verb !== undefined && a.failed) ctx.addIssue({ code: 'custom', path: ['failed'], message: `not with ${verb}` });
  });

export default async function main(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, FAILED_JOB_FLAGS, Args);
  const {
    config,
    queue: { endpoint, prefix },
  } = readWithQueueSettings([...AUDIT_LOCATION_ENV, 'MANAGEMENT_URL', 'REMOVAL_ATTEMPTS', 'REMOVAL_BACKOFF_MS'], process.env, (pass) =>
    pass.check(AUDIT_LOCATION_ENV, checkAuditLocation),
  );
  const target = urlTarget(config.MANAGEMENT_URL);
  if (args.positionals[0] === 'target') return reportTarget(target, prefix, args.json);
  const auditPath = auditLocation(config);
  const writes = args.positionals[0] === 'retry' || args.positionals[0] === 'adopt';
  // Bounded: an outage or refused credentials are named within a deadline (jobs/command-redis.ts).
  return withCommandRedis(endpoint, 'user-mirror:removals', async ({ redis, track }) => {
    const queue = track(createRemovalQueue(redis, { target, prefix, readOnly: !writes }));
    const unbound = track(openUnboundQueue(redis, prefix, !writes));
    // Read-only and optional: this command may run where the worker's audit file is not.
    let db: Db | undefined;
    let auditProblem = whyNotWritable(auditPath);
    try {
      db = existsSync(auditPath) ? openAudit(auditPath, { readonly: true }) : undefined;
    } catch (err) {
      auditProblem = `${auditPath}: cannot be read (${errorMessage(err)})`;
    }
    try {
      const [verb, jobId] = args.positionals;
      if (verb === 'retry') {
        const results = jobId === undefined ? await retryAllFailedRemovals(queue) : [await retryFailedRemoval(queue, jobId)];
        return reportRetries(results, jobId === undefined, args.json, 'removal');
      }
      if (verb === 'adopt') {
        const policy = { attempts: config.REMOVAL_ATTEMPTS, backoffMs: config.REMOVAL_BACKOFF_MS };
        const results = await adoptUnbound(unbound, queue, jobId === undefined ? 'all' : { jobId }, policy);
        return reportAdoptions(results, target, jobId === undefined, args.json);
      }
      if (args.failed) {
        const audit = db !== undefined && hasTable(db, 'member_removals') ? createRemovalAudit(db) : undefined;
        const failed = await listFailedRemovals(queue, audit, args.limit);
        process.stdout.write(args.json ? `${JSON.stringify(failed, null, 2)}\n` : renderFailed(failed));
        return auditVerdict(auditProblem, args.json);
      }
      const code = await reportCounts({
        queue,
        unbound: await countUnbound(unbound),
        db,
        auditPath,
        auditProblem,
        target,
        json: args.json,
      });
      return Math.max(code, auditVerdict(auditProblem, args.json));
    } finally {
      db?.close();
    }
  });
}

function reportTarget(target: ManagementTarget, prefix: string, json: boolean): number {
  const queue = removalQueueName(target.id);
  const facts = { target: target.id, management_url: target.url, queue, prefix, keys: `${prefix}:${queue}:*` };
  if (json) process.stdout.write(`${JSON.stringify(facts, null, 2)}\n`);
  else
    process.stdout.write(
      Object.entries(facts)
        .map(([k, v]) => `${k.padEnd(15)} ${v}`)
        .join('\n') + '\n',
    );
  return 0;
}

/**
 * 1 when this host's audit cannot be written: said on stderr (the JSON on stdout carries it as
 * `audit.writable`), since a removal worker here would hold every removal until it can record it.
 */
function auditVerdict(problem: string | undefined, json: boolean): number {
  if (problem === undefined) return 0;
  if (!json) process.stderr.write(`user-mirror: AUDIT NOT WRITABLE ${problem}: a removal worker on this host cannot record what it does\n`);
  return 1;
}

interface CountsInput {
  queue: RemovalQueue;
  unbound: UnboundCounts;
  db: Db | undefined;
  auditPath: string;
  auditProblem: string | undefined;
  target: ManagementTarget;
  json: boolean;
}

async function reportCounts({ queue, unbound, db, auditPath, auditProblem, target, json }: CountsInput): Promise<number> {
  const jobs = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed');
  const hosts = await recentOutcomesByHost(queue);
  const audit = db === undefined ? undefined : removalCountsByStatus(db);
  const thisHost = hostname();
  if (json) {
    const out = {
      target: { id: target.id, url: target.url, queue: queue.name },
      queue: jobs,
      hosts,
      unbound,
      audit: {
        host: thisHost,
        path: auditPath,
        counts: audit ?? null,
        writable: auditProblem === undefined,
        problem: auditProblem ?? null,
      },
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    return 0;
  }
  const lines = [
    `target: ${target.id} (${target.url}), queue ${queue.name}`,
    'queue (all hosts, from Redis):',
    ...Object.entries(jobs).map(([state, n]) => `  ${state.padEnd(12)} ${n}`),
    ...renderHosts(hosts),
  ];
  if (audit !== undefined) {
    lines.push(
      `audit of this host (${thisHost}, ${auditPath}):`,
      ...Object.entries(audit).map(([status, n]) => `  ${status.padEnd(14)} ${n}`),
    );
  } else {
    lines.push(`audit of this host (${thisHost}): none at ${auditPath}`);
  }
  lines.push("  (each host's worker writes its own audit file: rows for outcomes recorded elsewhere are on those hosts)");
  if (unboundTotal(unbound) > 0) {
    lines.push(
      `removals without a target (queue member-removals): ${Object.entries(unbound)
        .filter(([, n]) => n > 0)
        .map(([s, n]) => `${s} ${n}`)
        .join(', ')}`,
      `  ${UNBOUND_FIX}`,
    );
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  return 0;
}

function renderHosts(hosts: readonly HostOutcomes[]): string[] {
  if (hosts.length === 0) return [];
  return [
    `recent outcomes by the host whose audit recorded them (last ${hosts.reduce((n, h) => n + h.total, 0)} finished jobs in Redis):`,
    ...hosts.map(
      (h) =>
        `  ${h.host.padEnd(24)} ${Object.entries(h.outcomes)
          .map(([s, n]) => `${s} ${n}`)
          .join(', ')}`,
    ),
  ];
}

function reportAdoptions(results: readonly AdoptResult[], target: ManagementTarget, all: boolean, json: boolean): number {
  if (json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  for (const r of results) {
    if (json) break;
    if (r.result === 'adopted') {
      process.stdout.write(
        `job ${r.jobId}: moved to target ${target.id} as job ${r.into}${r.deduplicated ? ' (collapsed into a pending removal)' : ''}\n`,
      );
    } else if (r.result === 'invalid') process.stderr.write(`job ${r.jobId}: left where it is: ${r.reason}\n`);
    else if (r.result === 'running') process.stderr.write(`job ${r.jobId}: an older worker is running it; left alone\n`);
    else process.stderr.write(`job ${echoId(r.jobId)}: no such job in the queue without a target\n`);
  }
  if (all && !json)
    process.stdout.write(
      `${results.filter((r) => r.result === 'adopted').length} removal(s) moved to target ${target.id} (${target.url})\n`,
    );
  if (!all && results[0]?.result === 'not_found') return 3;
  return results.every((r) => r.result === 'adopted') ? 0 : 1;
}

function renderFailed(rows: readonly FailedRemoval[]): string {
  if (rows.length === 0) return 'no failed removals\n';
  const header = ['JOB_ID', 'ORG_ID', 'MEMBER_ID', 'ATTEMPTS', 'FAILED_AT', 'HOST', 'RETRYABLE', 'REASON'];
  const table = rows.map((r) => [
    r.job_id,
    printable(r.org_id ?? '-'),
    printable(r.member_id ?? '-'),
    String(r.attempts),
    r.failed_at ?? '-',
    printable(r.host ?? '-'),
    r.retryable ? 'yes' : r.in_queue ? 'no (invalid payload)' : 'no (not in the queue)',
    printable(r.reason ?? '-'),
  ]);
  return renderTable(header, table);
}
