/**
 * A job the daemon runs on a cron schedule as a child process (the backup,
 * the export): seconds of synchronous SQLite and file work in a child never
 * stall the daemon's event loop (its /metrics, its replica, its queues).
 * Each host runs its own, so this is a local timer, not a queue job. An
 * attempt still running when the next tick comes is not doubled
 * (noOverlap); every outcome is logged (`<name>.done`, `<name>.failed`) and
 * lands in the job's record in its folder, which `status` and `/metrics`
 * read.
 */
import { execFile } from 'node:child_process';
import type { Logger } from 'pino';
import { logError } from '../runtime/log-error.js';
import { nodeCron } from '../runtime/node-cron.js';
import { SCHEDULE_TIMEZONE } from '../health/schedule-interval.js';

export interface ChildSchedule {
  stop(): Promise<void>;
}

/** How an attempt ended, as the job's record in its folder says. */
type AttemptOutcome = { ok: true; facts: Record<string, unknown> } | { ok: false; error: string | undefined };

export interface ChildScheduleOptions {
  /** The prefix of its log events. */
  name: 'backup' | 'export';
  /** What the child runs: a script and its arguments, given to this process's Node. */
  child: readonly string[];
  dir: string;
  cron: string;
  logger: Logger;
  /** The record the attempt left in `dir`. */
  outcome: (dir: string) => AttemptOutcome;
  /** The log line of a good attempt. */
  doneMessage: string;
}

export function startChildSchedule(options: ChildScheduleOptions): ChildSchedule {
  const log = options.logger;
  const { name } = options;
  // An attempt still running at shutdown finishes in its child (it renames into place only when whole): not waited for.
  const task = nodeCron().schedule(options.cron, () => runAttempt(options), {
    name: `${name}-schedule`,
    timezone: SCHEDULE_TIMEZONE,
    noOverlap: true,
  });
  task.on('execution:overlap', () => log.warn({ event: `${name}.overlap` }, `the previous ${name} is still running; skipped this tick`));
  log.info(
    { event: `${name}.scheduled`, dir: options.dir, cron: options.cron, next: task.getNextRun()?.toISOString() },
    `${name}s scheduled`,
  );
  return {
    async stop() {
      await task.destroy();
    },
  };
}

/** One attempt in a child; resolves when it ended, however it ended (the record says how). */
async function runAttempt(options: ChildScheduleOptions): Promise<void> {
  const { name, dir, child, logger: log } = options;
  const started = Date.now();
  const exit = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [...child], { maxBuffer: 1024 * 1024 }, (err, _stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stderr: stderr.slice(0, 2_000) });
    });
  });
  const outcome = options.outcome(dir);
  const ms = Date.now() - started;
  if (exit.code === 0 && outcome.ok) {
    log.info({ event: `${name}.done`, ms, ...outcome.facts }, options.doneMessage);
    return;
  }
  const error = (!outcome.ok ? outcome.error : undefined) ?? (exit.stderr.trim() || `exit ${String(exit.code)}`);
  logError(log, 'error', { event: `${name}.failed`, ms, exitCode: exit.code, err: new Error(error) }, `scheduled ${name} failed`);
}
