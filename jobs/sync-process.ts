/**
 * Runs one leased sync in a child process (./sync-child.ts says why) and
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
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ResponseEvent } from '../src/service/client.js';
import type { SyncSummary } from '../src/sync/engine.js';
import type { LeasedOutcome } from './sync-lease.js';
import { ChildMessageSchema, type SyncJobContext } from './sync-child-protocol.js';

export interface SyncProcessOptions {
  onResponse?: (event: ResponseEvent) => void;
  /** After an abort, how long the child has to record its run before it is killed. */
  killAfterMs?: number;
  /** The child's entry; the built ./sync-child.js by default. */
  entry?: string;
}

export type LeasedSyncRunner = (signal: AbortSignal, job: SyncJobContext) => Promise<LeasedOutcome<SyncSummary>>;

const DEFAULT_ENTRY = fileURLToPath(new URL('./sync-child.js', import.meta.url));

export function syncInChildProcess(options: SyncProcessOptions = {}): LeasedSyncRunner {
  const killAfterMs = options.killAfterMs ?? 30_000;
  return (signal, job) =>
    new Promise((resolve, reject) => {
      const child = fork(options.entry ?? DEFAULT_ENTRY, [JSON.stringify(job)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        serialization: 'json',
        // A debugger port cannot be shared with the parent.
        execArgv: process.execArgv.filter((a) => !a.startsWith('--inspect')),
      });
      let outcome: LeasedOutcome<SyncSummary> | undefined;
      let failure: string | undefined;
      let killTimer: NodeJS.Timeout | undefined;

      const killWithUs = (): void => {
        child.kill('SIGKILL');
      };
      const onAbort = (): void => {
        if (child.connected) child.send({ type: 'abort' });
        killTimer ??= setTimeout(() => child.kill('SIGKILL'), killAfterMs);
        killTimer.unref();
      };
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
        else if (m.type === 'done') outcome = m.outcome;
        else failure = m.message;
      });
      const finish = (): void => {
        process.off('exit', killWithUs);
        signal.removeEventListener('abort', onAbort);
        clearTimeout(killTimer);
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
        finish();
      });
    });
}
