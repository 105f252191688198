/**
 * `user-mirror webhooks`: the state of this mirror's webhook queue for the
 * receiver WEBHOOK_URL names (jobs/WEBHOOKS.md), read from Redis.
 *
 *   webhooks [--json]                       job counts per state and the dispatched cursor
 *   webhooks --failed [--json] [--limit N]  deliveries the receiver refused (or invalid jobs)
 *   webhooks retry <event_id>|--all         send failed deliveries again (after the queue's waiting ones)
 *   webhooks new-secret                     print a fresh WEBHOOK_SECRET (needs no configuration)
 *
 * `--sink NAME` (with any verb but new-secret) takes the queue of that webhook sink of SINKS_FILE
 * instead of WEBHOOK_URL's.
 *
 * Exit codes: 0 ok, 1 some retry failed, or Redis is unreachable, refuses the credentials or does not
 * answer (named within seconds: jobs/command-redis.ts), 2 usage or configuration, 3 no such job.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { FAILED_JOB_FLAGS, failedJobArgs, printable, renderTable, reportRetries } from './failed-report.js';
import { ConfigError, ConfigPass, type Config } from '../runtime/config.js';
import { QUEUE_ENV, queueSettingsFromConfig } from '../../jobs/redis-connection.js';
import { withCommandRedis } from '../../jobs/command-redis.js';
import { webhookTarget, type WebhookTarget } from '../../jobs/webhooks/contract.js';
import { sinksOf, type SinkSettings } from '../sinks/sinks-file.js';
import { listFailedWebhooks, retryAllFailedWebhooks, retryFailedWebhook, type FailedWebhook } from '../../jobs/webhooks/failed.js';
import { createWebhookQueue, type WebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { readDispatched } from '../../jobs/webhooks/delivery-state.js';

const Args = z
  .object({
    positionals: z.union(
      [z.tuple([]), z.tuple([z.literal('new-secret')]), z.tuple([z.literal('retry')]), z.tuple([z.literal('retry'), z.string().min(1)])],
      { error: "expected nothing, 'retry <event_id>|--all' or 'new-secret'" },
    ),
    ...failedJobArgs,
    sink: z
      .string()
      .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be a sink name')
      .optional(),
  })
  .superRefine((a, ctx) => {
    const retry = a.positionals[0] === 'retry';
    if (retry && a.positionals.length === 1 && !a.all)
      ctx.addIssue({ code: 'custom', path: ['all'], message: 'retry needs an event id or --all' });
    if (retry && a.positionals.length === 2 && a.all)
      ctx.addIssue({ code: 'custom', path: ['all'], message: 'give an event id or --all, not both' });
    if (!retry && a.all) ctx.addIssue({ code: 'custom', path: ['all'], message: 'only with retry' });
    if (retry && a.failed) ctx.addIssue({ code: 'custom', path: ['failed'], message: 'not with retry' });
    // Its stdout is the secret alone (`... > secret-file`): no flag may add to it.
    if (a.positionals[0] === 'new-secret' && (a.failed || a.json || a.all))
      ctx.addIssue({ code: 'custom', path: ['positionals'], message: 'new-secret takes no options' });
  });

/** Bytes of a new signing key: 256 bits, an HMAC-SHA256 key as long as its output. */
const SECRET_BYTES = 32;

/** A fresh WEBHOOK_SECRET: `whsec_` and base64 of random bytes, the Standard Webhooks form. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(SECRET_BYTES).toString('base64')}`;
}

/** WEBHOOK_URL, which every verb but new-secret needs: it names the receiver whose queue to show. */
function receiverUrl(config: Config<'WEBHOOK_URL'>): string {
  if (config.WEBHOOK_URL === undefined) throw new ConfigError(['WEBHOOK_URL: is required (the receiver whose queue to show)']);
  return config.WEBHOOK_URL;
}

/** The queue of the webhook sink `name` (SINKS_FILE). */
function sinkTarget(sinks: readonly SinkSettings[], name: string): WebhookTarget {
  const sink = sinks.find((s) => s.name === name);
  if (sink === undefined) throw new ConfigError([`--sink: SINKS_FILE names no sink "${name}"`]);
  if (sink.kind !== 'webhook') throw new ConfigError([`--sink: "${name}" is a ${sink.kind} sink, not a webhook`]);
  return webhookTarget(sink.url, { sink: sink.name });
}

export default async function main(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { ...FAILED_JOB_FLAGS, sink: { type: 'string' } }, Args);
  if (args.positionals[0] === 'new-secret') {
    process.stdout.write(`${newWebhookSecret()}\n`);
    return 0;
  }
  // One pass: the variables and the checks across them report together.
  const pass = new ConfigPass([...QUEUE_ENV, 'WEBHOOK_URL', 'MIRROR_ID', 'SINKS_FILE', 'TLS_BY_PROXY']);
  const sink = args.sink;
  const sinkList = sink === undefined ? [] : (pass.check(['SINKS_FILE'], (c) => sinksOf(c)) ?? []);
  if (sink === undefined) pass.check(['WEBHOOK_URL'], receiverUrl);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  const config = pass.done();
  const { endpoint, prefix } = queueSettingsFromConfig(config);
  const target = sink === undefined ? webhookTarget(receiverUrl(config)) : sinkTarget(sinkList, sink);
  const [verb, eventId] = args.positionals;
  // Bounded: an outage or refused credentials are named within a deadline (jobs/command-redis.ts).
  return withCommandRedis(endpoint, 'user-mirror:webhooks', async ({ redis, track }) => {
    const queue = track(createWebhookQueue(redis, { mirrorId: config.MIRROR_ID, target, prefix, readOnly: verb !== 'retry' }));
    if (verb === 'retry') {
      const results = eventId === undefined ? await retryAllFailedWebhooks(queue) : [await retryFailedWebhook(queue, eventId)];
      return reportRetries(results, eventId === undefined, args.json, 'webhook');
    }
    if (args.failed) {
      const failed = await listFailedWebhooks(queue, args.limit);
      process.stdout.write(args.json ? `${JSON.stringify(failed, null, 2)}\n` : renderFailed(failed));
      return 0;
    }
    return await reportCounts(queue, config.MIRROR_ID, args.json);
  });
}

async function reportCounts(queue: WebhookQueue, mirrorId: string, json: boolean): Promise<number> {
  const jobs = await queue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'completed');
  const dispatched = await readDispatched(queue);
  const target = queue.name.slice(queue.name.lastIndexOf('-') + 1);
  if (json) {
    process.stdout.write(`${JSON.stringify({ mirror_id: mirrorId, target, queue: queue.name, jobs, dispatched }, null, 2)}\n`);
    return 0;
  }
  const lines = [
    `mirror ${mirrorId}, target ${target}, queue ${queue.name}`,
    `dispatched through cursor ${dispatched}`,
    ...Object.entries(jobs).map(([state, n]) => `  ${state.padEnd(12)} ${n}`),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  return 0;
}

function renderFailed(rows: readonly FailedWebhook[]): string {
  if (rows.length === 0) return 'no failed webhooks\n';
  const header = ['EVENT_ID', 'CURSOR', 'USER_ID', 'ATTEMPTS', 'FAILED_AT', 'REASON'];
  const table = rows.map((r) => [
    printable(r.event_id),
    String(r.cursor ?? '-'),
    printable(r.user_id ?? '-'),
    String(r.attempts),
    r.failed_at ?? '-',
    printable(r.reason ?? '-'),
  ]);
  return renderTable(header, table);
}
