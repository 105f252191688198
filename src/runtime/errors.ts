/**
 * An error caught as `unknown`, as the one line of text a log field, a
 * failure reason or a terminal message carries, cut to a readable size.
 * Log lines about an error go through `logError` (./log-error.ts), which
 * uses this and also keeps the whole error (stack, causes) at debug.
 */

/**
 * Enough for any message worth reading: an HttpError's message carries the
 * service's `detail`, which is not ours to size.
 */
export const MESSAGE_MAX_CHARS = 2_000;

/** An Error's message, anything else as `String()` renders it; cut at `maxChars` (then ending in `…`). */
export function errorMessage(err: unknown, maxChars = Infinity): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.length > maxChars ? `${message.slice(0, maxChars)}…` : message;
}
