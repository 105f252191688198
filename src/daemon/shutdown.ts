/**
 * Signal handling for the daemon.
 *
 * SIGINT (what `pm2 stop` sends) and SIGTERM (systemd, docker, kill) both
 * start a graceful stop: the daemon's `stop` stops the schedule, stops taking
 * jobs, lets work in flight finish within SHUTDOWN_TIMEOUT_MS, and closes
 * Redis and SQLite. Then the process exits with `stop`'s code (0 when clean).
 *
 * A second signal during that stop exits at once with 130 ("interrupted",
 * whichever signal it was): the operator has decided not to wait. SQLite
 * stays consistent anyway (WAL; an open transaction is simply not
 * committed), and BullMQ hands an unfinished job to another worker once its
 * lock expires.
 *
 * A backstop timer exits with 1 if `stop` itself hangs past its budget plus a
 * margin, so the process never outlives pm2's kill_timeout by waiting on a
 * dead socket; pm2's SIGKILL would otherwise be the one to end it.
 */
import { logError } from '../runtime/log-error.js';
import type { Logger } from 'pino';
import { stopTracing } from '../runtime/tracing.js';

export const SECOND_SIGNAL_EXIT_CODE = 130;
const BACKSTOP_MARGIN_MS = 5_000;

export interface ShutdownOptions {
  logger: Logger;
  timeoutMs: number;
  /** The graceful stop; resolves with the exit code. */
  stop: (signal: NodeJS.Signals) => Promise<number>;
  exit?: (code: number) => void;
  signals?: readonly NodeJS.Signals[];
}

/** Installs the handlers; returns a function that removes them. */
export function handleShutdownSignals(options: ShutdownOptions): () => void {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const signals = options.signals ?? (['SIGINT', 'SIGTERM'] as const);
  const log = options.logger;
  let stopping = false;

  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ event: 'daemon.shutdown_forced', signal }, `second ${signal}: exiting now without waiting`);
      exit(SECOND_SIGNAL_EXIT_CODE);
      return;
    }
    stopping = true;
    log.info({ event: 'daemon.shutdown_started', signal, timeoutMs: options.timeoutMs }, `${signal} received: shutting down gracefully`);
    const backstop = setTimeout(() => {
      log.error({ event: 'daemon.shutdown_hung' }, 'graceful shutdown overran its budget; exiting');
      exit(1);
    }, options.timeoutMs + BACKSTOP_MARGIN_MS);
    backstop.unref();
    options.stop(signal).then(
      (code) => {
        // Spans not yet exported go out first (src/runtime/tracing.ts; nothing when off); the backstop bounds the wait.
        void stopTracing().finally(() => {
          clearTimeout(backstop);
          exit(code);
        });
      },
      (err: unknown) => {
        clearTimeout(backstop);
        logError(log, 'error', { event: 'daemon.shutdown_failed', err }, 'graceful shutdown failed');
        exit(1);
      },
    );
  };

  for (const s of signals) process.on(s, onSignal);
  return () => {
    for (const s of signals) process.off(s, onSignal);
  };
}

/**
 * The budget still left of `totalMs` that started at `startedAt`, never below
 * a floor: a step that gets no time at all would skip its cleanup entirely.
 */
export function remainingBudget(startedAt: number, totalMs: number, now: number, floorMs = 250): number {
  return Math.max(floorMs, totalMs - (now - startedAt));
}
