/**
 * How far webhook delivery is behind, from the feed's newest cursor, the
 * settled cursor and when the first unsettled event was published: what
 * `status`, /metrics and /readyz all say (src/daemon/change-delivery.ts).
 */
export function webhookLag(
  latest: number,
  settled: number,
  oldestUnsettledAt: string | undefined,
  now: Date,
): { settled: number; eventsBehind: number; secondsBehind: number } {
  const upTo = Math.min(settled, latest);
  const secondsBehind =
    latest > upTo && oldestUnsettledAt !== undefined ? Math.max(0, Math.round((now.getTime() - Date.parse(oldestUnsettledAt)) / 1000)) : 0;
  return { settled: upTo, eventsBehind: latest - upTo, secondsBehind };
}
