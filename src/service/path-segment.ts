/**
 * Encodes an id as exactly one path segment. `encodeURIComponent` leaves
 * `.` alone, and a segment of `..` would let a server's path normalisation
 * walk up a level, so dots are encoded too; so are the sub-delims it keeps
 * (`!'()*`), which some routers treat specially.
 */
export function encodePathSegment(id: string): string {
  return encodeURIComponent(id).replace(/[.!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
