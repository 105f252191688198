/**
 * Start-up catch-up: a daemon that was down (deploy, crash, host reboot)
 * should not leave the mirror stale until the next tick, which for a long
 * interval may be far away.
 *
 * The decision is pure. "Fresh" means the last *succeeded* run finished
 * within one schedule interval: a partial run publishes changes but not
 * deletions, so it does not count as a full refresh. A sync that is already
 * waiting or running in this mirror's queue (another daemon started first,
 * or the tick just fired), or a tick about to fire, makes a catch-up
 * redundant.
 */
export interface StartupFacts {
  /** When the last succeeded run finished; undefined if there never was one. */
  lastSucceededAt: Date | undefined;
  now: Date;
  /** One schedule interval (see schedule.ts `intervalOf`). */
  intervalMs: number;
  /** Sync jobs waiting, delayed or active in this mirror's queue. */
  pendingSyncJobs: number;
  /** Time until the next tick. */
  msToNextTick: number;
}

/** A tick this close (as a share of the interval, and at most a minute) will do the catch-up itself. */
const IMMINENT_SHARE = 0.1;
const IMMINENT_MAX_MS = 60_000;

export type StartupDecision = { enqueue: boolean; reason: string; ageMs: number | undefined };

export function decideStartupSync(f: StartupFacts): StartupDecision {
  const ageMs = f.lastSucceededAt === undefined ? undefined : f.now.getTime() - f.lastSucceededAt.getTime();
  if (f.pendingSyncJobs > 0) return { enqueue: false, reason: 'a sync is already queued or running', ageMs };
  if (f.msToNextTick <= Math.min(IMMINENT_MAX_MS, f.intervalMs * IMMINENT_SHARE)) {
    return { enqueue: false, reason: 'the next tick is imminent', ageMs };
  }
  if (ageMs === undefined) return { enqueue: true, reason: 'the mirror has never been synced successfully', ageMs };
  if (ageMs > f.intervalMs) return { enqueue: true, reason: 'the mirror is older than one schedule interval', ageMs };
  return { enqueue: false, reason: 'the mirror is fresh', ageMs };
}
