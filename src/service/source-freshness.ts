/**
 * The freshness a leader mirror's replica sends with its answers
 * (src/replica/answers.ts judgeFreshness), as a follower's client reads it:
 * validated here, at the edge, once per page, never per record.
 *
 *   x-mirror-run-id        the leader's last published run
 *   x-mirror-published-at  when that run published
 *   x-mirror-source-at     when the data it serves was read from the service
 *                          (its own publish, or its own leader's source-at:
 *                          a chain passes the oldest time down)
 *   x-mirror-epoch         the leader's change-feed epoch: another one after a restore
 *   x-mirror-restored-at   when the leader was last restored from a backup (absent: never)
 *   x-mirror-cursor        the leader's last change-feed cursor (absent: no feed yet)
 *
 * The real service sends none of them: `undefined`, the mirror reads the
 * service itself. A replica that sends some but not all, or malformed ones,
 * is an error naming the header.
 */
import { z } from 'zod';
import type { IncomingHttpHeaders } from 'node:http';

export const SOURCE_HEADERS = {
  runId: 'x-mirror-run-id',
  publishedAt: 'x-mirror-published-at',
  sourceAt: 'x-mirror-source-at',
  epoch: 'x-mirror-epoch',
  restoredAt: 'x-mirror-restored-at',
  cursor: 'x-mirror-cursor',
} as const;

const isoTime = z.iso.datetime({ offset: true, message: 'must be an ISO 8601 time' });

const SourceFreshnessSchema = z.object({
  runId: z.coerce.number().int().positive(),
  publishedAt: isoTime,
  sourceAt: isoTime,
  epoch: z.string().regex(/^[0-9A-Za-z_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -'),
  restoredAt: isoTime.optional(),
  cursor: z.coerce.number().int().nonnegative().optional(),
});

/** A leader's freshness, as one page's headers gave it. */
export type SourceFreshness = z.output<typeof SourceFreshnessSchema>;

/** Undefined when the answer carries no mirror run id (the real service); an Error naming the header when malformed. */
export function sourceFreshnessOf(headers: IncomingHttpHeaders): SourceFreshness | Error | undefined {
  if (headers[SOURCE_HEADERS.runId] === undefined) return undefined;
  const raw: Record<string, string | undefined> = {};
  for (const [field, name] of Object.entries(SOURCE_HEADERS)) {
    const v = headers[name];
    raw[field] = Array.isArray(v) ? v[0] : v;
  }
  const parsed = SourceFreshnessSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field = String(issue?.path[0] ?? 'runId') as keyof typeof SOURCE_HEADERS;
  return new Error(`header ${SOURCE_HEADERS[field] ?? field}: ${issue?.message ?? 'invalid'}`);
}

/**
 * An answer a follower must not use (src/sync/leader-pin.ts): it came from
 * another leader than the one the run pinned (another epoch, restore or
 * team), or from no leader at all (no freshness headers). Never retried: the
 * run ends, publishing nothing, with the message as its reason.
 */
export class LeaderUntrusted extends Error {}
