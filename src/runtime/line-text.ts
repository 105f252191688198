/**
 * Text from outside or from an error, made into part of one line (a log
 * field, a failure reason, an error or a status page): cut to a readable
 * size, saying what was cut. A record is rejected precisely because its
 * fields cannot be trusted, and a 10 KB id echoed whole would bury the line
 * it is in; an error's message is the service's `detail`, not ours to size.
 * Log lines about an error go through `logError` (./log-error.ts), which
 * uses errorMessage and also keeps the whole error (stack, causes) at debug.
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

/** Ids are shown up to this many characters. */
const ID_SHOWN = 80;

/** `value` cut to `max` characters, saying how long it was; null stays null. */
export function truncated<T extends string | null>(value: T, max = ID_SHOWN): T {
  if (value === null || value.length <= max) return value;
  return `${value.slice(0, max)}… (${value.length} characters)` as T;
}

export const ECHO_ID_CHARS = 64;

/** In a line of text: JSON-quoted (control characters escaped), the size after the quotes. */
export function echoId(id: string): string {
  const head = headOf(id);
  return head === undefined ? JSON.stringify(id) : `${JSON.stringify(head)}… (${Buffer.byteLength(id)} bytes)`;
}

/** As a JSON string value (a 422's `input`): the size inside it. */
export function clipEchoed(value: string): string {
  const head = headOf(value);
  return head === undefined ? value : `${head}… (${Buffer.byteLength(value)} bytes)`;
}

/** The first ECHO_ID_CHARS characters (never half a surrogate pair), or undefined when that is all of it. */
function headOf(text: string): string | undefined {
  let head = '';
  let count = 0;
  for (const char of text) {
    if (count === ECHO_ID_CHARS) return head;
    head += char;
    count += 1;
  }
  return undefined;
}
