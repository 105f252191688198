import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceClient, type PageParams } from '../src/service/client.js';
import type { User } from '../src/service/schemas.js';
import { parseUserRecord } from '../src/service/user-record.js';
import { decodePage } from './support/decode-page.js';
import {
  HttpError,
  NetworkError,
  RequestValidationError,
  ResponseTooLargeError,
  ResponseValidationError,
  TimeoutError,
} from '../src/service/errors.js';
import { isRetryable } from '../src/service/retry.js';
import { startStandIn } from '../src/stand-in/index.js';
import { recordingServer } from './support/canned-server.js';

/**
 * A page read as a strict caller reads it: every record parsed, the first
 * bad one an error naming its path (the sync instead sets a bad record aside).
 */
async function listUsers(c: ServiceClient, params: PageParams, signal?: AbortSignal) {
  const page = await c.listUserRecords(params, signal);
  const users: User[] = [];
  page.spans.forEach((span, index) => {
    const parsed = parseUserRecord(JSON.parse(page.body.toString('utf8', span.start, span.end)), index);
    if (!parsed.ok) throw new ResponseValidationError(parsed.reason, 'GET', '/v2/user/');
    users.push(parsed.user);
  });
  return { total: page.total, offset: page.offset, limit: page.limit, users };
}

/** What `request` fails with; a request that succeeds fails the test. */
function failureOf(request: Promise<unknown>): Promise<unknown> {
  return request.then(
    () => expect.fail('the request succeeded: expected it to fail'),
    (err: unknown) => err,
  );
}

/** All an error shows when printed or logged: message, stack, own fields and each cause's, as text. */
function everythingShown(err: unknown): string {
  const shown = [inspect(err, { depth: 10 })];
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 10; e = e.cause, depth++) {
    shown.push(e.toString(), e.stack ?? '', JSON.stringify(e));
  }
  return shown.join('\n');
}

type StandIn = Awaited<ReturnType<typeof startStandIn>>;

let standIn: StandIn;
let client: ServiceClient;

beforeAll(async () => {
  standIn = await startStandIn({ port: 0, users: 1234, seed: 42 });
  client = new ServiceClient({
    baseUrl: standIn.baseUrl,
    apiKey: standIn.apiKey,
    apiKeyHeader: standIn.apiKeyHeader,
    managementUrl: standIn.managementUrl,
    managementKey: standIn.managementKey,
  });
});

afterAll(async () => {
  await client?.close();
  await standIn?.close();
});

describe('listUsers', () => {
  it('reads pages in the live shape and walks the whole directory', async () => {
    const first = await listUsers(client, { offset: 0, limit: 500 });
    expect(first.total).toBe(1234);
    expect(first.users).toHaveLength(500);
    const ids = new Set<string>();
    for (let offset = 0; offset < first.total; offset += 500) {
      const page = await listUsers(client, { offset, limit: 500 });
      for (const u of page.users) ids.add(u.user_id);
    }
    expect(ids.size).toBe(1234);
    const sources = first.users.flatMap((u) => u.connected_sources);
    expect(sources.length).toBeGreaterThan(0);
    expect(sources.every((s) => s.provider !== undefined && s.source !== undefined)).toBe(true);
  });

  it('keeps unknown fields of a record', async () => {
    const srv = await recordingServer(() => ({
      status: 200,
      body: JSON.stringify({ users: [{ ...minimalUser(), shiny_new_field: { a: 1 } }], total: 1, offset: 0, limit: 500 }),
    }));
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    const page = await listUsers(c, { offset: 0, limit: 500 });
    expect((page.users[0] as Record<string, unknown>).shiny_new_field).toEqual({ a: 1 });
    await c.close();
    srv.server.close();
  });

  it.each([
    [{ offset: 0, limit: 501 }, 'limit'],
    [{ offset: 0, limit: 0 }, 'limit'],
    [{ offset: 0, limit: 2.5 }, 'limit'],
    [{ offset: -1, limit: 10 }, 'offset'],
    [{ offset: 1.5, limit: 10 }, 'offset'],
  ])('rejects %j before sending, naming %s', async (params, field) => {
    const before = standIn.requests.length;
    const err = await listUsers(client, params).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestValidationError);
    expect((err as RequestValidationError).field).toBe(field);
    expect((err as Error).message).toContain(field);
    expect(standIn.requests.length).toBe(before);
  });

  it('names the field path of an invalid record', async () => {
    const users = Array.from({ length: 40 }, () => minimalUser());
    users[37] = { ...minimalUser(), user_id: 'not-a-uuid' };
    const srv = await recordingServer(() => ({ status: 200, body: JSON.stringify({ users, total: 40, offset: 0, limit: 500 }) }));
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    const err = await listUsers(c, { offset: 0, limit: 500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResponseValidationError);
    expect((err as Error).message).toContain('users[37].user_id');
    const page = await c.listUserRecords({ offset: 0, limit: 500 });
    expect(decodePage(page, 0, () => 'write').rejected.map((r) => r.index)).toEqual([37]);
    await c.close();
    srv.server.close();
  });

  it('turns a body that is not JSON into a validation error, not a crash', async () => {
    const srv = await recordingServer(() => ({ status: 200, body: '<html>oops' }));
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    await expect(listUsers(c, { offset: 0, limit: 5 })).rejects.toBeInstanceOf(ResponseValidationError);
    await c.close();
    srv.server.close();
  });
});

describe('tolerance of live payloads', () => {
  it('accepts provider-only, source-only, null and absent optionals, both date-time forms', async () => {
    const tolerant = [
      { ...minimalUser(), connected_sources: [{ created_on: '2026-01-12T12:39:40Z', source: descriptor('oura') }] },
      { ...minimalUser(), connected_sources: [{ created_on: '2022-08-04T12:42:45.596792+00:00', provider: descriptor('whoop') }] },
      { ...minimalUser(), fallback_time_zone: null, fallback_birth_date: null, ingestion_start: null, ingestion_end: null },
      (() => {
        const u: Record<string, unknown> = minimalUser();
        delete u.fallback_time_zone;
        delete u.created_on;
        return u;
      })(),
    ];
    const srv = await recordingServer(() => ({
      status: 200,
      body: JSON.stringify({ users: tolerant, total: tolerant.length, offset: 0, limit: 500 }),
    }));
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    const page = await listUsers(c, { offset: 0, limit: 500 });
    expect(page.users).toHaveLength(4);
    await c.close();
    srv.server.close();
  });

  it('is strict about identity fields', async () => {
    for (const field of ['user_id', 'team_id', 'client_user_id']) {
      const u: Record<string, unknown> = minimalUser();
      delete u[field];
      const srv = await recordingServer(() => ({ status: 200, body: JSON.stringify({ users: [u], total: 1, offset: 0, limit: 1 }) }));
      const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
      const err = await listUsers(c, { offset: 0, limit: 1 }).catch((e: unknown) => e);
      expect((err as Error).message).toContain(`users[0].${field}`);
      await c.close();
      srv.server.close();
    }
  });
});

describe('resolveUser', () => {
  it('finds a user by client_user_id', async () => {
    const { users } = await listUsers(client, { offset: 0, limit: 3 });
    const wanted = users[2]!;
    const result = await client.resolveUser(wanted.client_user_id);
    expect(result).toEqual({ found: true, user: wanted, rawJson: expect.any(String), warnings: [] });
    expect(result.found && JSON.parse(result.rawJson)).toEqual(wanted);
  });

  it('gives a typed not-found for an unknown id', async () => {
    expect(await client.resolveUser('nobody-here')).toEqual({ found: false });
  });

  it.each(['a/b', 'what?x=1', 'frag#ment', '100%', 'with space', '..', '.', '../../v1/org', 'ünïcødé-用户', "it's(*)!"])(
    'encodes %j as exactly one path segment',
    async (id) => {
      const srv = await recordingServer(() => ({ status: 404, body: '{"detail":"Not Found"}' }));
      const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
      expect(await c.resolveUser(id)).toEqual({ found: false });
      const path = srv.seen[0]!.path;
      const segments = path.split('/');
      expect(segments.slice(0, 4)).toEqual(['', 'v2', 'user', 'resolve']);
      expect(segments).toHaveLength(5);
      expect(decodeURIComponent(segments[4]!)).toBe(id);
      expect(segments[4]).not.toMatch(/[?#/ ]|^\.{1,2}$/);
      await c.close();
      srv.server.close();
    },
  );

  it('round-trips awkward ids through the stand-in', async () => {
    const { users } = await listUsers(client, { offset: 0, limit: 500 });
    for (const u of users.slice(0, 20)) {
      const r = await client.resolveUser(u.client_user_id);
      expect(r.found && r.user.user_id).toBe(u.user_id);
    }
  });

  it('rejects an empty id before sending', async () => {
    const before = standIn.requests.length;
    await expect(client.resolveUser('')).rejects.toBeInstanceOf(RequestValidationError);
    expect(standIn.requests.length).toBe(before);
  });
});

describe('deleteOrgMember', () => {
  it('deletes once, then reports not_found', async () => {
    const [member] = standIn.members.list();
    if (member === undefined) throw new Error('stand-in seeded no members');
    expect((await client.deleteOrgMember(member.orgId, member.memberId)).outcome).toBe('deleted');
    expect((await client.deleteOrgMember(member.orgId, member.memberId)).outcome).toBe('not_found');
    expect(standIn.members.effectiveDeletes(member.orgId, member.memberId)).toBe(1);
    expect(standIn.members.deleteCalls(member.orgId, member.memberId)).toBe(2);
  });

  it('carries a FastAPI 422 detail list', async () => {
    const err = await client.deleteOrgMember('not-a-uuid', 'also-not').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HttpError);
    const e = err as HttpError;
    expect(e.status).toBe(422);
    expect(Array.isArray(e.detail)).toBe(true);
    expect(e.message).toContain('org_id');
    expect(isRetryable(e)).toBe(false);
  });

  it('fails before sending when no management address is configured', async () => {
    const c = new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: standIn.apiKey });
    await expect(c.deleteOrgMember(crypto.randomUUID(), crypto.randomUUID())).rejects.toBeInstanceOf(RequestValidationError);
    await c.close();
  });
});

describe('errors', () => {
  it('parses detail as a string, an object or a list, and Retry-After in seconds or as a date', async () => {
    const date = new Date(Date.now() + 120_000).toUTCString();
    const answers: Record<string, { status: number; body: string; headers?: Record<string, string> }> = {
      '/v2/user/resolve/s': { status: 503, body: '{"detail":"down for maintenance"}', headers: { 'retry-after': '7' } },
      '/v2/user/resolve/o': { status: 400, body: '{"detail":{"error_type":"bad","error_message":"nope"}}' },
      '/v2/user/resolve/d': { status: 429, body: '{}', headers: { 'retry-after': date } },
      '/v2/user/resolve/h': { status: 502, body: '<html>bad gateway</html>' },
    };
    const srv = await recordingServer((path) => answers[path] ?? { status: 500, body: '' });
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    const s = (await c.resolveUser('s').catch((e: unknown) => e)) as HttpError;
    expect([s.status, s.detail, s.retryAfterMs, s.method, s.path]).toEqual([
      503,
      'down for maintenance',
      7000,
      'GET',
      '/v2/user/resolve/s',
    ]);
    const o = (await c.resolveUser('o').catch((e: unknown) => e)) as HttpError;
    expect(o.detail).toEqual({ error_type: 'bad', error_message: 'nope' });
    expect(isRetryable(o)).toBe(false);
    const d = (await c.resolveUser('d').catch((e: unknown) => e)) as HttpError;
    expect(d.retryAfterMs).toBeGreaterThan(100_000);
    expect(d.retryAfterMs).toBeLessThanOrEqual(120_000);
    expect(isRetryable(d)).toBe(true);
    const h = (await c.resolveUser('h').catch((e: unknown) => e)) as HttpError;
    expect([h.status, h.detail]).toEqual([502, undefined]);
    await c.close();
    srv.server.close();
  });

  it('maps stand-in faults to retryable errors', async () => {
    standIn.faults.failNext({ method: 'GET', status: 429, times: 1, retryAfter: 3 });
    const e429 = (await listUsers(client, { offset: 0, limit: 10 }).catch((e: unknown) => e)) as HttpError;
    expect([e429.status, e429.retryAfterMs, isRetryable(e429)]).toEqual([429, 3000, true]);
    standIn.faults.failNext({ method: 'GET', status: 503, times: 1, retryAfter: 1 });
    const e503 = (await listUsers(client, { offset: 0, limit: 10 }).catch((e: unknown) => e)) as HttpError;
    expect([e503.status, isRetryable(e503)]).toEqual([503, true]);
    expect((await listUsers(client, { offset: 0, limit: 10 })).users).toHaveLength(10);
  });

  it('reports refused connections as network errors', async () => {
    const srv = await recordingServer(() => ({ status: 200, body: '{}' }));
    const url = srv.url;
    await new Promise((r) => srv.server.close(r));
    const c = new ServiceClient({ baseUrl: url, apiKey: 'pk_test' });
    const err = await listUsers(c, { offset: 0, limit: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NetworkError);
    expect((err as NetworkError).code).toBe('ECONNREFUSED');
    expect(isRetryable(err)).toBe(true);
    await c.close();
  });

  it('reports a connection reset as a network error', async () => {
    standIn.faults.set({ resetRate: 1 });
    try {
      const err = await listUsers(client, { offset: 0, limit: 10 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NetworkError);
      expect(isRetryable(err)).toBe(true);
    } finally {
      standIn.faults.clear();
    }
  });

  // undici checks its timers about once a second, so the fault must outlast that.
  it('distinguishes header and body timeouts', async () => {
    const slow = new ServiceClient({
      baseUrl: standIn.baseUrl,
      apiKey: standIn.apiKey,
      apiKeyHeader: standIn.apiKeyHeader,
      headersTimeoutMs: 100,
      bodyTimeoutMs: 100,
    });
    standIn.faults.set({ latencyMs: 3_000 });
    const headers = await listUsers(slow, { offset: 0, limit: 10 }).catch((e: unknown) => e);
    standIn.faults.clear();
    expect(headers).toBeInstanceOf(TimeoutError);
    expect((headers as TimeoutError).phase).toBe('headers');
    standIn.faults.set({ slowBodyRate: 1, slowChunkBytes: 256, slowChunkDelayMs: 3_000 });
    const body = await listUsers(slow, { offset: 0, limit: 500 }).catch((e: unknown) => e);
    standIn.faults.clear();
    expect(body).toBeInstanceOf(TimeoutError);
    expect((body as TimeoutError).phase).toBe('body');
    await slow.close();
  });
});

describe('bounds on one request', () => {
  it('gives up on a body that trickles a byte every 100 ms: a total deadline, which the idle body timeout never trips', async () => {
    const c = new ServiceClient({
      baseUrl: standIn.baseUrl,
      apiKey: standIn.apiKey,
      apiKeyHeader: standIn.apiKeyHeader,
      bodyTimeoutMs: 5_000,
      requestTimeoutMs: 1_500,
    });
    standIn.faults.set({ slowBodyRate: 1, slowChunkBytes: 1, slowChunkDelayMs: 100 });
    try {
      const err = await listUsers(c, { offset: 0, limit: 500 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TimeoutError);
      expect((err as TimeoutError).phase).toBe('total');
      expect((err as Error).message).toContain('HTTP_REQUEST_TIMEOUT_MS');
      expect(isRetryable(err)).toBe(true);
    } finally {
      standIn.faults.clear();
      await c.close();
    }
    // The client is still usable afterwards.
    expect((await listUsers(client, { offset: 0, limit: 5 })).users).toHaveLength(5);
  });

  it('an abort by the caller stays an abort, not a timeout', async () => {
    const c = new ServiceClient({
      baseUrl: standIn.baseUrl,
      apiKey: standIn.apiKey,
      apiKeyHeader: standIn.apiKeyHeader,
      requestTimeoutMs: 60_000,
    });
    standIn.faults.set({ latencyMs: 2_000 });
    try {
      const err = await listUsers(c, { offset: 0, limit: 5 }, AbortSignal.timeout(200)).catch((e: unknown) => e);
      expect(err).not.toBeInstanceOf(TimeoutError);
    } finally {
      standIn.faults.clear();
      await c.close();
    }
  });

  it('stops reading a page larger than its bound, and does not retry it', async () => {
    const c = new ServiceClient({
      baseUrl: standIn.baseUrl,
      apiKey: standIn.apiKey,
      apiKeyHeader: standIn.apiKeyHeader,
      maxBodyBytes: 10_000,
    });
    const err = await listUsers(c, { offset: 0, limit: 500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResponseTooLargeError);
    expect((err as Error).message).toContain('SYNC_MAX_PAGE_BYTES');
    expect(isRetryable(err)).toBe(false);
    expect((await listUsers(c, { offset: 0, limit: 3 })).users).toHaveLength(3);
    await c.close();
  });

  it('stops reading a body that never ends once it passes the bound', async () => {
    // The stand-in's bodies end; this one streams forever, so only the bound can stop it.
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = (): void => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump);
      };
      res.write('{"users":[');
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const c = new ServiceClient({
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      apiKey: 'pk_test',
      maxBodyBytes: 1024 * 1024,
    });
    try {
      const err = await listUsers(c, { offset: 0, limit: 500 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ResponseTooLargeError);
    } finally {
      await c.close();
      server.closeAllConnections();
      server.close();
    }
  });
});

describe('key isolation', () => {
  it('sends the team key only to base_url and the management key only to management_url', async () => {
    const team = await recordingServer(() => ({ status: 200, body: JSON.stringify({ users: [], total: 0, offset: 0, limit: 5 }) }));
    const mgmt = await recordingServer(() => ({ status: 200, body: '{"ok":true}' }));
    const c = new ServiceClient({
      baseUrl: team.url,
      apiKey: 'pk_us_team_secret',
      apiKeyHeader: 'x-vital-api-key',
      managementUrl: mgmt.url,
      managementKey: 'mg_management_secret',
    });
    await listUsers(c, { offset: 0, limit: 5 });
    await c.resolveUser('x').catch(() => undefined);
    await c.deleteOrgMember(crypto.randomUUID(), crypto.randomUUID());
    expect(team.seen).toHaveLength(2);
    for (const r of team.seen) {
      expect(r.headers['x-vital-api-key']).toBe('pk_us_team_secret');
      expect(r.headers.accept).toBe('application/json');
      expect(r.headers['x-management-key']).toBeUndefined();
      expect(r.headers['x-service-org-key']).toBeUndefined();
    }
    expect(mgmt.seen).toHaveLength(1);
    const del = mgmt.seen[0]!;
    expect(del.method).toBe('DELETE');
    expect(del.headers['x-management-key']).toBe('mg_management_secret');
    expect(del.headers['x-vital-api-key']).toBeUndefined();
    expect(del.headers['x-service-org-key']).toBeUndefined();
    expect(JSON.stringify(del.headers)).not.toContain('pk_us_team_secret');
    await c.close();
    team.server.close();
    mgmt.server.close();
  });

  it('never puts a key into an error message', async () => {
    const srv = await recordingServer(() => ({ status: 401, body: '{"detail":"Invalid API key"}' }));
    const keys = { apiKey: 'pk_us_super_secret', managementKey: 'mg_super_secret' };
    const c = new ServiceClient({ baseUrl: srv.url, managementUrl: srv.url, ...keys });
    // Nothing listens on port 1: a NetworkError, with undici's error as its cause.
    const unreachable = new ServiceClient({ baseUrl: 'http://127.0.0.1:1', managementUrl: 'http://127.0.0.1:1', ...keys });
    try {
      const errors = [
        await failureOf(listUsers(c, { offset: 0, limit: 5 })),
        await failureOf(c.deleteOrgMember('a', 'b')),
        await failureOf(listUsers(c, { offset: 0, limit: 501 })),
        await failureOf(listUsers(unreachable, { offset: 0, limit: 5 })),
        await failureOf(unreachable.deleteOrgMember('a', 'b')),
      ];
      expect(errors.map((e) => (e as Error).name)).toEqual([
        'HttpError',
        'HttpError',
        'RequestValidationError',
        'NetworkError',
        'NetworkError',
      ]);
      expect((errors[3] as Error).cause).toBeInstanceOf(Error);
      // The keys did go out: each error had them within reach.
      expect(JSON.stringify(srv.seen)).toContain('pk_us_super_secret');
      expect(JSON.stringify(srv.seen)).toContain('mg_super_secret');
      for (const e of errors) expect(everythingShown(e)).not.toContain('super_secret');
    } finally {
      await c.close();
      await unreachable.close();
      srv.server.close();
    }
  });

  it('gets 401 from the stand-in with a wrong key and 403 with a team key on /v1', async () => {
    const wrong = new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: 'sk_wrong', apiKeyHeader: standIn.apiKeyHeader });
    expect(((await listUsers(wrong, { offset: 0, limit: 1 }).catch((e: unknown) => e)) as HttpError).status).toBe(401);
    const teamAsMgmt = new ServiceClient({ managementUrl: standIn.managementUrl, managementKey: standIn.apiKey });
    const [member] = standIn.members.list().slice(-1);
    const err = (await teamAsMgmt.deleteOrgMember(member!.orgId, member!.memberId).catch((e: unknown) => e)) as HttpError;
    expect(err.status).toBe(403);
    expect(isRetryable(err)).toBe(false);
    await wrong.close();
    await teamAsMgmt.close();
  });
});

function descriptor(slug: string) {
  return { name: slug.toUpperCase(), slug, logo: `https://logo.example/${slug}.png` };
}

function minimalUser(): Record<string, unknown> {
  return {
    user_id: crypto.randomUUID(),
    team_id: '5f0d8e3c-8f3a-4b8e-9a51-0f4a6c7e9b21',
    client_user_id: `cu_${Math.random().toString(36).slice(2)}`,
    created_on: '2026-01-12T12:39:40Z',
    connected_sources: [],
    fallback_time_zone: { id: 'Europe/London', source_slug: 'manual', updated_at: '2026-01-12T12:39:40Z' },
  };
}
