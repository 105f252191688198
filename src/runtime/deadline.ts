/**
 * Bounded waits. `startDeadline`: a deadline joined to a caller's signal: one request's (headers and whole
 * body; undici's bodyTimeout only bounds the gap between two chunks, so a
 * body that trickles a byte at a time never trips it) or one sync run's.
 *
 * A timer and a listener on the caller's signal, both undone by `clear`,
 * rather than AbortSignal.any/timeout: a run makes thousands of requests
 * under one long-lived caller signal, and each would otherwise leave a timer
 * pending for the full deadline.
 */
export interface Deadline {
  /** Aborts when the deadline passes or the caller aborts. */
  readonly signal: AbortSignal;
  /** True when the deadline, not the caller, aborted. */
  readonly expired: boolean;
  clear(): void;
}

export function startDeadline(ms: number, caller: AbortSignal | undefined): Deadline {
  const controller = new AbortController();
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    controller.abort(new Error(`deadline of ${ms} ms passed`));
  }, ms);
  const onAbort = (): void => controller.abort(caller?.reason);
  if (caller?.aborted) onAbort();
  else caller?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    clear() {
      clearTimeout(timer);
      caller?.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * Waits for a promise, but no longer than `ms`. Shutdown and the watchdog
 * both close things that may hang on a dead connection; neither may hang
 * with them.
 */
export async function settleWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, ms));
  });
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Closes something that first finishes its work in hand (a BullMQ worker),
 * waiting at most `ms`. True when it closed in time; false on a timeout (the
 * close goes on in the background: the caller decides whether to exit) or
 * an error (handed to `onError`).
 */
export async function closeWithin(closing: Promise<unknown>, ms: number, onError: (err: unknown) => void): Promise<boolean> {
  const closed = closing.then(
    () => true,
    (err: unknown) => {
      onError(err);
      return false;
    },
  );
  return (await settleWithin(closed, ms)) && (await closed);
}
