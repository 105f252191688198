/**
 * A mirror's change feed over HTTP, as both ends name it: the replica serves
 * it (src/replica/server.ts, its answers in src/replica/answers.ts) and a
 * follower's client asks for it (./client.ts, read by src/sync/follow-feed.ts).
 * Here, in the wire layer both may import, so the two cannot drift apart.
 * The events a page carries are db/change-event.ts's.
 */

/** The feed's path, outside the service's own /v2/ namespace. */
export const CHANGES_PATH = '/mirror/v1/changes';
/** Events per page when `limit` is not given. */
export const CHANGES_DEFAULT_LIMIT = 100;
/** The largest page the replica serves: a follower asks for it, the fewest round trips. */
export const CHANGES_MAX_LIMIT = 1_000;
