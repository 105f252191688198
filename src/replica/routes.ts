/**
 * The replica's routes, matched on the raw request target. The resolve id is
 * the raw segment after `/v2/user/resolve/`, decoded exactly once (see
 * ../wire/path-segment.ts), so `%2F`, `%3F`, `%25`, spaces and non-ASCII
 * round-trip and a `/` in the raw path never reaches the id.
 */
import { decodeSegment } from '../wire/path-segment.js';

export type ReplicaRoute =
  | { name: 'list'; query: string }
  | { name: 'resolve'; clientUserId: string }
  | { name: 'healthz' }
  | { name: 'readyz' }
  | { name: 'not-found' }
  | { name: 'method-not-allowed'; allow: string };

const RESOLVE_PREFIX = '/v2/user/resolve/';

export function matchReplicaRoute(method: string, target: string): ReplicaRoute {
  const queryAt = target.indexOf('?');
  const path = queryAt === -1 ? target : target.slice(0, queryAt);
  const route = byPath(path, queryAt === -1 ? '' : target.slice(queryAt + 1));
  if (route.name === 'not-found') return route;
  const allow = route.name === 'healthz' || route.name === 'readyz' ? 'GET, HEAD' : 'GET';
  return method === 'GET' || (method === 'HEAD' && allow !== 'GET') ? route : { name: 'method-not-allowed', allow };
}

function byPath(path: string, query: string): ReplicaRoute {
  if (path.startsWith(RESOLVE_PREFIX)) {
    const segment = path.slice(RESOLVE_PREFIX.length);
    return segment === '' || segment.includes('/') ? { name: 'not-found' } : { name: 'resolve', clientUserId: decodeSegment(segment) };
  }
  if (path === '/v2/user' || path === '/v2/user/') return { name: 'list', query };
  if (path === '/healthz') return { name: 'healthz' };
  if (path === '/readyz') return { name: 'readyz' };
  return { name: 'not-found' };
}
