/**
 * The stand-in's control routes, under `/_stand-in/`: change chosen users
 * while a client syncs — add one, update, delete or restore a user — and
 * see the result in the next list page.
 *
 * They are not part of the service, so the service's key rules do not apply:
 * no key is needed (a person with curl, or a test, has the banner's port and
 * nothing else), and instead they answer only to loopback peers — a
 * stand-in started with `--host 0.0.0.0` must not let the network rewrite
 * its directory. Faults, failNext rules and churn never touch them: a test
 * setting up a case must not eat the failure it queued for the client.
 */
import type { IncomingMessage } from 'node:http';
import { z } from 'zod';
import type { Directory } from './directory.js';
import { CHANGES, DIRECTIONS } from './revision.js';
import { detailReply, jsonReply, type Reply } from './reply.js';

export const CONTROL_PREFIX = '_stand-in';

/** Segments after `/_stand-in/`, decoded. */
export interface ControlRoute {
  name: 'control';
  area: 'control';
  segments: readonly string[];
}

const ACTIONS = ['update', 'delete', 'restore'] as const;
type Action = (typeof ACTIONS)[number];

const MAX_BODY_BYTES = 64 * 1024;

/** Bodies are optional; when sent, unknown keys are refused so a typo is not silently ignored. */
const AddBody = z.strictObject({ count: z.int().min(1).max(10_000).default(1) });
/** `change` and `direction` are update's alone; delete and restore take no body, or `{}`. */
const UserBody = z
  .strictObject({ change: z.enum(CHANGES).optional(), direction: z.enum(DIRECTIONS).optional() })
  .refine((b) => b.direction === undefined || b.change === 'connected_sources', {
    path: ['direction'],
    message: 'only a connected_sources change takes a direction',
  });

/** Loopback peers only; IPv4-mapped IPv6 included, since a dual-stack listener reports those. */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith('::ffff:') ? address.slice('::ffff:'.length) : address;
  return v4.startsWith('127.') || address === '::1';
}

export async function control(directory: Directory, route: ControlRoute, req: IncomingMessage): Promise<Reply> {
  if (!isLoopback(req.socket.remoteAddress)) {
    req.resume();
    return detailReply(403, "the stand-in's control routes answer only to clients on this machine (loopback)");
  }
  const target = targetOf(route.segments);
  if (target === undefined) {
    req.resume();
    return detailReply(404, `no control route /${[CONTROL_PREFIX, ...route.segments].join('/')}: see docs/stand-in.md`);
  }
  if (req.method !== 'POST') {
    req.resume();
    return detailReply(405, 'Method Not Allowed: control routes take POST', { allow: 'POST' });
  }
  const body = await readJsonBody(req);
  if (!body.ok) return detailReply(400, body.detail);
  if (target.kind === 'add') return add(directory, body.value);
  return act(directory, target.userId, target.action, body.value);
}

type Target = { kind: 'add' } | { kind: 'user'; userId: string; action: Action };

function targetOf(segments: readonly string[]): Target | undefined {
  const [users, userId, action, ...rest] = segments;
  if (users !== 'users' || rest.length > 0) return undefined;
  if (userId === undefined || (userId === '' && action === undefined)) return { kind: 'add' };
  const known = ACTIONS.find((a) => a === action);
  return userId !== '' && known !== undefined ? { kind: 'user', userId, action: known } : undefined;
}

function add(directory: Directory, raw: unknown): Reply {
  const body = parse(AddBody, raw);
  if (!body.ok) return detailReply(400, body.detail);
  const users = directory.add(body.value.count).map((id) => directory.get(id));
  return jsonReply(201, { action: 'added', users });
}

function act(directory: Directory, userId: string, action: Action, raw: unknown): Reply {
  const body = parse(UserBody, raw);
  if (!body.ok) return detailReply(400, body.detail);
  const { change = 'fallback_time_zone' } = body.value;
  if (action !== 'update' && (body.value.change !== undefined || body.value.direction !== undefined))
    return detailReply(400, `body.change: only update takes a change, not ${action}`);
  const state = directory.state(userId);
  if (state === 'unknown') return detailReply(404, `no user with user_id ${JSON.stringify(userId)} in this directory`);
  if (action === 'restore') {
    if (state === 'live') return detailReply(409, `user ${JSON.stringify(userId)} is not deleted: nothing to restore`);
    directory.restore([userId]);
    return jsonReply(200, { action: 'restored', user: directory.get(userId) });
  }
  if (state === 'deleted') return detailReply(409, `user ${JSON.stringify(userId)} is deleted: restore it first`);
  if (action === 'delete') {
    const user = directory.get(userId);
    directory.delete([userId]);
    return jsonReply(200, { action: 'deleted', user });
  }
  try {
    return jsonReply(200, { action: 'updated', change, user: directory.update(userId, change, body.value.direction) });
  } catch (err) {
    if (err instanceof RangeError) return detailReply(409, `user ${JSON.stringify(userId)}: ${err.message}`);
    throw err;
  }
}

type Parsed<T> = { ok: true; value: T } | { ok: false; detail: string };

function parse<T>(schema: z.ZodType<T>, raw: unknown): Parsed<T> {
  const result = schema.safeParse(raw);
  if (result.success) return { ok: true, value: result.data };
  const issue = result.error.issues[0];
  const where = issue === undefined || issue.path.length === 0 ? 'body' : `body.${issue.path.join('.')}`;
  return { ok: false, detail: `${where}: ${issue?.message ?? 'invalid'}` };
}

/** The body as JSON; an empty body is `{}`, so `curl -X POST` without `-d` works. */
async function readJsonBody(req: IncomingMessage): Promise<Parsed<unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return { ok: false, detail: `body: larger than ${MAX_BODY_BYTES} bytes` };
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (text === '') return { ok: true, value: {} };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { ok: false, detail: `body is not JSON: ${(err as Error).message}` };
  }
}
