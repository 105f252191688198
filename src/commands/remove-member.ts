/**
 * `user-mirror remove-member <org_id> <member_id> [--requested-by X]
 * [--reason Y] [--wait [--timeout S]]`: enqueues one removal and prints its
 * job id; with --wait, also its outcome.
 *
 * The removal is for the management service MANAGEMENT_URL names (only the
 * URL is read, never MANAGEMENT_KEY): it goes to that target's queue, and
 * only a worker configured with the same URL performs it.
 *
 * Exit codes: 0 queued (or, with --wait, removed or already absent),
 * 1 the removal failed or --timeout passed, or Redis is unreachable, refuses
 * the credentials or does not answer (named within seconds:
 * jobs/command-redis.ts), 2 bad arguments or configuration.
 */
import { userInfo } from 'node:os';
import { z } from 'zod';
import { Job, QueueEvents } from 'bullmq';
import { UsageError, parseCommandArgs } from './args.js';
import { errorMessage } from '../runtime/line-text.js';
import { readWithQueueSettings } from '../../jobs/redis-connection.js';
import { withCommandRedis } from '../../jobs/command-redis.js';
import { enqueueMemberRemoval } from '../../jobs/removals/producer.js';
import { createRemovalQueue } from '../../jobs/removals/queue-handle.js';
import { RemovalResultSchema, checkRemovalPayload } from '../../jobs/removals/contract.js';
import { urlTarget } from '../../jobs/url-target.js';

const Args = z
  .object({
    positionals: z.tuple([z.string(), z.string()], { error: 'expected <org_id> <member_id>' }),
    'requested-by': z.string().optional(),
    reason: z.string().optional(),
    wait: z.boolean().default(false),
    timeout: z.coerce.number({ error: 'must be a number of seconds' }).positive('must be > 0').max(86_400).optional(),
  })
  .refine((a) => a.wait || a.timeout === undefined, { message: 'only makes sense with --wait', path: ['timeout'] });

const DEFAULT_WAIT_S = 120;

const OPTIONS = {
  'requested-by': { type: 'string' },
  reason: { type: 'string' },
  wait: { type: 'boolean' },
  timeout: { type: 'string' },
} as const;

export default async function main(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, OPTIONS, Args);
  const {
    config,
    queue: { endpoint, prefix },
  } = readWithQueueSettings(['MANAGEMENT_URL', 'REMOVAL_ATTEMPTS', 'REMOVAL_BACKOFF_MS']);
  const target = urlTarget(config.MANAGEMENT_URL);
  const [orgId, memberId] = args.positionals;
  const timeoutS = args.timeout ?? DEFAULT_WAIT_S;

  const request = {
    org_id: orgId,
    member_id: memberId,
    requested_by: args['requested-by'] ?? defaultRequester(),
    reason: args.reason,
  };
  // Refuse a bad request before connecting to anything.
  const checked = checkRemovalPayload({ ...request, target: target.id });
  if (!checked.ok) throw new UsageError(`invalid removal request: ${checked.reason}`);

  // Bounded: an outage or refused credentials are named within a deadline (jobs/command-redis.ts).
  return withCommandRedis(endpoint, 'user-mirror:remove-member', async ({ redis, connect, track }) => {
    const queue = track(createRemovalQueue(redis, { target, prefix }));
    // Listening must start before the job can finish, or a fast worker's "completed" is missed.
    // Blocking reads need a connection that never gives up on a command.
    const events = args.wait ? track(new QueueEvents(queue.name, { connection: await connect('worker'), prefix })) : undefined;
    await events?.waitUntilReady();
    const enqueued = await enqueueMemberRemoval(queue, request, {
      policy: { attempts: config.REMOVAL_ATTEMPTS, backoffMs: config.REMOVAL_BACKOFF_MS },
    });
    const { jobId, payload } = enqueued;
    const what = `member ${payload.member_id} of org ${payload.org_id}`;
    process.stdout.write(
      enqueued.deduplicated
        ? `job ${jobId}: a removal of ${what} is already pending; request collapsed into it\n`
        : `job ${jobId}: queued removal of ${what} at ${target.url} (target ${target.id})\n`,
    );
    if (events === undefined) return 0;

    const job = await Job.fromId(queue, jobId);
    if (job === undefined) {
      // Completed and already evicted, or removed by an operator: its outcome is no longer in Redis.
      process.stdout.write(`job ${jobId}: no longer in the queue; see the audit (user-mirror removals)\n`);
      return 1;
    }
    try {
      const value: unknown = await job.waitUntilFinished(events, timeoutS * 1000);
      const result = RemovalResultSchema.safeParse(value);
      const status = result.success ? result.data.status : 'succeeded';
      process.stdout.write(
        status === 'succeeded' ? `job ${jobId}: succeeded (member removed)\n` : `job ${jobId}: already_absent (member was already gone)\n`,
      );
      return 0;
    } catch (err) {
      const message = errorMessage(err);
      if (/timed out before finishing/.test(message)) {
        process.stdout.write(`job ${jobId}: still pending after ${timeoutS}s (it keeps running; check user-mirror removals)\n`);
      } else {
        process.stdout.write(`job ${jobId}: failed: ${message}\n`);
      }
      return 1;
    }
  });
}

/** Who asked, for the audit, when --requested-by is not given. */
function defaultRequester(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return 'cli';
  }
}
