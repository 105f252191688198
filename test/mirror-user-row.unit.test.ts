import { describe, expect, it } from 'vitest';
import { needsWrite, toSourceRows, toUserRow, toUtcTimestamp } from '../db/user-row.js';
import { contentHash } from '../db/user-row.js';
import { UserSchema } from '../src/service/schemas.js';
import { userId, wireUser } from './support/mirror-fixtures.js';

const parse = (r: Record<string, unknown>) => UserSchema.parse(r);

describe('toUtcTimestamp', () => {
  it.each([
    ['2022-08-04T12:42:45.596792+00:00', '2022-08-04T12:42:45.596Z'],
    ['2026-01-12T12:39:40Z', '2026-01-12T12:39:40.000Z'],
    ['2026-01-12T12:39:40.5Z', '2026-01-12T12:39:40.500Z'],
    ['2026-01-12T12:39:40+00:00', '2026-01-12T12:39:40.000Z'],
    ['2026-01-12T01:30:00.123456+02:00', '2026-01-11T23:30:00.123Z'],
    ['2026-01-12T23:30:00-05:30', '2026-01-13T05:00:00.000Z'],
    ['2026-01-12T23:30Z', '2026-01-12T23:30:00.000Z'],
    // No offset: UTC, as the service states for all its times (db/SCHEMA.md).
    ['2022-08-04T12:42:45', '2022-08-04T12:42:45.000Z'],
    ['2022-08-04T12:42:45.596792', '2022-08-04T12:42:45.596Z'],
    ['2022-08-04T12:42', '2022-08-04T12:42:00.000Z'],
    ['0099-01-01T00:00:00Z', '0099-01-01T00:00:00.000Z'],
  ])('%s → %s', (input, expected) => {
    expect(toUtcTimestamp(input)).toBe(expected);
  });

  it('passes null, undefined and the unparseable through', () => {
    expect(toUtcTimestamp(null)).toBeNull();
    expect(toUtcTimestamp(undefined)).toBeNull();
    expect(toUtcTimestamp('yesterday')).toBe('yesterday');
  });

  it('gives one width, so text order is time order', () => {
    const a = toUtcTimestamp('2026-01-12T12:39:40Z') ?? '';
    const b = toUtcTimestamp('2026-01-12T12:39:40.5+00:00') ?? '';
    expect(a.length).toBe(24);
    expect(a < b).toBe(true);
  });
});

describe('toUserRow', () => {
  it('flattens the record and keeps the raw text', () => {
    const record = wireUser(1, { fallback_birth_date: { value: '1990-05-01', source_slug: 'garmin', updated_at: '2024-01-01T00:00:00Z' } });
    const raw = JSON.stringify(record);
    const row = toUserRow(parse(record), raw, contentHash(raw));
    expect(row).toEqual({
      user_id: userId(1),
      team_id: record.team_id,
      client_user_id: 'client-1',
      created_on: '2022-08-04T12:42:45.596Z',
      fallback_time_zone_id: 'Europe/London',
      fallback_time_zone_source_slug: 'manual',
      fallback_time_zone_updated_at: '2026-01-12T12:39:40.000Z',
      fallback_birth_date: '1990-05-01',
      fallback_birth_date_source_slug: 'garmin',
      fallback_birth_date_updated_at: '2024-01-01T00:00:00.000Z',
      ingestion_start: '2022-01-01',
      ingestion_end: null,
      raw,
      content_hash: contentHash(raw),
    });
  });

  it('turns absent and null optional parts into NULL columns', () => {
    const record = wireUser(2);
    for (const k of ['created_on', 'fallback_time_zone', 'fallback_birth_date', 'ingestion_start', 'ingestion_end']) delete record[k];
    const row = toUserRow(parse(record), JSON.stringify(record), contentHash(JSON.stringify(record)));
    expect(row.created_on).toBeNull();
    expect(row.fallback_time_zone_id).toBeNull();
    expect(row.fallback_birth_date).toBeNull();
    expect(row.ingestion_start).toBeNull();
  });
});

describe('toSourceRows', () => {
  const d = (slug: string, logo = `https://l/${slug}.png`) => ({ slug, name: slug.toUpperCase(), logo });

  it('prefers provider over the deprecated source, and falls back to source', () => {
    const user = parse(
      wireUser(1, {
        connected_sources: [
          { created_on: '2024-01-01T00:00:00Z', provider: d('oura'), source: d('oura', 'https://old/oura.png') },
          { created_on: '2024-01-02T00:00:00+00:00', source: d('garmin') },
        ],
      }),
    );
    expect(toSourceRows(user)).toEqual([
      {
        user_id: userId(1),
        slug: 'oura',
        name: 'OURA',
        logo: 'https://l/oura.png',
        created_on: '2024-01-01T00:00:00.000Z',
        descriptor: 'provider',
      },
      {
        user_id: userId(1),
        slug: 'garmin',
        name: 'GARMIN',
        logo: 'https://l/garmin.png',
        created_on: '2024-01-02T00:00:00.000Z',
        descriptor: 'source',
      },
    ]);
  });

  it('keeps the first entry of a slug listed twice', () => {
    const user = parse(
      wireUser(1, {
        connected_sources: [
          { created_on: '2024-01-01T00:00:00Z', provider: d('oura') },
          { created_on: '2025-01-01T00:00:00Z', provider: { ...d('oura'), name: 'Oura v2' } },
        ],
      }),
    );
    const rows = toSourceRows(user);
    expect(rows).toHaveLength(1);
    expect(rows[0]?.name).toBe('OURA');
  });
});

describe('contentHash and needsWrite', () => {
  it('hashes the exact text: any change, even one unknown field, is a change', () => {
    const a = JSON.stringify(wireUser(1));
    const b = JSON.stringify(wireUser(1, { new_field: 1 }));
    expect(contentHash(a)).toBe(contentHash(a));
    expect(contentHash(a)).not.toBe(contentHash(b));
  });

  it('writes new, changed and deleted users only', () => {
    const h = contentHash('{}');
    expect(needsWrite(undefined, h)).toBe(true);
    expect(needsWrite({ content_hash: h, deleted_at: null }, h)).toBe(false);
    expect(needsWrite({ content_hash: 'other', deleted_at: null }, h)).toBe(true);
    expect(needsWrite({ content_hash: h, deleted_at: '2026-01-01T00:00:00.000Z' }, h)).toBe(true);
  });
});
