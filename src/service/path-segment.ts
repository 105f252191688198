/**
 * One path segment of the service's URLs, both ways: the client encodes an
 * id into exactly one segment; the stand-in and the replica decode each raw
 * segment on its own.
 *
 * Encoding: `encodeURIComponent` leaves `.` alone, and a segment of `..`
 * would let a server's path normalisation walk up a level, so dots are
 * encoded too; so are the sub-delims it keeps (`!'()*`), which some routers
 * treat specially.
 *
 * Decoding: a path is split on `/` *before* any decoding, and each segment
 * is decoded exactly once on its own, so an encoded `/`, `?`, `#`, `%` or
 * `..` inside a client_user_id stays inside its segment, and dot segments
 * are never normalized away.
 */

export function encodePathSegment(id: string): string {
  return encodeURIComponent(id).replace(/[.!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Lenient like Python's `unquote`: a malformed escape is left as written. */
export function decodeSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
