/**
 * The one way tests wait for something: ask `probe` again and again until it
 * answers, and return the answer. `undefined` and `false` mean "not yet", so
 * a condition is written as a boolean and a lookup as a value or undefined.
 * A probe that throws is asked again; when time runs out the test fails with
 * `what` and the last error. `what` may be a function, read only then, for a
 * message that shows the state at the timeout (a child's output so far).
 *
 * `everyMs` is the pause between two asks: the default suits a probe that
 * costs a request or opens a file; a probe of in-process state (a receiver's
 * list, the stand-in's counters) is asked more often, so that the test acts
 * close to the moment the state is reached.
 *
 * A deadline a test names is what the wait takes on an idle machine; on a
 * shared 2-core machine with other suites running, work takes several times
 * longer, so every wait lasts at least BUSY_MACHINE_FLOOR_MS
 * (`busyMachineDeadline`). A wait that succeeds returns at once, so the
 * floor costs nothing; only a failing test takes longer to say so.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export const BUSY_MACHINE_FLOOR_MS = 90_000;

/** The deadline a wait really gets: the one the test names, but never less than BUSY_MACHINE_FLOOR_MS. */
export function busyMachineDeadline(timeoutMs: number): number {
  return Math.max(timeoutMs, BUSY_MACHINE_FLOOR_MS);
}

export async function eventually<T>(
  probe: () => Promise<T | false | undefined> | T | false | undefined,
  timeoutMs = 20_000,
  what: string | (() => string) = 'condition',
  everyMs = 200,
): Promise<Exclude<T, false | undefined>> {
  const deadline = Date.now() + busyMachineDeadline(timeoutMs);
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v as Exclude<T, false | undefined>;
    } catch (err) {
      lastError = err;
    }
    await sleep(everyMs);
  }
  throw new Error(
    `timed out waiting for ${typeof what === 'function' ? what() : what}${lastError instanceof Error ? `: ${lastError.message}` : lastError ? `: ${JSON.stringify(lastError)}` : ''}`,
  );
}

/**
 * Waits for work that arrives in many pieces (deliveries, spans, rows) until `count()` reaches `target`, and returns
 * the count. The deadline is for progress, not for the whole: a busy machine that gets through the pieces slowly but
 * steadily is waited for, and the test fails only when the count has not grown for `stallMs` (floored like every
 * wait, `busyMachineDeadline`), naming `what` and how far it got.
 */
export async function eventuallyCount(count: () => number, target: number, stallMs: number, what: string, everyMs = 100): Promise<number> {
  let best = count();
  let deadline = Date.now() + busyMachineDeadline(stallMs);
  while (best < target) {
    if (Date.now() >= deadline)
      throw new Error(`timed out waiting for ${what}: ${best} of ${target}, none more for ${busyMachineDeadline(stallMs)} ms`);
    await sleep(everyMs);
    const now = count();
    if (now > best) {
      best = now;
      deadline = Date.now() + busyMachineDeadline(stallMs);
    }
  }
  return best;
}
