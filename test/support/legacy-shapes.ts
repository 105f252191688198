/** Which legacy shapes a user record shows, read off the wire JSON alone (as an observer would). */
type Descriptor = { slug?: unknown; logo?: unknown };
export type WireConnectedSource = { created_on?: unknown; provider?: Descriptor; source?: Descriptor };

export function connectedSourcesOf(user: Record<string, unknown>): WireConnectedSource[] {
  return user.connected_sources as WireConnectedSource[];
}

/** The legacy shapes `user` shows, by name; empty for the shape the live service sends today. */
export function legacyShapes(user: Record<string, unknown>): string[] {
  const sources = connectedSourcesOf(user);
  const shapes = {
    'source-only': sources.some((s) => s.source !== undefined && s.provider === undefined),
    'no created_on': !('created_on' in user),
    'no fallback_time_zone': !('fallback_time_zone' in user),
    'placeholder ingestion': user.ingestion_start === 'ingestion_start' && user.ingestion_end === 'ingestion_end',
    'empty slug': sources.some((s) => s.source?.slug === '' || s.provider?.slug === ''),
    'offset-less created_on': typeof user.created_on === 'string' && /T\d\d:\d\d:\d\d$/.test(user.created_on),
    'bare connected source': sources.some((s) => s.source === undefined && s.provider === undefined),
  };
  return Object.entries(shapes)
    .filter(([, shown]) => shown)
    .map(([name]) => name);
}
