/**
 * What the daemon and its sync process (./sync-child.ts) say to each other
 * over the IPC channel. Both ends parse what they receive: a message is
 * data from another program, and a version skew between a parent and a
 * child built from different trees must fail loudly, not half-work.
 */
import { z } from 'zod';
import type { ResponseEvent } from '../src/service/client.js';
import type { SyncSummary } from '../src/sync/engine.js';
import type { LeasedOutcome, LeaseRow } from './sync-lease.js';

const count = z.number().int().min(0);

const SyncSummarySchema = z.object({
  runId: z.number().int(),
  status: z.enum(['succeeded', 'partial', 'failed']),
  pages: count,
  pageFailures: count,
  usersSeen: count,
  created: count,
  updated: count,
  deleted: count,
  superseded: count,
  rejected: count,
  duplicates: count,
  totalAtStart: count.optional(),
  totalAtEnd: count.optional(),
  durationMs: z.number().min(0),
  reason: z.string().optional(),
  candidates: count,
  confirmedGone: count,
  stillThere: count,
  unverified: count,
  deferred: count,
})
  // JSON drops keys whose value is undefined; the summary names them anyway.
  .transform((s) => ({ ...s, totalAtStart: s.totalAtStart, totalAtEnd: s.totalAtEnd })) satisfies z.ZodType<SyncSummary>;

const LeaseRowSchema = z.object({
  holder: z.string(),
  host: z.string(),
  pid: z.number().int(),
  acquiredAt: z.number(),
  expiresAt: z.number(),
}) satisfies z.ZodType<LeaseRow>;

const OutcomeSchema = z.discriminatedUnion('ran', [
  z.object({ ran: z.literal(true), value: SyncSummarySchema }),
  z.object({ ran: z.literal(false), heldBy: LeaseRowSchema }),
]) satisfies z.ZodType<LeasedOutcome<SyncSummary>>;

const ResponseEventSchema = z.object({
  method: z.enum(['GET', 'DELETE']),
  route: z.string(),
  status: z.number().int(),
  durationMs: z.number(),
}) satisfies z.ZodType<ResponseEvent>;

export const ChildMessageSchema = z.discriminatedUnion('type', [
  /** One service response, for the daemon's HTTP metrics. */
  z.object({ type: z.literal('response'), event: ResponseEventSchema }),
  /** The run is over (or never started: the lease was held). The child exits next. */
  z.object({ type: z.literal('done'), outcome: OutcomeSchema }),
  /** Something broke before the engine could record a run (config, the mirror file). */
  z.object({ type: z.literal('error'), message: z.string() }),
]);
export type ChildMessage = z.infer<typeof ChildMessageSchema>;

/** The job a sync process runs, for its log lines: its one command-line argument, as JSON. */
export const SyncJobContextSchema = z.object({
  jobId: z.string().optional(),
  reason: z.string(),
  tick: z.string(),
});
export type SyncJobContext = z.infer<typeof SyncJobContextSchema>;

export const ParentMessageSchema = z.discriminatedUnion('type', [
  /** Stop the run: it is recorded as failed ('aborted') and nothing is published. */
  z.object({ type: z.literal('abort') }),
]);
export type ParentMessage = z.infer<typeof ParentMessageSchema>;
