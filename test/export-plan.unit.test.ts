/**
 * The export's pure decisions (src/export/plan.ts, tables.ts,
 * scheduled.ts): which rows each file holds for a full, incremental or
 * as-of export, what is refused, the manifest, rotation, how a mirror row
 * becomes typed cells, and the schedule's verdict.
 */
import { describe, expect, it } from 'vitest';
import type { SnapshotFacts } from '../db/export-reader.js';
import {
  buildManifest,
  ExportRefused,
  exportFolderName,
  foldersToRotate,
  ManifestSchema,
  newestExport,
  parseManifest,
  planExport,
  toInstant,
  type Manifest,
} from '../src/export/plan.js';
import { changeRecord, day, instant, sourceRecord, userRecord, versionRecord } from '../src/export/tables.js';
import { exportVerdict, recordOf } from '../src/export/scheduled.js';
import { exportShape, NO_POLICY } from '../src/export/policy.js';
import { compileFieldPolicy } from '../src/sinks/field-policy.js';

const facts: SnapshotFacts = {
  schemaVersion: 13,
  epoch: 'a1b2c3d4',
  cursor: 120,
  at: '2026-11-20T10:00:00.000Z',
  runId: 9,
  historySince: '2026-10-01T00:00:00.000Z',
  gaps: [{ from: '2026-11-01T00:00:00.000Z', to: '2026-11-02T00:00:00.000Z', restoredAt: '2026-11-01T12:00:00.000Z' }],
};
const ALL = ['users', 'versions', 'sources', 'changes'] as const;

function manifestAt(cursor: number, at: string | null, epoch: string | null = 'a1b2c3d4'): Manifest {
  const plan = planExport({ tables: ALL, format: 'parquet' }, facts);
  return buildManifest(plan, { ...facts, cursor, at, epoch }, [], '2026-11-19T00:00:00.000Z');
}

describe('planExport', () => {
  it('a full export reads every row of each table asked for, in the tables’ order', () => {
    const plan = planExport({ tables: ['changes', 'users'], format: 'ndjson' }, facts);
    expect(plan.kind).toBe('full');
    expect(plan.files).toEqual([
      { table: 'users', file: 'users.ndjson', source: { table: 'users', rows: 'current' } },
      { table: 'changes', file: 'changes.ndjson', source: { table: 'changes', afterCursor: 0 } },
    ]);
  });

  it('an incremental export continues from the manifest’s cursor and time', () => {
    const plan = planExport({ tables: ALL, format: 'parquet', since: manifestAt(80, '2026-11-19T10:00:00.000Z') }, facts);
    expect(plan.kind).toBe('incremental');
    expect(plan.since).toEqual({ cursor: 80, at: '2026-11-19T10:00:00.000Z' });
    expect(plan.files.map((f) => f.source)).toEqual([
      { table: 'users', rows: 'touched', afterCursor: 80 },
      { table: 'versions', window: { kind: 'since', after: '2026-11-19T10:00:00.000Z' } },
      { table: 'sources', window: { kind: 'since', after: '2026-11-19T10:00:00.000Z' } },
      { table: 'changes', afterCursor: 80 },
    ]);
  });

  it('refuses to continue from another feed, or from one ahead of the mirror', () => {
    expect(() => planExport({ tables: ALL, format: 'parquet', since: manifestAt(80, null, 'ffffffff') }, facts)).toThrow(/epoch ffffffff/);
    expect(() => planExport({ tables: ALL, format: 'parquet', since: manifestAt(500, null) }, facts)).toThrow(/reached cursor 500/);
  });

  it('an as-of export reads history at the time, and refuses it before history, in a gap, or with --incremental', () => {
    const at = '2026-11-10T00:00:00.000Z';
    const plan = planExport({ tables: ALL, format: 'parquet', asOf: at }, facts);
    expect(plan.files.map((f) => f.source)).toEqual([
      { table: 'users', rows: 'as-of', at },
      { table: 'versions', window: { kind: 'as-of', at } },
      { table: 'sources', window: { kind: 'as-of', at } },
      { table: 'changes', afterCursor: 0, at },
    ]);
    expect(() => planExport({ tables: ALL, format: 'parquet', asOf: '2026-09-01T00:00:00.000Z' }, facts)).toThrow(
      /before the mirror's history/,
    );
    expect(() => planExport({ tables: ALL, format: 'parquet', asOf: '2026-11-01T06:00:00.000Z' }, facts)).toThrow(
      /restore left history blank/,
    );
    expect(() => planExport({ tables: ALL, format: 'parquet', asOf: at, since: manifestAt(1, null) }, facts)).toThrow(ExportRefused);
    expect(() => planExport({ tables: [], format: 'parquet' }, facts)).toThrow(/no table/);
  });

  it('reads an as-of time as a date or a date-time with an offset, in UTC milliseconds', () => {
    expect(toInstant('2026-06-01')).toBe('2026-06-01T00:00:00.000Z');
    expect(toInstant('2026-06-01T12:00:00+02:00')).toBe('2026-06-01T10:00:00.000Z');
    expect(() => toInstant('yesterday')).toThrow(/not a date/);
    expect(() => toInstant('2026-06-01T12:00:00')).toThrow(/offset/);
  });
});

describe('the manifest', () => {
  it('records the snapshot, the files with their columns, and parses back; a broken one is named', () => {
    const plan = planExport({ tables: ['changes'], format: 'parquet' }, facts);
    const m = buildManifest(
      plan,
      facts,
      [{ table: 'changes', file: 'changes.parquet', rows: 3, bytes: 900, sha256: 'ab'.repeat(32) }],
      '2026-11-20T11:00:00.000Z',
    );
    expect(m.snapshot).toEqual({ cursor: 120, at: facts.at, run_id: 9, epoch: 'a1b2c3d4', history_since: facts.historySince });
    expect(m.files[0]?.columns).toContainEqual({ name: 'published_at', type: 'TIMESTAMP (UTC, ms)', nullable: false });
    expect(m.files[0]?.columns).toContainEqual({ name: 'body', type: 'JSON', nullable: false });
    expect(ManifestSchema.parse(JSON.parse(JSON.stringify(m)))).toEqual(m);
    const broken = JSON.stringify({ ...m, snapshot: { ...m.snapshot, cursor: -1 } });
    expect(() => parseManifest(broken, 'm.json')).toThrow(/m\.json is not an export manifest: snapshot\.cursor/);
    expect(() => parseManifest('{', 'm.json')).toThrow(/not JSON/);
  });

  it('folders sort by time; rotation keeps the newest and never touches other names', () => {
    const a = exportFolderName('2026-11-20T11:00:00.000Z');
    const b = exportFolderName('2026-11-21T11:00:00.000Z');
    expect(a).toBe('export-2026-11-20T11-00-00-000Z');
    expect(newestExport([b, a, 'notes', '.export-x.partial-1'])).toBe(b);
    expect(foldersToRotate([b, a, 'notes', 'last-export.json'], 1)).toEqual([a]);
    expect(foldersToRotate([b, a], 0)).toEqual([]);
  });
});

describe('rows as typed cells', () => {
  it('times become epoch milliseconds, dates days, ids numbers (INT64 in the file), flags booleans; NULL stays NULL', () => {
    expect(instant('2026-01-01T00:00:00.250Z')).toBe(Date.UTC(2026, 0, 1) + 250);
    expect(day('1970-01-03')).toBe(2);
    expect(instant(null)).toBeNull();
    const row = {
      user_id: 'u',
      team_id: 't',
      client_user_id: 'c',
      created_on: null,
      fallback_time_zone_id: 'Europe/Paris',
      fallback_time_zone_source_slug: null,
      fallback_time_zone_updated_at: null,
      fallback_birth_date: '1990-05-01',
      fallback_birth_date_source_slug: null,
      fallback_birth_date_updated_at: null,
      ingestion_start: null,
      ingestion_end: null,
      first_seen_at: '2026-01-01T00:00:00.000Z',
      last_seen_at: '2026-01-01T00:00:00.000Z',
      deleted_at: null,
      sources: 'garmin\u001foura',
      raw: '{"user_id":"u"}',
    };
    const u = userRecord(row);
    expect(u).toMatchObject({
      created_on: null,
      fallback_birth_date: day('1990-05-01'),
      sources: ['garmin', 'oura'],
      raw: '{"user_id":"u"}',
    });
    expect(userRecord({ ...row, sources: null }).sources).toEqual([]);
  });

  it('as of a time, a version or a connection that ended later is still open', () => {
    const v = {
      id: 4,
      user_id: 'u',
      team_id: 't',
      client_user_id: 'c',
      raw: '{}',
      valid_from: '2026-01-01T00:00:00.000Z',
      valid_to: '2026-03-01T00:00:00.000Z',
      opened_run: 1,
      closed_run: 7,
      end_cause: 'verified' as const,
      ended_in_deletion: 1,
      backfilled: 0,
    };
    expect(versionRecord(v)).toMatchObject({ valid_to: instant(v.valid_to), deleted: true, end_cause: 'verified', closed_run: 7 });
    expect(versionRecord(v, '2026-02-01T00:00:00.000Z')).toMatchObject({
      valid_to: null,
      deleted: false,
      end_cause: null,
      closed_run: null,
    });
    const s = {
      id: null,
      user_id: 'u',
      slug: 'oura',
      created_on: null,
      connected_at: '2026-01-01T00:00:00.000Z',
      disconnected_at: '2026-03-01T00:00:00.000Z',
      opened_run: 1,
      closed_run: 2,
      ended_by: 'disconnected' as const,
      backfilled: 0,
    };
    expect(sourceRecord(s, '2026-02-01T00:00:00.000Z')).toMatchObject({ connection_id: null, disconnected_at: null, ended_by: null });
    expect(sourceRecord(s)).toMatchObject({ ended_by: 'disconnected' });
  });

  it('an event keeps its id from its body', () => {
    const body = '{"id":"evt_a1b2c3d4_7","cursor":7,"type":"user.created"}';
    expect(
      changeRecord({ cursor: 7, type: 'user.created', run_id: 2, user_id: 'u', at: '2026-01-01T00:00:00.000Z', body }, 'a1b2c3d4'),
    ).toMatchObject({
      cursor: 7,
      event_id: 'evt_a1b2c3d4_7',
      body,
    });
  });
});

describe('the field policy on an export', () => {
  const row = {
    user_id: 'u',
    team_id: 't',
    client_user_id: 'c1',
    fallback_birth_date: 7000,
    ingestion_start: 1,
    sources: ['oura'],
    raw: '{"user_id":"u","client_user_id":"c1","fallback_birth_date":{"value":"1990-01-01"},"ingestion_start":"2020-01-01"}',
  };

  it('without one, or one that passes all, changes nothing', () => {
    expect(exportShape(undefined)).toBe(NO_POLICY);
    const pass = exportShape(compileFieldPolicy({}));
    expect(pass.id).toMatch(/^pass:/);
    expect(pass.apply('users', row)).toBe(row);
  });

  it('drops the columns and the fields of what it drops, and the client id when asked', () => {
    const shape = exportShape(compileFieldPolicy({ fields: { drop: ['fallback_birth_date'] }, client_user_id: 'drop' }));
    const names = shape.columns('users').map((c) => c.name);
    expect(names).not.toContain('fallback_birth_date_updated_at');
    expect(names).not.toContain('client_user_id');
    expect(names).toContain('ingestion_start');
    const out = shape.apply('users', row);
    expect(Object.keys(out)).toEqual(names);
    expect(JSON.parse(String(out.raw))).toEqual({ user_id: 'u', ingestion_start: '2020-01-01' });
  });

  it('an allow-list without connected_sources leaves out the sources column and file', () => {
    const shape = exportShape(compileFieldPolicy({ fields: { allow: ['created_on'] } }));
    expect(shape.writes('sources')).toBe(false);
    expect(shape.columns('users').map((c) => c.name)).not.toContain('sources');
    expect(shape.writes('versions')).toBe(true);
  });
});

describe('the schedule’s record and verdict', () => {
  const result = {
    dir: '/x/export-1',
    ms: 5,
    rotated: [],
    manifest: {
      ...manifestAt(1, null),
      files: [
        { table: 'users' as const, file: 'users.parquet', rows: 10, bytes: 100, sha256: 'a'.repeat(64), columns: [] },
        { table: 'changes' as const, file: 'changes.parquet', rows: 5, bytes: 50, sha256: 'b'.repeat(64), columns: [] },
      ],
    },
  };
  const hour = 3_600_000;

  it('a good attempt records its rows and bytes; a failure keeps the last good one', () => {
    const good = recordOf('2026-11-20T03:00:00.000Z', { result }, undefined);
    expect(good).toMatchObject({ ok: true, rows: 15, bytes: 150, dir: '/x/export-1' });
    const bad = recordOf('2026-11-21T03:00:00.000Z', { error: new Error('disk full') }, good);
    expect(bad).toMatchObject({ ok: false, error: 'disk full', lastGood: { at: good.at, rows: 15, bytes: 150 } });
    expect(recordOf('2026-11-22T03:00:00.000Z', { error: new Error('again') }, bad).lastGood).toEqual(bad.lastGood);
  });

  it('says failed, and stale past twice the interval', () => {
    const good = recordOf('2026-11-20T03:00:00.000Z', { result }, undefined);
    const now = new Date('2026-11-20T04:00:00.000Z');
    expect(exportVerdict({ ok: true, record: good }, 24 * hour, now, undefined)).toMatchObject({
      failed: null,
      stale: false,
      lastGoodRows: 15,
    });
    expect(exportVerdict({ ok: true, record: good }, 24 * hour, new Date('2026-11-23T00:00:00.000Z'), undefined).stale).toBe(true);
    const bad = recordOf('2026-11-20T04:00:00.000Z', { error: new Error('disk full') }, good);
    expect(exportVerdict({ ok: true, record: bad }, 24 * hour, now, undefined)).toMatchObject({ failed: 'disk full', lastGoodAt: good.at });
    expect(exportVerdict({ ok: false, problem: 'not JSON' }, hour, now, undefined)).toMatchObject({ failed: 'not JSON', stale: true });
    expect(exportVerdict({ ok: true, record: undefined }, hour, now, new Date(now.getTime() - 3 * hour)).stale).toBe(true);
  });
});
