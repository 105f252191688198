import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { call, deleteMember, getPage, getTeam, teamHeaders } from './support/stand-in-http.js';
import { listingOrder } from '../src/stand-in/listing-order.js';

let s: StandIn;
beforeEach(async () => {
  s = await startStandIn({ users: 1000, seed: 11 });
});
afterEach(() => s.close());

describe('failNext', () => {
  it('fails exactly the next N matching requests, with the given Retry-After', async () => {
    s.faults.failNext({ method: 'GET', pathPrefix: '/v2/user', status: 429, retryAfter: 7, times: 2 });
    const [m] = s.members.list();
    expect((await deleteMember(s, m?.orgId ?? '', m?.memberId ?? '')).status).toBe(200);
    const first = await getTeam(s, '/v2/user?limit=1');
    expect(first.status).toBe(429);
    expect(first.headers.get('retry-after')).toBe('7');
    expect(first.body).toEqual({ detail: expect.any(String) });
    expect((await getTeam(s, '/v2/user?limit=1')).status).toBe(429);
    expect(s.faults.pending()).toBe(0);
    expect((await getTeam(s, '/v2/user?limit=1')).status).toBe(200);
  });

  it('supports HTTP-date Retry-After, custom bodies and plain-text 500s', async () => {
    const when = new Date(Date.now() + 3000).toUTCString();
    s.faults.failNext({ status: 503, retryAfter: when });
    s.faults.failNext({ status: 500 });
    s.faults.failNext({ status: 502, body: { detail: { error_type: 'upstream', error_message: 'bad gateway' } } });
    const unavailable = await getTeam(s, '/v2/user');
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers.get('retry-after')).toBe(when);
    const internal = await getTeam(s, '/v2/user');
    expect(internal.status).toBe(500);
    expect(internal.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(internal.text).toBe('Internal Server Error');
    const gateway = await getTeam(s, '/v2/user');
    expect(gateway).toMatchObject({ status: 502, body: { detail: { error_type: 'upstream' } } });
  });

  it('counts DELETE calls that got an injected failure, without removing the member', async () => {
    const [m] = s.members.list();
    const { orgId, memberId } = m ?? { orgId: '', memberId: '' };
    s.faults.failNext({ method: 'DELETE', status: 503 });
    expect((await deleteMember(s, orgId, memberId)).status).toBe(503);
    expect(s.members.has(orgId, memberId)).toBe(true);
    expect((await deleteMember(s, orgId, memberId)).status).toBe(200);
    expect(s.members.deleteCalls(orgId, memberId)).toBe(2);
    expect(s.members.effectiveDeletes(orgId, memberId)).toBe(1);
  });
});

describe('connection faults', () => {
  it('reset: the request is lost and fetch throws', async () => {
    s.faults.failNext({ fault: 'reset' });
    await expect(fetch(`${s.baseUrl}/v2/user`, { headers: teamHeaders(s) })).rejects.toThrow(TypeError);
    expect(s.requests.last()).toMatchObject({ status: 0, fault: 'reset' });
    expect((await getTeam(s, '/v2/user')).status).toBe(200);
  });

  it('truncate: headers arrive, reading the body throws', async () => {
    s.faults.failNext({ fault: 'truncate' });
    const res = await fetch(`${s.baseUrl}/v2/user`, { headers: teamHeaders(s) });
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
    expect(s.requests.last()).toMatchObject({ status: 200, fault: 'truncate' });
  });

  it('truncate on DELETE: the member is gone though the answer was lost; the retry gets 404', async () => {
    const [m] = s.members.list();
    const { orgId, memberId } = m ?? { orgId: '', memberId: '' };
    s.faults.failNext({ method: 'DELETE', fault: 'truncate' });
    const res = await fetch(`${s.managementUrl}/v1/org/${orgId}/member/${memberId}`, {
      method: 'DELETE',
      headers: { 'X-Management-Key': s.managementKey },
    });
    await expect(res.text()).rejects.toThrow();
    expect(s.members.has(orgId, memberId)).toBe(false);
    expect((await deleteMember(s, orgId, memberId)).status).toBe(404);
    expect(s.members.effectiveDeletes(orgId, memberId)).toBe(1);
  });

  it('slow bodies arrive intact, in delayed chunks', async () => {
    // fetch asks for compression: the ~40 KB page goes as ~5 KB of gzip, at least 6 chunks of 800 bytes.
    s.faults.set({ slowBodyRate: 1, slowChunkBytes: 800, slowChunkDelayMs: 20 });
    const started = Date.now();
    const page = await getPage(s, 0, 50);
    expect(page.users).toHaveLength(50);
    expect(Date.now() - started).toBeGreaterThanOrEqual(20 * 5);
    expect(s.requests.last()).toMatchObject({ status: 200, fault: 'slow' });
  });
});

describe('random faults', () => {
  async function statuses(seed: number): Promise<number[]> {
    const t = await startStandIn({ users: 10, seed, faults: { rate429: 0.2, rate503: 0.2, retryAfter: 2 } });
    try {
      const out: number[] = [];
      for (let i = 0; i < 40; i++) {
        const answer = await getTeam(t, '/v2/user?limit=1');
        if (answer.status !== 200) expect(answer.headers.get('retry-after')).toBe('2');
        out.push(answer.status);
      }
      return out;
    } finally {
      await t.close();
    }
  }

  it('are reproducible from the seed', async () => {
    const a = await statuses(5);
    expect(a).toEqual(await statuses(5));
    expect(a).not.toEqual(await statuses(6));
    expect(a).toContain(429);
    expect(a).toContain(503);
    expect(a).toContain(200);
  });

  it('add latency', async () => {
    s.faults.set({ latencyMs: 60, latencyMinMs: 10, latencyMaxMs: 20 });
    const started = Date.now();
    await getTeam(s, '/v2/user?limit=1');
    expect(Date.now() - started).toBeGreaterThanOrEqual(65);
  });

  it('apply only under the path prefix, and clear() stops them', async () => {
    s.faults.set({ rate500: 1, pathPrefix: '/v1/' });
    expect((await getTeam(s, '/v2/user')).status).toBe(200);
    const [m] = s.members.list();
    expect((await deleteMember(s, m?.orgId ?? '', m?.memberId ?? '')).status).toBe(500);
    s.faults.clear();
    expect((await deleteMember(s, m?.orgId ?? '', m?.memberId ?? '')).status).toBe(200);
  });

  it('reject impossible plans, naming the field', () => {
    expect(() => s.faults.set({ rate429: 0.7, rate500: 0.7 })).toThrow(/rate429/);
    expect(() => s.faults.set({ latencyMinMs: 50, latencyMaxMs: 10 })).toThrow(/latencyMaxMs/);
    expect(() => s.faults.failNext({ status: 500, times: 0 })).toThrow(RangeError);
  });

  it('do not touch unauthenticated requests', async () => {
    s.faults.failNext({ status: 503 });
    expect((await call(`${s.baseUrl}/v2/user`)).status).toBe(401);
    expect(s.faults.pending()).toBe(1);
  });
});

describe('churn during a scan', () => {
  it('shifts users across page boundaries, so a naive offset scan misses some', async () => {
    const before = new Set([...s.directory.records()].map((u) => String(u.user_id)));
    s.faults.set({ churnAddPerPage: 3, churnDeletePerPage: 8 });
    const seen = new Set<string>();
    const totals: number[] = [];
    for (let offset = 0; ; offset += 100) {
      const page = await getPage(s, offset, 100);
      totals.push(page.total);
      for (const u of page.users) seen.add(String(u.user_id));
      if (page.users.length < 100) break;
    }
    const after = new Set([...s.directory.records()].map((u) => String(u.user_id)));
    const missed = [...before].filter((id) => after.has(id) && !seen.has(id));
    expect(new Set(totals).size).toBeGreaterThan(1);
    expect(totals[1]).toBe((totals[0] ?? 0) + 3 - 8);
    expect(missed.length).toBeGreaterThan(0);
  });

  it('is reproducible from the seed', async () => {
    const run = async () => {
      const t = await startStandIn({ users: 300, seed: 2, faults: { churnAddPerPage: 2, churnDeletePerPage: 2 } });
      try {
        for (let offset = 0; offset < 300; offset += 100) await getPage(t, offset, 100);
        return [...t.directory.records()].map((u) => u.user_id);
      } finally {
        await t.close();
      }
    };
    expect(await run()).toEqual(await run());
  });
});

describe('listing faults', () => {
  const ids = async (offset: number) => (await getPage(s, offset, 250)).users.map((u) => String(u.user_id));
  const wholeListing = async () => (await Promise.all([0, 250, 500, 750].map(ids))).flat();

  it("a repeated page: the page at offset N carries offset M's users, its envelope still saying N; every time, or K times", async () => {
    const own = await ids(250);
    const first = await ids(0);
    s.faults.set({ repeatPageAt: 250, repeatPageOf: 0 });
    const page = await getPage(s, 250, 250);
    expect(page).toMatchObject({ offset: 250, total: 1000 });
    expect(page.users.map((u) => String(u.user_id))).toEqual(first);
    expect(await ids(250)).toEqual(first);
    expect(await ids(500)).not.toEqual(first);
    s.faults.set({ repeatPageTimes: 1 });
    expect(await ids(250)).toEqual(first);
    expect(await ids(250)).toEqual(own);
    s.faults.clear();
    expect(await ids(250)).toEqual(own);
  });

  it('an order that changes: each order lists every user once; rate 1 draws a new one per request, kept when the rate drops', async () => {
    const plain = await wholeListing();
    s.faults.set({ reorderRate: 1 });
    const a = await ids(0);
    const b = await ids(0);
    expect(a).not.toEqual(b);
    expect(a).not.toEqual(plain.slice(0, 250));
    // The last order drawn stays: read whole in it, the listing holds every user exactly once.
    s.faults.set({ reorderRate: 0 });
    const kept = await wholeListing();
    expect(kept).not.toEqual(plain);
    expect(new Set(kept).size).toBe(1000);
    expect([...kept].sort()).toEqual([...plain].sort());
    expect(await ids(0)).toEqual(kept.slice(0, 250));
    s.faults.clear();
    expect(await wholeListing()).toEqual(plain);
  });

  it('an order is a permutation of the positions, whatever the size', () => {
    for (const n of [1, 2, 7, 500, 1024, 99_991]) {
      const order = listingOrder(n, 12345);
      const seen = new Set(Array.from({ length: n }, (_, p) => order(p)));
      expect(seen.size).toBe(n);
      expect(Math.min(...seen)).toBe(0);
      expect(Math.max(...seen)).toBe(n - 1);
    }
    const big = listingOrder(100_000_000, 7);
    expect(big(99_999_999)).toBeGreaterThanOrEqual(0);
    expect(big(99_999_999)).toBeLessThan(100_000_000);
  });
});
