/**
 * The deadline of one request, headers and whole body together. undici's
 * bodyTimeout only bounds the gap between two chunks, so a body that trickles
 * a byte at a time never trips it; this does.
 *
 * A timer and a listener on the caller's signal, both undone by `clear`, and
 * not AbortSignal.any/timeout: a run makes thousands of requests under one
 * long-lived caller signal, and each would otherwise leave a timer pending
 * for the full deadline.
 */
export interface RequestDeadline {
  /** Aborts when the deadline passes or the caller aborts. */
  readonly signal: AbortSignal;
  /** True when the deadline, not the caller, aborted the request. */
  readonly expired: boolean;
  clear(): void;
}

export function startRequestDeadline(ms: number, caller: AbortSignal | undefined): RequestDeadline {
  const controller = new AbortController();
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    controller.abort(new Error(`request deadline of ${ms} ms passed`));
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
