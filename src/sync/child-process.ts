/**
 * Runs one leased sync in a child process (./child-main.ts says why) and
 * hands back its outcome, as if it had run here.
 *
 * - The child's log lines go straight to this process's stdout and stderr.
 * - Its service responses come back as messages, for the daemon's metrics;
 *   its summary comes back at the end, for the sync metrics.
 * - `signal` aborts the run: the child is asked to stop and records the run
 *   as failed. A child still busy `killAfterMs` later (a publish cannot be
 *   interrupted) is killed; SQLite rolls the publish back, the mirror stays as
 *   it was, and the next run marks the orphaned run `interrupted`.
 * - If this process exits while a child runs (a second signal exits at once)
 *   the child is killed with it, as an in-process sync would have died.
 * - A child that outlives its run is killed and logged: one that has not
 *   exited `exitWithinMs` after reporting its result (its run is recorded;
 *   the result stands), and one still running `maxRunMs` after it started
 *   (past SYNC_MAX_DURATION_MS, which the engine should have ended by
 *   itself: it is asked to stop, then killed `killAfterMs` later, and the job
 *   fails). Either way the next job runs: a child wedged on something (a
 *   connection that never frees, issue 40) cannot hold the schedule.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ResponseEvent } from '../service/client.js';
import { z } from 'zod';
import type { LeasedOutcome, LeaseRow } from '../../db/sync-lease.js';
import { syncEnv, syncExecArgv } from './process-settings.js';
import type { SyncSummary } from './run-summary.js';
import type { Logger } from 'pino';
import { syncTraceEnv } from './sync-spans.js';

export interface SyncProcessOptions {
  onResponse?: (event: ResponseEvent) => void;
  /** After an abort, how long the child has to record its run before it is killed. */
  killAfterMs?: number;
  /** After its result, how long the child has to exit before it is killed. */
  exitWithinMs?: number;
  /** From its start, how long the child may run before it is stopped (SYNC_MAX_DURATION_MS and a margin); none if unset. */
  maxRunMs?: number;
  logger?: Logger;
  /** The program the child runs; the built ./child-main.js unless a test gives another. */
  childMain?: string;
}

export type LeasedSyncRunner = (signal: AbortSignal, job: SyncJobContext) => Promise<LeasedOutcome<SyncSummary>>;

/** The child's entry: the built ./child-main.js beside this file. */
const CHILD_MAIN = fileURLToPath(new URL('./child-main.js', import.meta.url));

export function syncInChildProcess(options: SyncProcessOptions = {}): LeasedSyncRunner {
  const killAfterMs = options.killAfterMs ?? 30_000;
  const exitWithinMs = options.exitWithinMs ?? 10_000;
  const log = options.logger;
  return (signal, job) =>
    new Promise((resolve, reject) => {
      const started = Date.now();
      const child = fork(options.childMain ?? CHILD_MAIN, [JSON.stringify(job)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        serialization: 'json',
        execArgv: syncExecArgv(process.execArgv),
        env: { ...syncEnv(), ...syncTraceEnv() },
      });
      let outcome: LeasedOutcome<SyncSummary> | undefined;
      let failure: string | undefined;
      let killTimer: NodeJS.Timeout | undefined;
      let exitTimer: NodeJS.Timeout | undefined;
      let resultAt: number | undefined;

      const killWithUs = (): void => {
        child.kill('SIGKILL');
      };
      const kill = (event: string, message: string, fields: Record<string, unknown>): void => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        log?.error({ event, pid: child.pid, ...job, ...fields }, message);
        child.kill('SIGKILL');
      };
      const onAbort = (): void => {
        if (child.connected) child.send({ type: 'abort' });
        killTimer ??= setTimeout(
          () => kill('sync.process_killed', 'sync process did not stop after it was asked to; killed', { afterMs: killAfterMs }),
          killAfterMs,
        );
        killTimer.unref();
      };
      /** The result is in: the child has nothing left to do but exit. */
      const expectExit = (): void => {
        resultAt ??= Date.now();
        exitTimer ??= setTimeout(
          () =>
            kill('sync.process_killed', 'sync process still alive after reporting its result; killed (the result stands)', {
              afterMs: exitWithinMs,
            }),
          exitWithinMs,
        );
      };
      const overrun =
        options.maxRunMs === undefined
          ? undefined
          : setTimeout(() => {
              if (resultAt !== undefined) return;
              failure = `sync process still running ${options.maxRunMs} ms after it started (past SYNC_MAX_DURATION_MS); stopped`;
              log?.error({ event: 'sync.process_overran', pid: child.pid, ...job, maxRunMs: options.maxRunMs }, failure);
              onAbort();
            }, options.maxRunMs);
      process.once('exit', killWithUs);
      signal.addEventListener('abort', onAbort, { once: true });
      if (signal.aborted) onAbort();

      child.on('message', (raw) => {
        const parsed = ChildMessageSchema.safeParse(raw);
        if (!parsed.success) {
          failure = `unexpected message from the sync process: ${parsed.error.issues[0]?.message ?? 'invalid'}`;
          return;
        }
        const m = parsed.data;
        if (m.type === 'response') options.onResponse?.(m.event);
        else if (m.type === 'done') {
          outcome = m.outcome;
          expectExit();
        } else {
          failure = m.message;
          expectExit();
        }
      });
      const finish = (): void => {
        process.off('exit', killWithUs);
        signal.removeEventListener('abort', onAbort);
        clearTimeout(killTimer);
        clearTimeout(exitTimer);
        clearTimeout(overrun);
        if (outcome !== undefined) resolve(outcome);
        else reject(new Error(failure ?? 'sync process exited before reporting a result'));
      };
      child.once('error', (err) => {
        failure ??= `sync process: ${err.message}`;
        // Never started: no 'exit' follows.
        if (child.pid === undefined) finish();
      });
      child.once('exit', (code, exitSignal) => {
        failure ??= `sync process exited (${exitSignal ?? `code ${code}`}) before reporting a result`;
        log?.debug(
          {
            event: 'sync.process_exited',
            pid: child.pid,
            code,
            signal: exitSignal,
            ms: Date.now() - started,
            afterResultMs: resultAt === undefined ? undefined : Date.now() - resultAt,
          },
          'sync process exited',
        );
        finish();
      });
    });
}

/**
 * What the daemon and its sync process (./child-main.ts) say to each other
 * over the IPC channel. Both ends parse what they receive: a message is
 * data from another program, and a version skew between a parent and a
 * child built from different trees must fail loudly, not half-work.
 */
const count = z.number().int().min(0);

const SyncSummarySchema = z
  .object({
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
    identityConflicts: count,
    oversizePages: count,
    rereadPages: count.optional(),
    totalAtStart: count.optional(),
    totalAtEnd: count.optional(),
    totalLowest: count.optional(),
    durationMs: z.number().min(0),
    reason: z.string().optional(),
    candidates: count,
    confirmedGone: count,
    stillThere: count,
    unverified: count,
    deferred: count,
  })
  // JSON drops keys whose value is undefined; the summary names them anyway.
  .transform((s) => ({
    ...s,
    totalAtStart: s.totalAtStart,
    totalAtEnd: s.totalAtEnd,
    totalLowest: s.totalLowest,
  })) satisfies z.ZodType<SyncSummary>;

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

const ChildMessageSchema = z.discriminatedUnion('type', [
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
  /** The daemon's mirror file (db/file-identity.ts): the child writes into no other, and never creates one. */
  mirrorFile: z.object({ dev: z.number(), ino: z.number() }).optional(),
});
type SyncJobContext = z.infer<typeof SyncJobContextSchema>;

export const ParentMessageSchema = z.discriminatedUnion('type', [
  /** Stop the run: it is recorded as failed ('aborted') and nothing is published. */
  z.object({ type: z.literal('abort') }),
]);
