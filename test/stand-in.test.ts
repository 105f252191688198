import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserSchema } from '../src/service/schemas.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { call, deleteMember, getPage, getTeam, managementHeaders, teamHeaders } from './support/stand-in-http.js';

let s: StandIn;
beforeAll(async () => {
  s = await startStandIn({ users: 1234, seed: 3 });
});
afterAll(() => s.close());

describe('listing', () => {
  it('answers /v2/user/ and /v2/user alike, with defaults offset 0 and limit 100', async () => {
    const slash = await getTeam(s, '/v2/user/');
    const bare = await getTeam(s, '/v2/user');
    expect(slash.status).toBe(200);
    expect(slash.headers.get('content-type')).toMatch(/^application\/json/);
    expect(bare.body).toEqual(slash.body);
    const page = slash.body as { users: unknown[]; total: number; offset: number; limit: number };
    expect(page).toMatchObject({ total: 1234, offset: 0, limit: 100 });
    expect(page.users).toHaveLength(100);
    for (const user of page.users) expect(UserSchema.safeParse(user).success).toBe(true);
  });

  it('pages through the whole directory in the directory order', async () => {
    const seen: unknown[] = [];
    for (let offset = 0; ; offset += 500) {
      const page = await getPage(s, offset, 500, offset % 1000 === 0 ? '/v2/user/' : '/v2/user');
      expect(page).toMatchObject({ total: 1234, offset, limit: 500 });
      seen.push(...page.users.map((u) => u.user_id));
      if (page.users.length < 500) break;
    }
    expect(seen).toEqual([...s.directory.records()].map((u) => u.user_id));
    expect((await getPage(s, 5000, 10)).users).toEqual([]);
  });
});

describe('validation errors are FastAPI-shaped 422s', () => {
  const cases: Array<[string, unknown[]]> = [
    [
      'limit=501',
      [
        {
          type: 'less_than_equal',
          loc: ['query', 'limit'],
          msg: 'Input should be less than or equal to 500',
          input: '501',
          ctx: { le: 500 },
        },
      ],
    ],
    [
      'limit=0',
      [
        {
          type: 'greater_than_equal',
          loc: ['query', 'limit'],
          msg: 'Input should be greater than or equal to 1',
          input: '0',
          ctx: { ge: 1 },
        },
      ],
    ],
    ['offset=-1', [{ type: 'greater_than_equal', loc: ['query', 'offset'], input: '-1', ctx: { ge: 0 } }]],
    [
      'offset=abc',
      [
        {
          type: 'int_parsing',
          loc: ['query', 'offset'],
          msg: 'Input should be a valid integer, unable to parse string as an integer',
          input: 'abc',
        },
      ],
    ],
    ['limit=2.5', [{ type: 'int_parsing', loc: ['query', 'limit'], input: '2.5' }]],
    [
      'offset=x&limit=9999',
      [
        { type: 'int_parsing', loc: ['query', 'offset'] },
        { type: 'less_than_equal', loc: ['query', 'limit'] },
      ],
    ],
  ];
  it.each(cases)('GET /v2/user/?%s', async (query, detail) => {
    const answer = await getTeam(s, `/v2/user/?${query}`);
    expect(answer.status).toBe(422);
    expect(answer.body).toMatchObject({ detail });
    expect((answer.body as { detail: unknown[] }).detail).toHaveLength(detail.length);
  });

  it('rejects non-UUID org and member ids', async () => {
    const [member] = s.members.list();
    const answer = await deleteMember(s, 'not-a-uuid', member?.memberId ?? '');
    expect(answer.status).toBe(422);
    expect(answer.body).toMatchObject({
      detail: [{ type: 'uuid_parsing', loc: ['path', 'org_id'], input: 'not-a-uuid', ctx: { error: expect.any(String) } }],
    });
    const both = await deleteMember(s, '1', '2');
    expect((both.body as { detail: Array<{ loc: unknown }> }).detail.map((d) => d.loc)).toEqual([
      ['path', 'org_id'],
      ['path', 'member_id'],
    ]);
    expect(s.members.has(member?.orgId ?? '', member?.memberId ?? '')).toBe(true);
  });
});

describe('auth', () => {
  const list = (headers: Record<string, string>) => call(`${s.baseUrl}/v2/user?limit=1`, { headers });
  const remove = (headers: Record<string, string>) => {
    const [m] = s.members.list();
    return deleteMember(s, m?.orgId ?? '', m?.memberId ?? '', headers);
  };

  it('team routes need the team key in the configured header', async () => {
    expect((await list({})).status).toBe(401);
    expect((await list({ [s.apiKeyHeader]: 'sk_wrong' })).status).toBe(401);
    expect((await list({ [s.apiKeyHeader]: s.managementKey })).status).toBe(401);
    expect((await list({ 'X-Management-Key': s.managementKey })).status).toBe(401);
    expect((await list({ [s.apiKeyHeader.toUpperCase()]: s.apiKey })).status).toBe(200);
  });

  it('the management route takes only the management key, and a team key gets 403', async () => {
    expect((await remove({})).status).toBe(401);
    expect((await remove({ 'X-Management-Key': 'mg_wrong' })).status).toBe(401);
    expect((await remove({ 'X-Service-Org-Key': s.managementKey })).status).toBe(401);
    expect((await remove({ 'X-Management-Key': s.apiKey })).status).toBe(403);
    expect((await remove(teamHeaders(s))).status).toBe(403);
  });

  it('error bodies are {detail: string} and never echo a key', async () => {
    for (const answer of [await list({ [s.apiKeyHeader]: 'sk_secret_guess' }), await remove({ 'X-Management-Key': s.apiKey })]) {
      expect(answer.body).toEqual({ detail: expect.any(String) });
      expect(answer.text).not.toContain('sk_');
      expect(answer.text).not.toContain(s.apiKey);
    }
  });

  it('unknown paths are 404 and wrong methods 405, after auth', async () => {
    expect((await getTeam(s, '/v2/nothing')).status).toBe(404);
    expect((await call(`${s.baseUrl}/v2/nothing`)).status).toBe(401);
    expect((await call(`${s.baseUrl}/v2/user`, { method: 'DELETE', headers: teamHeaders(s) })).status).toBe(405);
    expect((await call(`${s.baseUrl}/`)).status).toBe(404);
  });
});

describe('resolve', () => {
  const weird = [
    'a b',
    'x/y',
    'what?',
    'hash#tag',
    '100%',
    '%2F',
    'a/../b',
    '..x',
    'ü-東京-😀',
    ' lead',
    'plus+sign',
    'semi;colon',
    'tab\tin',
  ];
  let dir: string;
  let f: StandIn;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stand-in-'));
    const records = weird.map((client_user_id, i) => ({
      user_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      team_id: '11111111-1111-4111-8111-111111111111',
      client_user_id,
      connected_sources: [],
      brand_new_field: { i },
    }));
    await writeFile(join(dir, 'users.json'), JSON.stringify({ users: records }));
    f = await startStandIn({ usersFile: join(dir, 'users.json'), seed: 1 });
  });
  afterAll(async () => {
    await f.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('round-trips client ids that need encoding, served as-is', async () => {
    for (const [i, id] of weird.entries()) {
      const answer = await getTeam(f, `/v2/user/resolve/${encodeURIComponent(id)}`);
      expect(answer.status, id).toBe(200);
      expect(answer.body).toMatchObject({ client_user_id: id, brand_new_field: { i } });
    }
    expect(f.requests.entries().some((e) => e.path.includes('%2F..%2F'))).toBe(true);
  });

  it('resolves generated ids, awkward ones included, and 404s unknown ones', async () => {
    const awkward = [...s.directory.records()].map((u) => String(u.client_user_id)).filter((id) => encodeURIComponent(id) !== id);
    const plain = String(s.directory.page(7, 1)[0]?.client_user_id);
    expect(awkward.length).toBeGreaterThan(0);
    for (const id of [plain, ...awkward]) {
      const answer = await getTeam(s, `/v2/user/resolve/${encodeURIComponent(id)}`);
      expect(answer.status, id).toBe(200);
      expect(answer.body).toEqual(s.directory.byClientUserId(id));
    }
    const missing = await getTeam(s, '/v2/user/resolve/cu_nobody');
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ detail: expect.any(String) });
  });
});

describe('org members', () => {
  it('deletes once, then answers 404, counting every call', async () => {
    const [m] = s.members.list().slice(-1);
    const { orgId, memberId } = m ?? { orgId: '', memberId: '' };
    const first = await deleteMember(s, orgId, memberId);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ org_id: orgId, member_id: memberId, removed: true });
    expect(s.members.has(orgId, memberId)).toBe(false);
    const again = await deleteMember(s, orgId.toUpperCase(), memberId);
    expect(again.status).toBe(404);
    expect(again.body).toEqual({ detail: expect.any(String) });
    expect(s.members.deleteCalls(orgId, memberId)).toBe(2);
    expect(s.members.effectiveDeletes(orgId, memberId)).toBe(1);
  });

  it('seeds deterministic members and accepts programmatic ones', async () => {
    const again = await startStandIn({ users: 0, seed: 3 });
    const other = await startStandIn({ users: 0, seed: 4 });
    try {
      expect(again.members.list()).toHaveLength(60);
      expect(again.members.orgIds()).toEqual(s.members.orgIds());
      expect(other.members.orgIds()).not.toEqual(s.members.orgIds());
      const org = '7b0c2a4e-1f1e-4c5e-9a0a-0d7c1f7e9b11';
      const member = '5d2f7a1c-3b4e-4f6a-8c9d-0e1f2a3b4c5d';
      again.members.add(org, member);
      expect((await deleteMember(again, org, member)).status).toBe(200);
      expect((await deleteMember(again, org, member)).status).toBe(404);
    } finally {
      await Promise.all([again.close(), other.close()]);
    }
  });
});

describe('observability', () => {
  it('logs which headers reached which route, and counts per route and status', async () => {
    const t = await startStandIn({ users: 5, seed: 9, apiKeyHeader: 'X-Team-Key', apiKey: 'sk_test_team', managementKey: 'mg_test_mgmt' });
    try {
      expect(t.apiKeyHeader).toBe('x-team-key');
      await getTeam(t, '/v2/user?limit=2');
      const [m] = t.members.list();
      await deleteMember(t, m?.orgId ?? '', m?.memberId ?? '');
      const [list, del] = t.requests.entries();
      expect(list).toMatchObject({ method: 'GET', path: '/v2/user', query: 'limit=2', route: 'list', status: 200 });
      expect(list?.headers['x-team-key']).toBe('sk_test_team');
      expect(list?.headers['x-management-key']).toBeUndefined();
      expect(del).toMatchObject({ method: 'DELETE', route: 'delete-member', status: 200 });
      expect(del?.headers['x-management-key']).toBe('mg_test_mgmt');
      expect(del?.headers['x-team-key']).toBeUndefined();
      expect(t.counts.get('list', 200)).toBe(1);
      expect(t.counts.snapshot()).toEqual({ 'list 200': 1, 'delete-member 200': 1 });
      expect(managementHeaders(t)).toEqual({ 'X-Management-Key': 'mg_test_mgmt' });
    } finally {
      await t.close();
    }
  });

  it('refuses identical team and management keys', async () => {
    await expect(startStandIn({ apiKey: 'same', managementKey: 'same' })).rejects.toThrow(RangeError);
  });
});
