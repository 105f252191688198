/**
 * The member-removal queue contract. Any service with a BullMQ client (Node,
 * Python, Elixir, PHP) can enqueue removals; see jobs/REMOVAL-QUEUE.md.
 *
 *   target     a fingerprint of MANAGEMENT_URL (16 hex digits, `managementTarget`)
 *   queue      `member-removals-<target>`, key prefix = QUEUE_PREFIX (default `user-mirror`)
 *   job name   `remove-member`
 *   payload    `{ target, org_id, member_id, requested_by?, reason? }`, strict JSON
 *   options    attempts, `backoff: { type: 'removal', delay }`, `deduplication: { id }`
 *
 * A removal is bound to the management service it is meant for, twice: the
 * queue's name routes it (a worker only ever fetches from its own target's
 * queue, so a sandbox worker and a production worker on one Redis never see
 * each other's jobs), and the payload's `target` is checked before any
 * request (a job that reached the wrong queue, by hand or by a buggy
 * producer, is failed, never performed). The key is never part of either.
 *
 * Everything here is pure: names, the payload schema, the options a producer
 * must send, and how the target and deduplication ids are derived.
 */
import { z } from 'zod';
import type { JobsOptions } from 'bullmq';
import { formatIssues } from '../../src/runtime/zod-issues.js';
import { UnreadableJob } from '../unreadable-job.js';
import type { UrlTarget } from '../url-target.js';

/**
 * The queue of jobs written before removals named their target. No worker
 * takes from it: which environment a job there was meant for is unknown.
 * `removals`, `status` and the daemon report its jobs, and `removals adopt`
 * moves them into a target's queue on the operator's word.
 */
export const UNBOUND_REMOVAL_QUEUE = 'member-removals';
export const REMOVE_MEMBER_JOB = 'remove-member';
/** The key prefix when a producer or worker is given no QUEUE_PREFIX (also the configuration's default). */
export const DEFAULT_QUEUE_PREFIX = 'user-mirror';
/** The custom backoff type the removal worker implements (exponential + jitter, Retry-After as a floor). */
const REMOVAL_BACKOFF_TYPE = 'removal';

const MAX_REQUESTED_BY = 200;
export const MAX_REASON = 1_000;
/** Bigger than any valid payload; BullMQ refuses larger ones at `add`, before Redis sees them. */
const MAX_PAYLOAD_BYTES = 8_192;

// Upstream ids are UUIDs and a malformed one gets a 422 anyway; checking the
// shape here means `/`, `..`, `%2F` or a megabyte of text never reach a URL.
// `guid` accepts any 8-4-4-4-12 hex id, not only RFC 9562 versions, because
// the service does not promise which UUID version it issues.
const Id = z.guid({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a UUID') }).transform((id) => id.toLowerCase());

// Control characters would let a caller forge log lines or terminal output.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const NO_CONTROLS = /^[^\u0000-\u001f\u007f]*$/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const NO_CONTROLS_EXCEPT_NEWLINE = /^[^\u0000-\u0008\u000b-\u001f\u007f]*$/;

const Target = z
  .string({
    error: (issue) => (issue.input === undefined ? 'is required (the management target this removal is for)' : 'must be a string'),
  })
  .regex(/^[0-9a-f]{16}$/, 'must be a management target id (16 lower-case hex digits; `user-mirror removals target` prints it)');

/**
 * `null` is accepted for the optional fields because producers in other
 * languages serialise "absent" that way; it is normalised to absent.
 */
export const RemovalPayloadSchema = z.strictObject({
  target: Target,
  org_id: Id,
  member_id: Id,
  requested_by: z
    .string()
    .min(1, 'must not be empty')
    .max(MAX_REQUESTED_BY, `must be at most ${MAX_REQUESTED_BY} characters`)
    .regex(NO_CONTROLS, 'must not contain control characters')
    .nullish()
    .transform((v) => v ?? undefined),
  reason: z
    .string()
    .max(MAX_REASON, `must be at most ${MAX_REASON} characters`)
    .regex(NO_CONTROLS_EXCEPT_NEWLINE, 'must not contain control characters other than newline and tab')
    .nullish()
    .transform((v) => v ?? undefined),
});

/** What a producer asks for; the typed producer adds the target of its queue. */
export type RemovalRequest = Omit<z.input<typeof RemovalPayloadSchema>, 'target'>;
/** What the worker acts on: ids lower-cased, optional fields absent rather than null. */
export type RemovalPayload = z.output<typeof RemovalPayloadSchema>;

export type PayloadCheck = { ok: true; payload: RemovalPayload } | { ok: false; reason: string };

/** Validates a payload; the reason names fields, never echoes values (a value may be huge or hostile). */
export function checkRemovalPayload(data: unknown): PayloadCheck {
  const parsed = RemovalPayloadSchema.safeParse(data);
  if (parsed.success) return { ok: true, payload: parsed.data };
  const issues = parsed.error.issues.map((issue) =>
    issue.code === 'unrecognized_keys' ? { ...issue, message: `unexpected field(s): ${describeKeys(issue.keys)}` } : issue,
  );
  return { ok: false, reason: formatIssues(issues) };
}

/** Unknown keys are caller-chosen text: shown short and printable. */
function describeKeys(keys: readonly string[]): string {
  const shown = keys.slice(0, 5).map((k) => JSON.stringify(k.length > 40 ? `${k.slice(0, 40)}…` : k));
  return keys.length > 5 ? `${shown.join(', ')} and ${keys.length - 5} more` : shown.join(', ');
}

/**
 * What a job looks like to the worker serving `target` before it trusts
 * anything in it. `kind` tells a malformed job from one meant for another
 * management service (never performed here, whatever else it says).
 */
export function checkRemovalJob(
  name: string | undefined,
  data: unknown,
  target: ManagementTarget,
): PayloadCheck | { ok: false; reason: string; wrongTarget: true } {
  if (data instanceof UnreadableJob) return { ok: false, reason: data.reason };
  if (name !== REMOVE_MEMBER_JOB) {
    return { ok: false, reason: `unknown job name (expected '${REMOVE_MEMBER_JOB}')` };
  }
  const checked = checkRemovalPayload(data);
  if (checked.ok && checked.payload.target !== target.id) {
    return {
      ok: false,
      wrongTarget: true,
      reason: `wrong management target: the job is for target ${checked.payload.target}, this worker serves ${target.id} (${target.url}); not performed`,
    };
  }
  return checked;
}

/** A management service as the queue names it (its URL's fingerprint, jobs/url-target.ts): never its key. */
export type ManagementTarget = UrlTarget;

/** BullMQ queue names may not contain ':'. */
export function removalQueueName(targetId: string): string {
  return `member-removals-${targetId}`;
}

/**
 * Same (org, member) => same id, whatever the case of the UUIDs, so requests
 * for a member whose removal is waiting, delayed or running collapse into
 * that job. Once it completes or fails the id is free again.
 */
export function removalDedupId(payload: Pick<RemovalPayload, 'org_id' | 'member_id'>): string {
  return `member-removal:${payload.org_id.toLowerCase()}:${payload.member_id.toLowerCase()}`;
}

export interface RemovalJobPolicy {
  /** Total attempts, the first one included (REMOVAL_ATTEMPTS). */
  attempts: number;
  /** First retry delay before jitter; doubles per retry (REMOVAL_BACKOFF_MS). */
  backoffMs: number;
}

export const DEFAULT_REMOVAL_POLICY: RemovalJobPolicy = { attempts: 10, backoffMs: 1_000 };

/** Completed jobs stay long enough for `--wait` and for operators to look; Redis memory stays bounded. */
export const KEEP_COMPLETED = { age: 7 * 24 * 3600, count: 50_000 } as const;

/**
 * The options every producer must send. Failed jobs are never removed: they
 * are the operator's to-do list (`user-mirror removals --failed`).
 */
export function removalJobOptions(
  payload: Pick<RemovalPayload, 'org_id' | 'member_id'>,
  jobId: string,
  policy: RemovalJobPolicy,
): JobsOptions {
  return {
    jobId,
    attempts: policy.attempts,
    backoff: { type: REMOVAL_BACKOFF_TYPE, delay: policy.backoffMs },
    deduplication: { id: removalDedupId(payload) },
    removeOnComplete: KEEP_COMPLETED,
    removeOnFail: false,
    sizeLimit: MAX_PAYLOAD_BYTES,
  };
}

/** What a finished job returns (`job.returnvalue`). */
export const RemovalResultSchema = z.object({
  status: z.enum(['succeeded', 'already_absent']),
  org_id: z.string(),
  member_id: z.string(),
  target: z.string().optional(),
  /** The host whose worker ran it: its audit file holds the row. */
  host: z.string().optional(),
});
export type RemovalResult = z.infer<typeof RemovalResultSchema>;
