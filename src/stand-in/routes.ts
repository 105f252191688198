/**
 * Routing on the raw request path, split before decoding (see
 * ../service/path-segment.ts).
 */
import type { RouteName } from './request-log.js';
import { decodeSegment } from '../service/path-segment.js';
import {
  failedItems,
  keyDigest,
  offeredKeyMatches,
  parseListQuery,
  pathUuid,
  validationErrorBody,
  type ValidationItem,
} from '../service/server-wire.js';
import { type IncomingHttpHeaders, STATUS_CODES } from 'node:http';
import { ByteBuilder } from './byte-builder.js';
import type { Directory } from './directory.js';
import type { Members } from './members.js';
import { detailReply, jsonReply, type Reply } from './reply.js';
import { CONTROL_PREFIX, type ControlRoute } from './control.js';
import { PLAIN_LISTING, type ListingView } from './listing-order.js';

/**
 * Which key a path needs: the team key (/v2), the management key (/v1), or
 * none; `control` is the stand-in's own area (/_stand-in, see ./control.ts).
 */
type Area = 'team' | 'management' | 'control' | 'none';

export type Route =
  | ControlRoute
  | { name: 'list'; area: 'team' }
  | { name: 'resolve'; area: 'team'; clientUserId: string }
  | { name: 'delete-member'; area: 'management'; orgId: string; memberId: string }
  | { name: 'unknown'; area: Area; allow: string | undefined };

interface Pattern {
  name: Exclude<RouteName, 'unknown' | 'control'>;
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
  if (segments[0] === CONTROL_PREFIX) return { name: 'control', area: 'control', segments: segments.slice(1) };
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

/** Generated users average about 800 bytes; sizing the buffer up front avoids regrowing it. */
const BYTES_PER_USER_GUESS = 1024;

export interface Domain {
  directory: Directory;
  members: Members;
}

/**
 * The service's behaviour once a request is authenticated and past any
 * injected fault: list, resolve, delete a member. Answers are plain values;
 * putting them on the wire is ./server.ts's job. Control routes are
 * ./control.ts's: they read a body and skip faults. `listing`: how a list
 * page is served under the listing faults (./listing-order.ts).
 */
export function answer(domain: Domain, route: Exclude<Route, ControlRoute>, query: URLSearchParams, listing = PLAIN_LISTING): Reply {
  switch (route.name) {
    case 'list':
      return listUsers(domain.directory, query, listing);
    case 'resolve':
      return resolveUser(domain.directory, route.clientUserId);
    case 'delete-member':
      return deleteMember(domain.members, route.orgId, route.memberId);
    case 'unknown':
      return route.allow === undefined ? detailReply(404, 'Not Found') : detailReply(405, 'Method Not Allowed', { allow: route.allow });
  }
}

function listUsers(directory: Directory, query: URLSearchParams, listing: ListingView): Reply {
  const q = parseListQuery(query);
  if (!q.ok) return unprocessable(q.items);
  const total = directory.size;
  const out = new ByteBuilder(q.limit * BYTES_PER_USER_GUESS).append('{"users":');
  // The envelope keeps the offset asked for: a repeated page does not say so.
  const from = listing.sourceOffset(q.offset);
  if (listing.orderKey === undefined) directory.writePage(from, q.limit, out);
  else directory.writePageInOrder(from, q.limit, listing.orderKey, out);
  out.append(`,"total":${total},"offset":${q.offset},"limit":${q.limit}}`);
  return jsonReply(200, out.toBuffer());
}

function resolveUser(directory: Directory, clientUserId: string): Reply {
  const user = directory.byClientUserId(clientUserId);
  return user === undefined ? detailReply(404, 'User not found') : jsonReply(200, user);
}

function deleteMember(members: Members, rawOrgId: string, rawMemberId: string): Reply {
  const orgId = pathUuid(rawOrgId, 'org_id');
  const memberId = pathUuid(rawMemberId, 'member_id');
  if (!orgId.ok || !memberId.ok) return unprocessable(failedItems([orgId, memberId]));
  if (!members.remove(orgId.value, memberId.value)) return detailReply(404, 'Member not found');
  return jsonReply(200, { org_id: orgId.value, member_id: memberId.value, removed: true });
}

/** The default answer for an injected error status, shaped like what usually sends it. */
export function faultReply(status: number, retryAfter: string | undefined, body: unknown): Reply {
  const headers = retryAfter === undefined ? undefined : { 'retry-after': retryAfter };
  if (typeof body === 'string') return { status, body, contentType: 'text/plain; charset=utf-8', headers };
  if (body !== undefined) return jsonReply(status, body, headers);
  // Starlette's ServerErrorMiddleware answers an unhandled exception in plain text.
  if (status === 500) return { status, body: 'Internal Server Error', contentType: 'text/plain; charset=utf-8', headers };
  return detailReply(status, STATUS_CODES[status] ?? 'Error', headers);
}

function unprocessable(items: readonly ValidationItem[]): Reply {
  return jsonReply(422, validationErrorBody(items));
}

/**
 * Which key opens which door. Team routes (/v2) take the team key in the
 * configured header; the management route (/v1) takes only the management
 * key in X-Management-Key. A valid team key offered to /v1 — in either
 * header — is a 403 (known key, wrong resource); anything else missing or
 * wrong is a 401. Comparisons are constant-time, out of habit.
 */
export const MANAGEMENT_KEY_HEADER = 'x-management-key';

export interface Keys {
  apiKey: string;
  /** Lowercase header name. */
  apiKeyHeader: string;
  managementKey: string;
}

export type AuthOutcome = 'ok' | 'unauthorized' | 'forbidden';

export function authorizeTeam(headers: IncomingHttpHeaders, keys: Keys): AuthOutcome {
  return sameKey(headers[keys.apiKeyHeader], keys.apiKey) ? 'ok' : 'unauthorized';
}

export function authorizeManagement(headers: IncomingHttpHeaders, keys: Keys): AuthOutcome {
  const offered = headers[MANAGEMENT_KEY_HEADER];
  if (sameKey(offered, keys.managementKey)) return 'ok';
  if (sameKey(offered, keys.apiKey) || sameKey(headers[keys.apiKeyHeader], keys.apiKey)) return 'forbidden';
  return 'unauthorized';
}

function sameKey(offered: string | string[] | undefined, expected: string): boolean {
  return offeredKeyMatches(offered, keyDigest(expected));
}
