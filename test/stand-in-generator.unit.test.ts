import { describe, expect, it } from 'vitest';
import { UserSchema } from '../src/service/schemas.js';
import { Directory } from '../src/stand-in/directory.js';
import { SparseDeletions } from '../src/stand-in/sparse-deletions.js';
import { generateUser, generateUserJson, userKeys } from '../src/stand-in/user-generator.js';
import { pathUuid, queryInt } from '../src/service/server-wire.js';
import { isoDate, isoMicros, isoSeconds } from '../src/stand-in/catalog.js';
import { connectedSourcesOf, legacyShapes } from './support/legacy-shapes.js';

const MICROS_FORM = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/;
const SECONDS_FORM = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;

type Json = Record<string, unknown>;

function users(seed: number, count: number, legacyRecords = 0): Json[] {
  const keys = userKeys(seed, legacyRecords);
  return Array.from({ length: count }, (_, i) => generateUser(keys, i));
}

describe('generated users', () => {
  it('are a pure function of (seed, index)', () => {
    expect(users(1, 50)).toEqual(users(1, 50));
    const other = users(2, 50);
    users(1, 50).forEach((u, i) => expect(u.user_id).not.toBe(other[i]?.user_id));
  });

  it('all parse with the client wire schema, and ids are unique', () => {
    const all = users(1, 5000);
    const failures = all.map((u) => UserSchema.safeParse(u)).filter((r) => !r.success);
    expect(failures).toEqual([]);
    expect(new Set(all.map((u) => u.user_id)).size).toBe(5000);
    expect(new Set(all.map((u) => u.client_user_id)).size).toBe(5000);
    expect(new Set(all.map((u) => u.team_id)).size).toBe(1);
  });

  it('collectively show every shape the live service sends today', () => {
    const all = users(1, 5000);
    const sources = all.flatMap(connectedSourcesOf);
    const dateTimes = [...all.map((u) => u.created_on), ...sources.map((s) => s.created_on)].filter((d) => typeof d === 'string');
    const count = (pred: (u: Record<string, unknown>) => boolean) => all.filter(pred).length;

    expect(sources.length).toBeGreaterThan(5000);
    expect(sources.every((s) => s.provider !== undefined && s.source !== undefined)).toBe(true);
    expect(sources.some((s) => s.provider?.logo !== s.source?.logo)).toBe(true);
    expect(count((u) => (u.connected_sources as unknown[]).length === 0)).toBeGreaterThan(0);
    expect(count((u) => (u.connected_sources as unknown[]).length === 4)).toBeGreaterThan(0);
    expect(dateTimes.some((d) => MICROS_FORM.test(String(d)))).toBe(true);
    expect(dateTimes.some((d) => SECONDS_FORM.test(String(d)))).toBe(true);
    expect(count((u) => u.fallback_time_zone === null)).toBeGreaterThan(0);
    expect(count((u) => typeof u.fallback_time_zone === 'object' && u.fallback_time_zone !== null)).toBeGreaterThan(0);
    for (const field of ['fallback_birth_date', 'ingestion_start', 'ingestion_end']) {
      expect(
        count((u) => u[field] === null),
        `${field} null`,
      ).toBeGreaterThan(0);
      expect(
        count((u) => !(field in u)),
        `${field} absent`,
      ).toBeGreaterThan(0);
      expect(
        count((u) => u[field] !== null && u[field] !== undefined),
        `${field} set`,
      ).toBeGreaterThan(0);
    }
    expect(count((u) => encodeURIComponent(String(u.client_user_id)) !== u.client_user_id)).toBeGreaterThan(0);
  });

  it('by default never show a legacy shape: created_on, provider, source and fallback_time_zone always there', () => {
    const all = users(1, 5000);
    expect(all.filter((u) => legacyShapes(u).length > 0)).toEqual([]);
    for (const s of all.flatMap(connectedSourcesOf)) expect(Object.keys(s).sort()).toEqual(['created_on', 'provider', 'source']);
  });

  it('with a legacy share, show every legacy shape in about that share of users', () => {
    const all = users(1, 5000, 0.3);
    const shown = all.map(legacyShapes);
    const legacy = shown.filter((names) => names.length > 0).length;
    expect(legacy / all.length).toBeGreaterThan(0.27);
    expect(legacy / all.length).toBeLessThan(0.33);
    const names = new Set(shown.flat());
    expect([...names].sort()).toEqual([
      'bare connected source',
      'empty slug',
      'no created_on',
      'no fallback_time_zone',
      'offset-less created_on',
      'placeholder ingestion',
      'source-only',
    ]);
    // The rest are exactly the default records: the share picks users, it does not reshuffle them.
    const today = users(1, 5000);
    shown.forEach((names, i) => {
      if (names.length === 0) expect(all[i]).toEqual(today[i]);
    });
    expect(users(1, 300, 0.3)).toEqual(all.slice(0, 300));
  });

  it('reject a legacy share outside 0..1', () => {
    expect(() => userKeys(1, 1.5)).toThrow(/legacyRecords/);
    expect(() => userKeys(1, Number.NaN)).toThrow(/legacyRecords/);
    expect(users(1, 50, 1).every((u) => legacyShapes(u).length > 0)).toBe(true);
  });

  it('are served as the same JSON as the object form', () => {
    for (const keys of [userKeys(3), userKeys(3, 0.5)]) {
      for (let i = 0; i < 200; i++) expect(JSON.parse(generateUserJson(keys, i))).toEqual(generateUser(keys, i));
    }
  });
});

describe('wire dates', () => {
  it('match Date#toISOString in both spellings', () => {
    for (let ms = Date.UTC(1940, 0, 1); ms < Date.UTC(2100, 0, 1); ms += 7_777_777_777) {
      const iso = new Date(ms).toISOString();
      expect(isoSeconds(ms)).toBe(`${iso.slice(0, 19)}Z`);
      expect(isoMicros(ms, 42)).toBe(`${iso.slice(0, 23)}042+00:00`);
      expect(isoDate(ms)).toBe(iso.slice(0, 10));
    }
  });
});

describe('SparseDeletions', () => {
  it('finds the k-th live index and iterates live indexes', () => {
    const d = new SparseDeletions();
    for (const i of [0, 3, 4, 9]) d.add(i);
    const live = [1, 2, 5, 6, 7, 8, 10, 11];
    live.forEach((index, position) => expect(d.indexAt(position)).toBe(index));
    expect([...d.liveFrom(2, 12)]).toEqual(live.slice(2));
    expect(d.add(3)).toBe(false);
    expect(d.size).toBe(4);
  });
});

describe('Directory', () => {
  it('pages by position over live users, and deletions shift later users back', () => {
    const dir = new Directory({ seed: 1, users: 10 });
    const ids = [...dir.records()].map((u) => u.user_id);
    expect(dir.page(3, 2).map((u) => u.user_id)).toEqual(ids.slice(3, 5));
    expect(dir.delete([ids[1] as string, 0])).toBe(2);
    expect(dir.size).toBe(8);
    expect(dir.page(1, 2).map((u) => u.user_id)).toEqual(ids.slice(3, 5));
    expect(dir.get(ids[1] as string)).toBeUndefined();
    expect(dir.delete([ids[1] as string])).toBe(0);
    expect([...dir.userIds()]).toEqual([...dir.records()].map((u) => u.user_id));
  });

  it('appends, updates visibly and looks users up by id and client id', () => {
    const dir = new Directory({ seed: 5, users: 3 });
    const [added] = dir.add(1);
    expect(dir.size).toBe(4);
    const user = dir.get(added as string);
    expect(user?.user_id).toBe(added);
    expect(dir.byClientUserId(String(user?.client_user_id))).toEqual(user);
    const updated = dir.update(added as string);
    expect(updated).not.toEqual(user);
    expect(dir.get(added as string)).toEqual(updated);
    expect(dir.update(added as string)).not.toEqual(updated);
    expect(UserSchema.safeParse(updated).success).toBe(true);
    expect(dir.get('00000000-0000-4000-8000-000000000000')).toBeUndefined();
    expect(dir.byClientUserId('cu_nope')).toBeUndefined();
  });

  it('updates connected sources visibly, adding and removing, version after version', () => {
    const dir = new Directory({ seed: 8, users: 40 });
    const counts = new Set<string>();
    for (let i = 0; i < 40; i++) {
      let previous = JSON.stringify(dir.get(String(dir.page(i, 1)[0]?.user_id)));
      let before = (dir.page(i, 1)[0]?.connected_sources as unknown[]).length;
      for (let v = 1; v <= 4; v++) {
        const updated = dir.update(i, 'connected_sources');
        expect(JSON.stringify(updated)).not.toBe(previous);
        expect(UserSchema.safeParse(updated).success).toBe(true);
        const now = (updated?.connected_sources as unknown[]).length;
        counts.add(now > before ? 'added' : now < before ? 'removed' : 'same');
        before = now;
        previous = JSON.stringify(updated);
      }
    }
    expect(counts).toEqual(new Set(['added', 'removed']));
  });

  it('connected-sources updates are cumulative, and connect or disconnect can be chosen', () => {
    const dir = new Directory({ seed: 8, users: 40 });
    const slugs = (u: unknown) =>
      ((u as { connected_sources: Array<{ provider: { slug: string } }> }).connected_sources ?? []).map((c) => c.provider.slug);
    const i = [...Array(40).keys()].find((n) => slugs(dir.page(n, 1)[0]).length === 1) ?? 0;
    const original = slugs(dir.page(i, 1)[0]);
    const first = slugs(dir.update(i, 'connected_sources', 'connect'));
    const second = slugs(dir.update(i, 'connected_sources', 'connect'));
    // The second connect applies to the record the first left: both new sources stay.
    expect(first).toHaveLength(original.length + 1);
    expect(second).toHaveLength(original.length + 2);
    expect(second.slice(0, first.length)).toEqual(first);
    const third = slugs(dir.update(i, 'connected_sources', 'disconnect'));
    expect(third).toHaveLength(second.length - 1);
    expect(slugs(dir.page(i, 1)[0])).toEqual(third);
    for (let n = 0; n < third.length; n++) dir.update(i, 'connected_sources', 'disconnect');
    expect(slugs(dir.page(i, 1)[0])).toEqual([]);
    expect(() => dir.update(i, 'connected_sources', 'disconnect')).toThrow(/no connected source to disconnect/);
  });

  it('serves file records first and as-is, then generated ones', () => {
    const odd = { user_id: 'not-a-uuid', client_user_id: 'a b', extra: [1, 2] };
    const dir = new Directory({ seed: 1, users: 2, fileRecords: [odd] });
    expect(dir.size).toBe(3);
    expect(dir.page(0, 1)).toEqual([odd]);
    expect(dir.byClientUserId('a b')).toEqual(odd);
    expect(JSON.parse(dir.pageJson(0, 3))).toHaveLength(3);
  });
});

describe('FastAPI-style validation', () => {
  it('parses ints laxly and reports bounds like Pydantic', () => {
    const q = (s: string) => queryInt(new URLSearchParams(s), 'limit', { default: 100, ge: 1, le: 500 });
    expect(q('')).toEqual({ ok: true, value: 100 });
    expect(q('limit=7&limit=9')).toEqual({ ok: true, value: 9 });
    expect(q('limit=5.0')).toEqual({ ok: true, value: 5 });
    expect(q('limit=abc')).toMatchObject({ ok: false, item: { type: 'int_parsing', loc: ['query', 'limit'], input: 'abc' } });
    expect(q('limit=0')).toMatchObject({ ok: false, item: { type: 'greater_than_equal', ctx: { ge: 1 } } });
  });

  it('accepts UUIDs in any case and the simple form, canonicalized', () => {
    expect(pathUuid('123E4567-E89B-12D3-A456-426614174000', 'org_id')).toEqual({ ok: true, value: '123e4567-e89b-12d3-a456-426614174000' });
    expect(pathUuid('123e4567e89b12d3a456426614174000', 'org_id')).toEqual({ ok: true, value: '123e4567-e89b-12d3-a456-426614174000' });
    expect(pathUuid('123', 'org_id')).toMatchObject({ ok: false, item: { type: 'uuid_parsing', loc: ['path', 'org_id'] } });
  });
});
