/**
 * The worker watchdog. BullMQ relies on ioredis to reconnect, and a worker
 * can still end up connected yet no longer taking jobs (taskforcesh/bullmq
 * #648, #2466, #2964, #3185: a blocking connection that never unblocks, or a
 * main loop that exited on an error). The maintainers' advice is to close
 * such a worker and create a new one; this does that.
 *
 * The rule (`decideWatchdog`, pure), checked every interval per worker:
 * - the worker's main loop is not running (and we are not closing it): restart;
 * - jobs are waiting, none is active anywhere, the queue is not rate limited,
 *   and that has lasted `stallMs`: restart. "None active anywhere" matters:
 *   with several daemons on one queue, a busy peer is not a stuck us.
 * - the worker's own job in hand is overdue (it has outlived every deadline
 *   it is held to, e.g. a sync process that neither ends nor is killed):
 *   restart, which aborts the job on the way (a sync's process is asked to
 *   stop, then killed).
 * - Redis unreachable (the sample failed): no decision. Reconnecting is
 *   ioredis's job; a restart would only add connections to a dead server.
 * After a restart the clock starts again, so a worker is restarted at most
 * once per `stallMs` for the same stuck queue.
 */
import type { Queue } from 'bullmq';
import { logError } from '../runtime/log-error.js';
import { settleWithin } from '../runtime/deadline.js';
import type { Logger } from 'pino';

export interface WorkerSample {
  /** `worker.isRunning()`: the main loop is alive. */
  running: boolean;
  /** Jobs ready to run now (wait + prioritized), excluding delayed ones. */
  waiting: number;
  /** Jobs being processed by any worker of the queue. */
  active: number;
  /** The queue is paused by a rate limit (a 429 from the service): idle on purpose. */
  rateLimited: boolean;
  /** This worker's job in hand has run past its deadline. */
  overdue?: boolean;
}

export interface WatchdogState {
  /** Since when jobs have been waiting with nothing active; undefined while all is well. */
  stuckSince: number | undefined;
}

export const INITIAL_WATCHDOG_STATE: WatchdogState = { stuckSince: undefined };

export type WatchdogVerdict =
  | { action: 'none'; state: WatchdogState }
  | { action: 'restart'; reason: 'not-running' | 'idle-with-waiting-jobs' | 'overdue-job'; state: WatchdogState };

export function decideWatchdog(state: WatchdogState, sample: WorkerSample | undefined, now: number, stallMs: number): WatchdogVerdict {
  if (sample === undefined) return { action: 'none', state };
  if (!sample.running) return { action: 'restart', reason: 'not-running', state: INITIAL_WATCHDOG_STATE };
  if (sample.overdue === true) return { action: 'restart', reason: 'overdue-job', state: INITIAL_WATCHDOG_STATE };
  const idleWithWork = sample.waiting > 0 && sample.active === 0 && !sample.rateLimited;
  if (!idleWithWork) return { action: 'none', state: INITIAL_WATCHDOG_STATE };
  if (state.stuckSince === undefined) return { action: 'none', state: { stuckSince: now } };
  if (now - state.stuckSince >= stallMs) {
    return { action: 'restart', reason: 'idle-with-waiting-jobs', state: INITIAL_WATCHDOG_STATE };
  }
  return { action: 'none', state };
}

/** One supervised worker, as the watchdog sees it. */
export interface WatchedWorker {
  name: string;
  /** Rejects (or times out) when Redis cannot be asked. */
  sample(): Promise<WorkerSample>;
  /** Closes the current worker (bounded) and starts a fresh one. */
  restart(): Promise<void>;
}

export interface WatchdogOptions {
  workers: readonly WatchedWorker[];
  intervalMs: number;
  stallMs: number;
  logger: Logger;
  /** How long one sample may take before it counts as "Redis unreachable". */
  sampleTimeoutMs?: number;
  onRestart?: (worker: string, reason: string) => void;
  now?: () => number;
}

export interface Watchdog {
  /** Stops checking; waits for a check or restart in progress. */
  stop(): Promise<void>;
}

export function startWatchdog(options: WatchdogOptions): Watchdog {
  const now = options.now ?? Date.now;
  const states = new Map<string, WatchdogState>(options.workers.map((w) => [w.name, INITIAL_WATCHDOG_STATE]));
  let stopped = false;
  let checking: Promise<void> | undefined;

  const checkOne = async (w: WatchedWorker): Promise<void> => {
    let sampled: WorkerSample | undefined;
    const sampling = w.sample().then(
      (s) => {
        sampled = s;
      },
      () => undefined,
    );
    // A failed or timed-out sample is "Redis unreachable": no decision this round.
    const inTime = await settleWithin(sampling, options.sampleTimeoutMs ?? 5_000);
    const sample = inTime ? sampled : undefined;
    if (stopped) return;
    const verdict = decideWatchdog(states.get(w.name) ?? INITIAL_WATCHDOG_STATE, sample, now(), options.stallMs);
    states.set(w.name, verdict.state);
    if (verdict.action !== 'restart') return;
    options.logger.warn(
      { event: 'watchdog.restart', worker: w.name, reason: verdict.reason, sample },
      'worker stopped taking jobs; restarting it',
    );
    options.onRestart?.(w.name, verdict.reason);
    try {
      await w.restart();
      options.logger.info({ event: 'watchdog.restarted', worker: w.name }, 'worker restarted');
    } catch (err) {
      logError(options.logger, 'error', { event: 'watchdog.restart_failed', worker: w.name, err }, 'worker restart failed; will try again');
    }
  };

  const timer = setInterval(() => {
    if (stopped || checking !== undefined) return;
    checking = Promise.all(options.workers.map(checkOne)).then(
      () => undefined,
      () => undefined,
    );
    void checking.finally(() => {
      checking = undefined;
    });
  }, options.intervalMs);
  timer.unref();

  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await checking;
    },
  };
}

/**
 * A worker the watchdog can replace. Each generation gets its own Redis
 * connection: a worker stuck on a half-dead connection is only really
 * replaced if the connection goes with it.
 */
interface WorkerGeneration<H> {
  handle: H;
  /** Drops what the generation holds once it is closed (its Redis connection). */
  dispose(): void;
}

export interface RestartableWorkerOptions<H> {
  name: string;
  start: () => WorkerGeneration<H>;
  /** Graceful close within `timeoutMs`; resolves true if it finished in time. */
  close: (handle: H, timeoutMs: number) => Promise<boolean>;
  /** How long a restart waits for the old generation before dropping it. */
  restartCloseTimeoutMs: number;
}

export interface RestartableWorker<H> {
  readonly name: string;
  current(): H;
  restart(): Promise<void>;
  close(timeoutMs: number): Promise<boolean>;
}

export function restartableWorker<H>(options: RestartableWorkerOptions<H>): RestartableWorker<H> {
  let generation = options.start();
  let closed = false;

  const retire = async (old: WorkerGeneration<H>, timeoutMs: number): Promise<boolean> => {
    try {
      return await options.close(old.handle, timeoutMs);
    } catch {
      return false;
    } finally {
      old.dispose();
    }
  };

  return {
    name: options.name,
    current: () => generation.handle,
    async restart() {
      if (closed) return;
      const old = generation;
      await retire(old, options.restartCloseTimeoutMs);
      if (closed) return;
      generation = options.start();
    },
    async close(timeoutMs) {
      closed = true;
      return retire(generation, timeoutMs);
    },
  };
}

/** A restartable worker as the watchdog samples it: running or not, its queue's backlog, and (if told how) an overdue job. */
export function watchedWorker<H>(
  worker: RestartableWorker<H>,
  queue: Queue,
  isRunning: (h: H) => boolean,
  isOverdue?: (h: H, now: number) => boolean,
): WatchedWorker {
  return {
    name: worker.name,
    restart: () => worker.restart(),
    async sample(): Promise<WorkerSample> {
      const [counts, ttl] = await Promise.all([queue.getJobCounts('wait', 'prioritized', 'active'), queue.getRateLimitTtl()]);
      return {
        running: isRunning(worker.current()),
        waiting: (counts.wait ?? 0) + (counts.prioritized ?? 0),
        active: counts.active ?? 0,
        rateLimited: ttl > 0,
        overdue: isOverdue?.(worker.current(), Date.now()) ?? false,
      };
    },
  };
}
