/**
 * The service's behaviour once a request is authenticated and past any
 * injected fault: list, resolve, delete a member. Answers are plain values;
 * putting them on the wire is ./respond.ts's job.
 */
import { STATUS_CODES } from 'node:http';
import { ByteBuilder } from './byte-builder.js';
import type { Directory } from './directory.js';
import type { Members } from './members.js';
import { detailReply, jsonReply, type Reply } from './respond.js';
import type { Route } from './routes.js';
import { failedItems, pathUuid, validationErrorBody, type ValidationItem } from '../wire/validation.js';
import { parseListQuery } from '../wire/list-query.js';

export { MAX_LIMIT, DEFAULT_LIMIT } from '../wire/list-query.js';
/** Generated users average about 800 bytes; sizing the buffer up front avoids regrowing it. */
const BYTES_PER_USER_GUESS = 1024;

export interface Domain {
  directory: Directory;
  members: Members;
}

export function answer(domain: Domain, route: Route, query: URLSearchParams): Reply {
  switch (route.name) {
    case 'list':
      return listUsers(domain.directory, query);
    case 'resolve':
      return resolveUser(domain.directory, route.clientUserId);
    case 'delete-member':
      return deleteMember(domain.members, route.orgId, route.memberId);
    case 'unknown':
      return route.allow === undefined
        ? detailReply(404, 'Not Found')
        : detailReply(405, 'Method Not Allowed', { allow: route.allow });
  }
}

function listUsers(directory: Directory, query: URLSearchParams): Reply {
  const q = parseListQuery(query);
  if (!q.ok) return unprocessable(q.items);
  const total = directory.size;
  const out = new ByteBuilder(q.limit * BYTES_PER_USER_GUESS).append('{"users":');
  directory.writePage(q.offset, q.limit, out);
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
