/**
 * The change event's contract: the pure decisions of the feed (which event a
 * change is, what an update names) and the JSON Schema consumers validate
 * against, which must be the one rendered from ChangeEventSchema.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CHANGE_EVENT_SCHEMA_VERSION, ChangeEventSchema, describeChange, diffRecords, type ChangeInput } from '../db/change-event.js';

const base: ChangeInput = {
  change: 'created',
  cause: null,
  userId: 'u1',
  teamId: 't1',
  clientUserId: 'c1',
  raw: '{"user_id":"u1","a":1}',
  before: undefined,
};

describe('describeChange', () => {
  it('tells created from restored by the state before the change', () => {
    expect(describeChange(base).type).toBe('user.created');
    expect(describeChange({ ...base, before: { raw: '{"a":0}', deletedAt: '2026-01-01T00:00:00.000Z' } }).type).toBe('user.restored');
  });

  it('says why a deletion happened and carries no record', () => {
    const gone = describeChange({ ...base, change: 'deleted', cause: 'verified' });
    expect(gone.type).toBe('user.deleted');
    expect(JSON.parse(gone.data)).toEqual({ user_id: 'u1', team_id: 't1', client_user_id: 'c1', user: null, reason: 'verified' });
    expect(JSON.parse(describeChange({ ...base, change: 'deleted', cause: 'superseded' }).data)).toMatchObject({ reason: 'superseded' });
  });

  it('gives an update the previous values of the fields that changed, and only of those the earlier record held', () => {
    const before = { raw: '{"user_id":"u1","a":1,"b":{"x":1},"c":"gone","same":true}', deletedAt: null };
    const raw = '{"user_id":"u1","a":2,"b":{"x":2},"d":"new","same":true}';
    const data = JSON.parse(describeChange({ ...base, change: 'updated', raw, before }).data) as Record<string, unknown>;
    expect(data.changed_fields).toEqual(['a', 'b', 'c', 'd']);
    expect(data.previous).toEqual({ a: 1, b: { x: 1 }, c: 'gone' });
  });

  it('embeds the record as mirrored, byte for byte', () => {
    const raw = '{ "user_id" : "u1",  "z": [1, 2] }';
    expect(describeChange({ ...base, raw }).data).toContain(`"user":${raw}}`);
  });
});

describe('diffRecords', () => {
  const src = (slug: string, via: 'provider' | 'source' = 'provider') => ({ [via]: { slug, name: slug } });
  it('names top-level fields that changed, appeared or went; key order inside is not a change', () => {
    const before = JSON.stringify({ a: 1, b: { x: 1, y: 2 }, c: 'gone', connected_sources: [] });
    const after = JSON.stringify({ b: { y: 2, x: 1 }, a: 2, d: null, connected_sources: [] });
    expect(diffRecords(before, after).fields).toEqual(['a', 'c', 'd']);
  });

  it('lists source slugs gained and lost, provider before the deprecated source', () => {
    const before = JSON.stringify({ connected_sources: [src('oura'), src('garmin', 'source')] });
    const after = JSON.stringify({ connected_sources: [src('garmin'), { provider: { slug: 'whoop' }, source: { slug: 'other' } }] });
    expect(diffRecords(before, after)).toEqual({ fields: ['connected_sources'], added: ['whoop'], removed: ['oura'] });
  });

  it('treats an unreadable earlier record as empty', () => {
    expect(diffRecords('not json', '{"a":1}')).toEqual({ fields: ['a'], added: [], removed: [] });
  });
});

describe('docs/change-event.schema.json', () => {
  it('is the JSON Schema of ChangeEventSchema (npm run changes-schema renders it)', () => {
    const file: unknown = JSON.parse(readFileSync(new URL('../docs/change-event.schema.json', import.meta.url), 'utf8'));
    expect(file).toEqual(JSON.parse(JSON.stringify(z.toJSONSchema(ChangeEventSchema, { target: 'draft-2020-12' }))));
  });

  it('states the schema version the code has, and docs/changes.md says the same', () => {
    const file = JSON.parse(readFileSync(new URL('../docs/change-event.schema.json', import.meta.url), 'utf8')) as {
      schema_version?: unknown;
    };
    expect(file.schema_version).toBe(CHANGE_EVENT_SCHEMA_VERSION);
    const page = readFileSync(new URL('../docs/changes.md', import.meta.url), 'utf8');
    expect(page).toContain(`\`schema_version\` ${CHANGE_EVENT_SCHEMA_VERSION}`);
    expect(page).toMatch(/`previous`: the value each changed field had before/);
  });
});
