/**
 * An id or reason cut for a log line or a status page: a record is rejected
 * precisely because its fields cannot be trusted, and a 10 KB id echoed
 * whole would bury the line it is in.
 */

/** Ids are shown up to this many characters. */
export const ID_SHOWN = 80;

/** `value` cut to `max` characters, saying how long it was; null stays null. */
export function truncated<T extends string | null>(value: T, max = ID_SHOWN): T {
  if (value === null || value.length <= max) return value;
  return `${value.slice(0, max)}… (${value.length} characters)` as T;
}
