/**
 * Strict about identity, tolerant about everything else: a record with a
 * valid user_id, team_id and client_user_id is always mirrored; fields that
 * break their rule become NULL columns and field_warnings rows, the raw
 * record stays as received.
 */
import { describe, expect, it } from 'vitest';
import { parseUser } from '../src/service/user-record.js';
import { parseUserRecord } from '../src/service/user-record.js';
import { decodePage } from '../src/sync/page-decode.js';
import { UserSchema } from '../src/service/schemas.js';
import { ServiceClient } from '../src/service/client.js';
import { ResponseValidationError } from '../src/service/errors.js';
import type { Db } from '../db/open.js';
import { RunWriter } from '../src/sync/run-writer.js';
import { MirrorReader } from '../db/mirror-reader.js';
import { recordingServer } from './support/canned-server.js';
import { pageOf, staged, userId, useTempMirror, wireUser, type TempMirror, type WireRecord } from './support/mirror-fixtures.js';

/**
 * Shaped like the user the official Node SDK's own wire tests list: valid
 * identity and descriptors, but placeholder strings where the ingestion
 * dates belong.
 */
function sdkWireFixtureUser(): WireRecord {
  const stamp = '2026-01-28T12:53:04Z';
  return {
    user_id: '3f2a9c1e-7b4d-4e8a-9c21-5d6e7f809a1b',
    team_id: '8c7b6a59-4d3e-4f21-8a9b-0c1d2e3f4a5b',
    client_user_id: 'c2RrLXdpcmUtZml4dHVyZQ',
    created_on: stamp,
    connected_sources: [
      {
        provider: { name: 'Oura', slug: 'oura', logo: 'https://logos.example/oura.png' },
        created_on: stamp,
        source: { name: 'Oura', slug: 'oura', logo: 'logo_url' },
      },
    ],
    fallback_time_zone: { id: 'Europe/London', source_slug: 'manual', updated_at: stamp },
    fallback_birth_date: { value: '1989-09-12', source_slug: 'manual', updated_at: stamp },
    ingestion_start: 'ingestion_start',
    ingestion_end: 'ingestion_end',
  };
}

function parsed(record: unknown) {
  const r = parseUser(record);
  if (!r.ok) throw new Error(`expected a user: ${r.issues}`);
  return r;
}

const fields = (record: unknown) => parsed(record).warnings.map((w) => w.field);

describe('parseUser', () => {
  it('keeps the SDK wire-fixture user, dropping the placeholder dates with a warning each', () => {
    const r = parsed(sdkWireFixtureUser());
    expect(r.user.ingestion_start).toBeUndefined();
    expect(r.user.ingestion_end).toBeUndefined();
    expect(r.user.fallback_time_zone?.id).toBe('Europe/London');
    expect(r.user.connected_sources).toHaveLength(1);
    expect(r.warnings).toEqual([
      { field: 'ingestion_start', problem: 'must be a date YYYY-MM-DD', rule: 'bad_format' },
      { field: 'ingestion_end', problem: 'must be a date YYYY-MM-DD', rule: 'bad_format' },
    ]);
  });

  it('accepts offset-less date-times (read as UTC) alongside both documented forms, without warnings', () => {
    const r = parsed(
      wireUser(1, {
        created_on: '2022-08-04T12:42:45',
        connected_sources: [
          { created_on: '2022-08-04T12:42:45.596792+00:00', provider: { slug: 'oura', name: 'Oura' } },
          { created_on: '2026-01-12T12:39:40Z', provider: { slug: 'garmin', name: 'Garmin' } },
        ],
      }),
    );
    expect(r.warnings).toEqual([]);
    expect(r.user.created_on).toBe('2022-08-04T12:42:45');
  });

  it.each<[string, WireRecord, string[]]>([
    ['a placeholder date-time', { created_on: 'created_on' }, ['created_on']],
    ['a number for a date', { ingestion_end: 20220101 }, ['ingestion_end']],
    ['a string for an object', { fallback_time_zone: 'Europe/London' }, ['fallback_time_zone']],
    ['an empty time zone id', { fallback_time_zone: { id: '', source_slug: 'manual' } }, ['fallback_time_zone.id']],
    ['a time zone without id', { fallback_time_zone: { source_slug: 'manual' } }, ['fallback_time_zone.id']],
    ['a bad birth date', { fallback_birth_date: { value: '12/09/1989' } }, ['fallback_birth_date.value']],
    ['a bad updated_at inside the time zone', { fallback_time_zone: { id: 'UTC', updated_at: 'soon' } }, ['fallback_time_zone.updated_at']],
    ['connected_sources not an array', { connected_sources: { oura: true } }, ['connected_sources']],
    ['connected_sources absent', { connected_sources: undefined }, ['connected_sources']],
  ])('drops %s', (_, overrides, expected) => {
    const record = wireUser(1, overrides);
    const r = parsed(record);
    expect(r.warnings.map((w) => w.field)).toEqual(expected);
    expect(r.warnings.every((w) => w.problem.length > 0 && !w.problem.includes('[object'))).toBe(true);
    // What is left always satisfies the whole schema: the User type holds.
    expect(UserSchema.safeParse(r.user).success).toBe(true);
  });

  it('drops only the connected sources, descriptors and fields that break their rule', () => {
    const oura = { slug: 'oura', name: 'Oura' };
    const r = parsed(
      wireUser(1, {
        connected_sources: [
          { created_on: 'yesterday', provider: oura },
          { created_on: '2026-01-12T12:39:40Z' },
          { provider: { slug: '', name: 'Whoop' }, source: { slug: 'whoop', name: 'Whoop' } },
          { provider: 'garmin' },
          42,
        ],
      }),
    );
    expect(r.user.connected_sources).toEqual([{ provider: oura }, { source: { slug: 'whoop', name: 'Whoop' } }]);
    expect(r.warnings.map((w) => w.field)).toEqual([
      'connected_sources[0].created_on',
      'connected_sources[1].provider',
      'connected_sources[2].provider.slug',
      'connected_sources[3].provider',
      'connected_sources[4]',
    ]);
    expect(r.warnings[1]?.problem).toMatch(/needs `provider` or `source`.*connected_sources\[1\] dropped/);
    expect(r.warnings[2]?.problem).toMatch(/non-empty.*connected_sources\[2\]\.provider dropped/);
  });

  it('keeps unknown fields of a tolerated record', () => {
    expect(parsed({ ...sdkWireFixtureUser(), brand_new: { x: 1 } }).user).toMatchObject({ brand_new: { x: 1 } });
  });

  it.each<[string, unknown, RegExp]>([
    ['a bad user_id', { ...sdkWireFixtureUser(), user_id: 'not-a-uuid' }, /users\[4\]\.user_id/],
    ['a bad team_id', { ...sdkWireFixtureUser(), team_id: 7 }, /users\[4\]\.team_id/],
    ['an empty client_user_id', { ...sdkWireFixtureUser(), client_user_id: '' }, /users\[4\]\.client_user_id/],
    ['not an object', 'user', /users\[4\]: .*expected object/],
    ['null', null, /users\[4\]: .*expected object/],
  ])('rejects a record with %s', (_, raw, reason) => {
    const r = parseUserRecord(raw, 4);
    expect(r).toMatchObject({ ok: false, index: 4, raw });
    expect(!r.ok && r.reason).toMatch(reason);
  });

  it('reports warnings through parseUserRecord', () => {
    expect(parseUserRecord(sdkWireFixtureUser(), 0)).toMatchObject({
      ok: true,
      index: 0,
      warnings: [{ field: 'ingestion_start' }, { field: 'ingestion_end' }],
    });
    expect(fields(wireUser(1))).toEqual([]);
  });
});

describe('the client', () => {
  it('lists a page with the SDK wire-fixture user accepted and reports unknown envelope keys', async () => {
    const srv = await recordingServer(() => ({
      status: 200,
      body: JSON.stringify({
        users: [sdkWireFixtureUser(), { user_id: 'nope' }],
        total: 2,
        offset: 0,
        limit: 2,
        next_cursor: 'abc',
        links: {},
      }),
    }));
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    try {
      const page = await c.listUserRecords({ offset: 0, limit: 2 });
      expect(page.unknownKeys).toEqual(['next_cursor', 'links']);
      const decoded = decodePage(page, 0, () => 'write');
      expect(decoded.rejected.map((r) => r.index)).toEqual([1]);
      expect(decoded.writes).toHaveLength(1);
      expect(decoded.writes[0]?.record.warnings).toMatchObject([{ field: 'ingestion_start' }, { field: 'ingestion_end' }]);
      expect(JSON.parse(decoded.writes[0]?.record.rawJson ?? 'null')).toEqual(sdkWireFixtureUser());
    } finally {
      await c.close();
      srv.server.close();
    }
  });

  it('resolves a tolerated user with the body as received and its warnings; an identity failure is still an error', async () => {
    const body = JSON.stringify(sdkWireFixtureUser());
    const srv = await recordingServer((path) =>
      path.endsWith('/bad') ? { status: 200, body: JSON.stringify({ ...sdkWireFixtureUser(), team_id: 'x' }) } : { status: 200, body },
    );
    const c = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
    try {
      const r = await c.resolveUser('c2RrLXdpcmUtZml4dHVyZQ');
      if (!r.found) throw new Error('expected found');
      expect(r.rawJson).toBe(body);
      expect(r.user.ingestion_start).toBeUndefined();
      expect(r.warnings.map((w) => w.field)).toEqual(['ingestion_start', 'ingestion_end']);
      const err = await c.resolveUser('bad').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ResponseValidationError);
      expect((err as Error).message).toMatch(/team_id/);
    } finally {
      await c.close();
      srv.server.close();
    }
  });
});

describe('the mirror', () => {
  let db: Db;
  let writer: RunWriter;
  let refresh: TempMirror['refresh'];

  useTempMirror((m) => {
    ({ db, writer, refresh } = m);
  });

  const row = (id: string) =>
    db.prepare('SELECT ingestion_start, ingestion_end, fallback_time_zone_id, created_on, raw FROM users WHERE user_id = ?').get(id);
  const warnings = (id: string) =>
    db.prepare('SELECT field, problem, run_id FROM field_warnings WHERE user_id = ? ORDER BY field').all(id) as Array<{
      field: string;
      problem: string;
      run_id: number | null;
    }>;
  const sources = (id: string) => db.prepare('SELECT slug FROM connected_sources WHERE user_id = ?').pluck().all(id);

  function syncOnce(records: WireRecord[]): number {
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(records.map(staged)), 0);
    writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
    writer.finishRun(runId, { status: 'succeeded', pages: 1, usersSeen: records.length });
    return runId;
  }

  it('mirrors the SDK wire-fixture user through a sync: NULL columns, raw intact, warnings stored', () => {
    const record = sdkWireFixtureUser();
    const runId = syncOnce([record, wireUser(1)]);
    const id = String(record.user_id);
    expect(row(id)).toEqual({
      ingestion_start: null,
      ingestion_end: null,
      fallback_time_zone_id: 'Europe/London',
      created_on: '2026-01-28T12:53:04.000Z',
      raw: JSON.stringify(record),
    });
    expect(sources(id)).toEqual(['oura']);
    expect(warnings(id)).toEqual([
      { field: 'ingestion_end', problem: 'must be a date YYYY-MM-DD', run_id: runId },
      { field: 'ingestion_start', problem: 'must be a date YYYY-MM-DD', run_id: runId },
    ]);
    expect(warnings(userId(1))).toEqual([]);
    expect(db.prepare('SELECT count(*) FROM rejected_records').pluck().get()).toBe(0);
    expect(new MirrorReader(db).fieldWarningStats()).toEqual({
      users: 1,
      byField: [
        { field: 'ingestion_end', users: 1 },
        { field: 'ingestion_start', users: 1 },
      ],
    });
  });

  it('replaces a user’s warnings whenever its row is written, and only then', () => {
    const bad = wireUser(1, { created_on: 'soon', connected_sources: [{ created_on: '2026-01-12T12:39:40Z' }] });
    syncOnce([bad, wireUser(2)]);
    expect(warnings(userId(1)).map((w) => w.field)).toEqual(['connected_sources[0].provider', 'created_on']);
    expect(sources(userId(1))).toEqual([]);
    // Listed unchanged: nothing is written, the warnings stay.
    syncOnce([bad, wireUser(2)]);
    expect(warnings(userId(1))).toHaveLength(2);
    const fixed = wireUser(1, { created_on: 'soon' });
    syncOnce([fixed, wireUser(2)]);
    expect(warnings(userId(1)).map((w) => w.field)).toEqual(['created_on']);
    syncOnce([wireUser(1), wireUser(2)]);
    expect(warnings(userId(1))).toEqual([]);
  });

  it('stores the record and its warnings through refreshUser (online resolve)', () => {
    const record = sdkWireFixtureUser();
    const id = String(record.user_id);
    expect(refresh(staged(record)).change).toBe('created');
    expect(row(id)).toMatchObject({ ingestion_start: null, ingestion_end: null, raw: JSON.stringify(record) });
    expect(warnings(id).map((w) => [w.field, w.run_id])).toEqual([
      ['ingestion_end', null],
      ['ingestion_start', null],
    ]);
    const fixed = { ...record, ingestion_start: '2024-01-01', ingestion_end: null };
    expect(refresh(staged(fixed)).change).toBe('updated');
    expect(row(id)).toMatchObject({ ingestion_start: '2024-01-01', ingestion_end: null });
    expect(warnings(id)).toEqual([]);
  });

  it('stores offset-less date-times as UTC', () => {
    syncOnce([wireUser(1, { created_on: '2022-08-04T12:42:45' })]);
    expect(row(userId(1))).toMatchObject({ created_on: '2022-08-04T12:42:45.000Z' });
    expect(warnings(userId(1))).toEqual([]);
  });
});
