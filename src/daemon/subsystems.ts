/**
 * The daemon's parts, in the order they started, each with the stop that
 * undoes its start: stopping goes through them in reverse, the last started
 * first, so no part stops while one started after it (and so possibly using
 * it) still runs. This replaces a handle per part that the shutdown path had
 * to null-check in its own order, and that every new feature added to.
 *
 * One exception to the order: a timer that begins new work and started
 * early (the backup and export schedules, which run without Redis, so they
 * start before it is awaited) is marked `intake`. Intake stops first, before
 * anything drains, so that no backup or export begins during a shutdown;
 * the rest then stop in reverse.
 *
 * A part that fails to stop is logged and the rest still stop; `stopAll`
 * then says so, and the daemon exits 1. A part recorded after the stop began
 * (start-up still running when a signal came) is stopped at once: without
 * that it would keep the process alive.
 */
import type { Logger } from 'pino';
import { logError } from '../runtime/log-error.js';

/** Undoes one part's start; `since` is when the whole stop began (Date.now()), for budgets shared across parts. */
export type Stop = (since: number) => unknown;

export class Subsystems {
  private readonly started: { name: string; stop: Stop; intake: boolean }[] = [];
  private stoppingSince: number | undefined;

  constructor(private readonly log: Logger) {}

  /** Records a started part and its stop; `intake` for a timer that begins new work (stopped first). */
  add(name: string, stop: Stop, kind: 'intake' | 'part' = 'part'): void {
    if (this.stoppingSince === undefined) this.started.push({ name, stop, intake: kind === 'intake' });
    else void this.stopOne(name, stop, this.stoppingSince);
  }

  /**
   * Runs one start step: when it throws, everything started so far is
   * stopped (in reverse) before the error goes on.
   */
  async starting<T>(start: () => T | Promise<T>): Promise<T> {
    try {
      return await start();
    } catch (err) {
      await this.stopAll();
      throw err;
    }
  }

  /** Stops every part, intake first, then the last started first; false when one failed to stop. */
  async stopAll(since: number = Date.now()): Promise<boolean> {
    this.stoppingSince ??= since;
    const reversed = this.started.splice(0).reverse();
    let clean = true;
    for (const part of [...reversed.filter((p) => p.intake), ...reversed.filter((p) => !p.intake)])
      clean = (await this.stopOne(part.name, part.stop, this.stoppingSince)) && clean;
    return clean;
  }

  private async stopOne(name: string, stop: Stop, since: number): Promise<boolean> {
    try {
      await stop(since);
      return true;
    } catch (err) {
      logError(this.log, 'error', { event: 'daemon.stop_failed', part: name, err }, `could not stop ${name}`);
      return false;
    }
  }
}
