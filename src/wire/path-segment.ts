/**
 * Decoding one raw path segment. A path is split on `/` *before* any
 * decoding, and each segment is decoded exactly once on its own, so an
 * encoded `/`, `?`, `#`, `%` or `..` inside a client_user_id stays inside its
 * segment, and dot segments are never normalized away.
 */

/** Lenient like Python's `unquote`: a malformed escape is left as written. */
export function decodeSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
