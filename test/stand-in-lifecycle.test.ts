/**
 * The stand-in across a user's whole lifecycle, over real HTTP: update
 * churn between pages, the /_stand-in control routes, keys that survive a
 * restart, and dates that reach today.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserSchema } from '../src/service/schemas.js';
import { derivedKey, startStandIn, startOfUtcDay, type StandIn } from '../src/stand-in/index.js';
import { isLoopback } from '../src/stand-in/control.js';
import { call, getPage, teamHeaders } from './support/stand-in-http.js';

const DAY_MS = 86_400_000;

type User = Record<string, unknown>;

function control(s: StandIn, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const init: RequestInit = { method: 'POST' };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  return call(`${s.baseUrl}/_stand-in${path}`, init);
}

async function allUsers(s: StandIn): Promise<User[]> {
  return (await getPage(s, 0, 500)).users;
}

describe('update churn', () => {
  it('changes K live records after each list page, keeping ids, order and total', async () => {
    const s = await startStandIn({ users: 300, seed: 4, faults: { churnUpdatePerPage: 5 } });
    try {
      const first = await allUsers(s);
      const second = await allUsers(s);
      expect(second.map((u) => u.user_id)).toEqual(first.map((u) => u.user_id));
      const changed = second.filter((u, i) => JSON.stringify(u) !== JSON.stringify(first[i]));
      expect(changed.length).toBeGreaterThan(0);
      expect(changed.length).toBeLessThanOrEqual(5);
      for (const u of changed) expect(UserSchema.safeParse(u).success).toBe(true);
      const third = await allUsers(s);
      expect(third.filter((u, i) => JSON.stringify(u) !== JSON.stringify(second[i])).length).toBeGreaterThan(0);
    } finally {
      await s.close();
    }
  });

  it('is drawn from the seed, and leaves the add/delete churn of a seed as it was', async () => {
    const run = async (churnUpdatePerPage: number) => {
      const s = await startStandIn({ users: 300, seed: 2, faults: { churnAddPerPage: 2, churnDeletePerPage: 2, churnUpdatePerPage } });
      try {
        for (let offset = 0; offset < 300; offset += 100) await getPage(s, offset, 100);
        return [...s.directory.records()];
      } finally {
        await s.close();
      }
    };
    const updated = await run(7);
    expect(await run(7)).toEqual(updated);
    const without = await run(0);
    expect(updated.map((u) => u.user_id)).toEqual(without.map((u) => u.user_id));
    expect(updated).not.toEqual(without);
  });

  it('updates both kinds of change: time zones, and connected sources added and removed', async () => {
    const s = await startStandIn({ users: 200, seed: 9, faults: { churnUpdatePerPage: 20 } });
    try {
      const before = await allUsers(s);
      for (let k = 0; k < 5; k++) await getPage(s, 0, 1);
      const after = await allUsers(s);
      const diff = (field: string) => after.filter((u, i) => JSON.stringify(u[field]) !== JSON.stringify(before[i]?.[field])).length;
      expect(diff('fallback_time_zone')).toBeGreaterThan(0);
      expect(diff('connected_sources')).toBeGreaterThan(0);
    } finally {
      await s.close();
    }
  });
});

describe('control routes', () => {
  let s: StandIn;
  beforeAll(async () => {
    s = await startStandIn({ users: 50, seed: 6 });
  });
  afterAll(() => s.close());

  it('update a chosen user, by default its time zone, and the next list shows it', async () => {
    const [target] = await allUsers(s);
    const id = String(target?.user_id);
    const updated = await control(s, `/users/${id}/update`);
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ action: 'updated', change: 'fallback_time_zone', user: { user_id: id } });
    const listed = (await allUsers(s))[0];
    expect(listed).toEqual((updated.body as { user: User }).user);
    expect(listed?.fallback_time_zone).not.toEqual(target?.fallback_time_zone);
    expect(listed?.connected_sources).toEqual(target?.connected_sources);
  });

  it('update connected sources on request', async () => {
    const target = (await allUsers(s))[1];
    const id = String(target?.user_id);
    const answer = await control(s, `/users/${id}/update`, { change: 'connected_sources' });
    expect(answer.status).toBe(200);
    const listed = (await allUsers(s))[1];
    expect(listed?.connected_sources).not.toEqual(target?.connected_sources);
    expect(listed?.fallback_time_zone).toEqual(target?.fallback_time_zone);
    expect(UserSchema.safeParse(listed).success).toBe(true);
  });

  it('delete and restore a chosen user, and add new ones at the end', async () => {
    const before = await allUsers(s);
    const id = String(before[2]?.user_id);
    expect((await control(s, `/users/${id}/delete`)).status).toBe(200);
    let listed = await getPage(s, 0, 500);
    expect(listed.total).toBe(before.length - 1);
    expect(listed.users.map((u) => u.user_id)).not.toContain(id);
    const resolved = await call(`${s.baseUrl}/v2/user/resolve/${encodeURIComponent(String(before[2]?.client_user_id))}`, {
      headers: teamHeaders(s),
    });
    expect(resolved.status).toBe(404);

    const restored = await control(s, `/users/${id}/restore`);
    expect(restored.status).toBe(200);
    expect(restored.body).toMatchObject({ action: 'restored', user: before[2] });
    expect(await allUsers(s)).toEqual(before);

    const added = await control(s, '/users');
    expect(added.status).toBe(201);
    const more = await control(s, '/users', { count: 2 });
    const newIds = [...(added.body as { users: User[] }).users, ...(more.body as { users: User[] }).users].map((u) => u.user_id);
    expect(newIds).toHaveLength(3);
    listed = await getPage(s, 0, 500);
    expect(listed.total).toBe(before.length + 3);
    expect(listed.users.slice(-3).map((u) => u.user_id)).toEqual(newIds);
  });

  it('answer JSON errors naming the problem: 400, 404, 405, 409', async () => {
    const id = String((await allUsers(s))[3]?.user_id);
    const cases: Array<[string, unknown, number, RegExp]> = [
      [`/users/${id}/update`, { change: 'name' }, 400, /body\.change/],
      [`/users/${id}/update`, { chnage: 'connected_sources' }, 400, /chnage/],
      [`/users/${id}/update`, '{not json', 400, /not JSON/],
      [`/users/${id}/delete`, { change: 'connected_sources' }, 400, /only update takes a change/],
      ['/users', { count: 0 }, 400, /body\.count/],
      ['/users/00000000-0000-4000-8000-000000000000/update', undefined, 404, /no user with user_id/],
      [`/users/${id}/rename`, undefined, 404, /no control route/],
      [`/users/${id}/restore`, undefined, 409, /not deleted/],
    ];
    for (const [path, body, status, detail] of cases) {
      const answer = await control(s, path, body);
      expect(answer.status, path).toBe(status);
      expect((answer.body as { detail: string }).detail, path).toMatch(detail);
    }
    await control(s, `/users/${id}/delete`);
    expect((await control(s, `/users/${id}/update`)).status).toBe(409);
    expect((await control(s, `/users/${id}/delete`)).status).toBe(409);
    await control(s, `/users/${id}/restore`);
    const get = await call(`${s.baseUrl}/_stand-in/users/${id}/update`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
  });

  it('need no key, and are never faulted nor churn the directory', async () => {
    s.faults.failNext({ status: 503 });
    s.faults.set({ rate503: 1, churnAddPerPage: 5 });
    try {
      const size = s.directory.size;
      expect((await control(s, '/users')).status).toBe(201);
      expect(s.directory.size).toBe(size + 1);
      expect(s.faults.pending()).toBe(1);
      expect(s.counts.get('control', 201)).toBeGreaterThan(0);
    } finally {
      s.faults.clear();
    }
  });

  it('answer only to loopback peers', () => {
    for (const peer of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1']) expect(isLoopback(peer), peer).toBe(true);
    for (const peer of ['10.0.0.2', '::ffff:192.168.1.4', 'fe80::1', undefined]) expect(isLoopback(peer), String(peer)).toBe(false);
  });
});

describe('keys', () => {
  it('are the same on every start with a seed, and differ for another seed', async () => {
    const keysOf = async (seed: number) => {
      const s = await startStandIn({ users: 1, seed });
      await s.close();
      return { apiKey: s.apiKey, managementKey: s.managementKey, origins: s.keyOrigins };
    };
    const first = await keysOf(1);
    expect(await keysOf(1)).toEqual(first);
    expect(first.apiKey).toMatch(/^sk_[0-9a-f]{32}$/);
    expect(first.managementKey).toMatch(/^mg_[0-9a-f]{32}$/);
    expect(first.origins).toEqual({ apiKey: 'seed', managementKey: 'seed' });
    const other = await keysOf(2);
    expect(other.apiKey).not.toBe(first.apiKey);
    expect(other.managementKey).not.toBe(first.managementKey);
  });

  it('given keys win, and are reported as given', async () => {
    const s = await startStandIn({ users: 1, seed: 1, apiKey: 'sk_given' });
    await s.close();
    expect(s.apiKey).toBe('sk_given');
    expect(s.managementKey).toBe(derivedKey('managementKey', 1));
    expect(s.keyOrigins).toEqual({ apiKey: 'given', managementKey: 'seed' });
  });
});

describe('dates', () => {
  it('reach within the last month of today, and none lies after today 00:00 UTC', async () => {
    const s = await startStandIn({ users: 1000, seed: 1 });
    try {
      const today = startOfUtcDay(Date.now());
      expect(s.directory.today).toBe(today);
      const users = [...(await getPage(s, 0, 500)).users, ...(await getPage(s, 500, 500)).users];
      const created = users.map((u) => Date.parse(String(u.created_on)));
      expect(created.filter((ms) => ms >= today - 30 * DAY_MS).length).toBeGreaterThan(0);
      expect(Math.min(...created)).toBeGreaterThanOrEqual(today - 5 * 366 * DAY_MS);
      const times = users.flatMap((u) => [
        String(u.created_on),
        ...(u.connected_sources as User[]).map((c) => String(c.created_on)),
        ...[u.fallback_time_zone, u.fallback_birth_date].flatMap((f) =>
          f !== null && typeof f === 'object' ? [String((f as User).updated_at)] : [],
        ),
      ]);
      expect(times.filter((t) => !(Date.parse(t) < today))).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it('are a pure function of (seed, user, day): --today reproduces another day', async () => {
    const on = async (today: Date) => {
      const s = await startStandIn({ users: 20, seed: 3, today });
      await s.close();
      return [...s.directory.records()];
    };
    const day = await on(new Date('2025-06-01T00:00:00Z'));
    expect(await on(new Date('2025-06-01T23:59:59Z'))).toEqual(day);
    const next = await on(new Date('2025-06-02T00:00:00Z'));
    expect(next.map((u) => u.user_id)).toEqual(day.map((u) => u.user_id));
    expect(next).not.toEqual(day);
    for (const u of day) expect(Date.parse(String(u.created_on))).toBeLessThan(Date.UTC(2025, 5, 1));
  });
});

describe('docs/stand-in.md', () => {
  const doc = readFileSync(join(import.meta.dirname, '..', 'docs/stand-in.md'), 'utf8');
  const block = /## Changing users at run time[\s\S]*?```sh\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';

  it('names the keys --seed 1 derives and the first user of seed 1', async () => {
    expect(doc).toContain(derivedKey('apiKey', 1));
    expect(doc).toContain(derivedKey('managementKey', 1));
    const s = await startStandIn({ users: 1, seed: 1 });
    await s.close();
    expect(block).toContain(String([...s.directory.records()][0]?.user_id));
  });

  it('curl commands run as written against a stand-in with --seed 1 (on a free port instead of 8787)', async () => {
    const s = await startStandIn({ users: 1000, seed: 1 });
    try {
      const lines = block.split('\n').filter((l) => l.startsWith('curl '));
      expect(lines.length).toBeGreaterThanOrEqual(7);
      for (const line of lines) {
        const command = `${line.replaceAll('127.0.0.1:8787', `127.0.0.1:${s.port}`)} --fail-with-body`;
        // The stand-in serves from this process's event loop, so the shell must not block it (no spawnSync).
        const out = await runShell(command);
        expect(out.code, `${line}\n${out.stdout}${out.stderr}`).toBe(0);
        expect(() => JSON.parse(out.stdout) as unknown, line).not.toThrow();
      }
      expect(s.directory.size).toBe(1003);
    } finally {
      await s.close();
    }
  });
});

function runShell(command: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('sh', ['-c', command]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
