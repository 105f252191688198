/**
 * A deadline joined to a caller's signal: one request's (headers and whole
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
