/**
 * Routing on the raw request path, split before decoding (see
 * ../wire/path-segment.ts).
 */
import type { RouteName } from './request-log.js';
import { decodeSegment } from '../wire/path-segment.js';

/** Which key a path needs: the team key (/v2), the management key (/v1), or none. */
export type Area = 'team' | 'management' | 'none';

export type Route =
  | { name: 'list'; area: 'team' }
  | { name: 'resolve'; area: 'team'; clientUserId: string }
  | { name: 'delete-member'; area: 'management'; orgId: string; memberId: string }
  | { name: 'unknown'; area: Area; allow: string | undefined };

interface Pattern {
  name: Exclude<RouteName, 'unknown'>;
  method: 'GET' | 'DELETE';
  /** Literal segments; `null` captures a non-empty segment. */
  segments: ReadonlyArray<string | null>;
}

const PATTERNS: readonly Pattern[] = [
  { name: 'list', method: 'GET', segments: ['v2', 'user'] },
  { name: 'list', method: 'GET', segments: ['v2', 'user', ''] },
  { name: 'resolve', method: 'GET', segments: ['v2', 'user', 'resolve', null] },
  { name: 'delete-member', method: 'DELETE', segments: ['v1', 'org', null, 'member', null] },
];

export function matchRoute(method: string, rawPath: string): Route {
  const segments = rawPath.split('/').slice(1).map(decodeSegment);
  const area = areaOf(segments[0]);
  let allow: string | undefined;
  for (const pattern of PATTERNS) {
    const captures = capture(pattern.segments, segments);
    if (captures === undefined) continue;
    if (pattern.method !== method) {
      allow = pattern.method;
      continue;
    }
    return build(pattern.name, captures);
  }
  return { name: 'unknown', area, allow };
}

function build(name: Pattern['name'], captures: readonly string[]): Route {
  const [first = '', second = ''] = captures;
  if (name === 'list') return { name, area: 'team' };
  if (name === 'resolve') return { name, area: 'team', clientUserId: first };
  return { name, area: 'management', orgId: first, memberId: second };
}

function capture(pattern: ReadonlyArray<string | null>, segments: readonly string[]): string[] | undefined {
  if (pattern.length !== segments.length) return undefined;
  const captures: string[] = [];
  for (let i = 0; i < pattern.length; i++) {
    const want = pattern[i];
    const got = segments[i] ?? '';
    if (want === null && got !== '') captures.push(got);
    else if (want !== got) return undefined;
  }
  return captures;
}

function areaOf(first: string | undefined): Area {
  if (first === 'v2') return 'team';
  return first === 'v1' ? 'management' : 'none';
}
