/**
 * `user-mirror daemon`: the long-running process pm2 runs (see
 * ecosystem.config.cjs and src/daemon/daemon.ts).
 *
 * The process ends only through a signal (src/daemon/shutdown.ts): exit 0
 * after a graceful stop, 130 on a second signal, 1 if the stop failed or
 * start-up hit a bug. Configuration errors exit 2 before anything starts
 * (pm2 is told not to restart on 2).
 *
 * An uncaught exception leaves the process in an unknown state: log it and
 * exit 1 for pm2 to restart. An unhandled rejection is logged and survived:
 * Redis clients are known to leave the odd rejected promise behind on a
 * reconnect, and a months-long daemon should not die of that.
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { createLogger } from '../runtime/log.js';
import { logError } from '../runtime/log-error.js';
import { startDaemon } from '../daemon/daemon.js';
import { readDaemonConfig } from '../daemon/daemon-config.js';
import { handleShutdownSignals } from '../daemon/shutdown.js';

const Args = z.object({ positionals: z.array(z.string()).max(0, 'takes no arguments') });

export default async function daemon(argv: string[]): Promise<number> {
  parseCommandArgs(argv, {}, Args);
  // One pass: every problem of the configuration at once, before anything starts (exit 2).
  const config = readDaemonConfig();
  const logger = createLogger(config);

  process.on('uncaughtException', (err) => {
    logger.fatal({ event: 'daemon.uncaught', err: err.message, stack: err.stack }, 'uncaught exception; exiting');
    process.exit(1);
  });
  process.on('unhandledRejection', (reason) => {
    logError(logger, 'error', { event: 'daemon.unhandled_rejection', err: reason }, 'unhandled promise rejection');
  });

  const send = process.send === undefined ? undefined : (message: string) => void process.send?.(message);
  const d = await startDaemon(config, { logger, send });
  handleShutdownSignals({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT_MS, stop: () => d.stop() });
  d.started.catch((err: unknown) => {
    logError(logger, 'fatal', { event: 'daemon.start_failed', err }, 'daemon start-up failed; exiting');
    process.exit(1);
  });
  // The process ends in shutdown.ts; until then the status server and the workers keep it alive.
  return new Promise<number>(() => undefined);
}
