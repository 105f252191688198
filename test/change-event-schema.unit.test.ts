/**
 * The change event's contract: the pure decisions of the feed (which event a
 * change is, what an update names) and the JSON Schema consumers validate
 * against, which must be the one rendered from ChangeEventSchema.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CHANGE_EVENT_SCHEMA_VERSION,
  ChangeEventSchema,
  describeChange,
  diffRecords,
  envelope,
  readEvent,
  type ChangeInput,
} from '../db/change-event.js';

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

describe('readEvent, the reader of what envelope and describeChange write', () => {
  const AT = '2026-11-29T06:00:00.000Z';
  const stored = (input: ChangeInput, cursor = 7): Buffer => {
    const { type, data } = describeChange(input);
    return Buffer.from(envelope('0123abcd', cursor, type, AT, 3, data));
  };
  // Records holding what a byte search would stop at: the envelope's own member names, `}}`, brackets in strings,
  // escapes, spacing, and characters of 2, 3 and 4 bytes (byte offsets are not character offsets).
  const records = [
    '{"user_id":"u1","a":1}',
    '{ "user_id" : "u1",  "note": "a \\"quoted\\" }} \\\\ back", "z": [1, {"y": "]"}] }',
    '{"user_id":"u1","data":{"user":{"user_id":"other"}},"changed_fields":[","],"x":"\\"user\\":","y":{"z":{}}}',
    '{"user_id":"u1","name":"Zoë ∑ 🧪","esc":"\\u0000\\ud800\\u2028","t":"}}"}',
  ];
  // Ids that hold the envelope's member names and quotes: written escaped, before the record.
  const odd = { ...base, teamId: 't"1}} ü', clientUserId: '"user":{"user_id":"x"},"data":{' };

  it('gives back, byte for byte, the record a created, restored or updated event embedded', () => {
    for (const raw of records) {
      const created = readEvent(stored({ ...odd, raw }));
      expect(created).toMatchObject({ type: 'user.created', cursor: 7, userId: 'u1' });
      expect('record' in created && created.record?.equals(Buffer.from(raw))).toBe(true);
      const restored = readEvent(stored({ ...odd, raw, before: { raw: '{"a":0}', deletedAt: AT } }, 8));
      expect(restored).toMatchObject({ type: 'user.restored', cursor: 8 });
      expect('record' in restored && restored.record?.equals(Buffer.from(raw))).toBe(true);
      const updated = readEvent(stored({ ...odd, change: 'updated', raw, before: { raw: '{"user_id":"u1","a":0}', deletedAt: null } }));
      expect(updated).toMatchObject({ type: 'user.updated', userId: 'u1' });
      expect('record' in updated && updated.record?.equals(Buffer.from(raw))).toBe(true);
    }
  });

  it("finds an update's record when the earlier values in `previous` hold the member names that follow it", () => {
    const before = { raw: '{"user_id":"u1","p":{"a":1,"changed_fields":["x"],"sources_added":[]}}', deletedAt: null };
    const raw = '{"user_id":"u1","p":{"b":2}}';
    const body = stored({ ...base, change: 'updated', raw, before });
    // A search for the last `,"changed_fields":` lands inside `previous`, past the record.
    expect(body.lastIndexOf(',"changed_fields":')).toBeGreaterThan(body.indexOf('"previous"'));
    const read = readEvent(body);
    expect('record' in read && read.record?.toString('utf8')).toBe(raw);
  });

  it('reads a deletion as no record, and a mirror-wide event as its type and cursor', () => {
    expect(readEvent(stored({ ...odd, change: 'deleted', cause: 'verified' }, 11))).toEqual({
      type: 'user.deleted',
      cursor: 11,
      userId: 'u1',
      record: null,
    });
    const baseline = envelope('0123abcd', 12, 'mirror.baseline', AT, 3, JSON.stringify({ users: 2, note: 'n' }));
    expect(readEvent(Buffer.from(baseline))).toEqual({ type: 'mirror.baseline', cursor: 12 });
  });

  it('reads members in any order and spacing, the last of a repeated one as JSON.parse keeps it', () => {
    const raw = '{ "user_id": "u1", "k": [ "}" ] }';
    const body = `{ "data" : { "user" : {"user_id":"u0"} , "user":\n${raw} , "user_id" : "u1" } ,\t"type":"user.created", "cursor": 4 }`;
    const read = readEvent(Buffer.from(body));
    expect(read).toMatchObject({ type: 'user.created', cursor: 4, userId: 'u1' });
    expect('record' in read && read.record?.toString('utf8')).toBe(raw);
  });

  it('refuses what no envelope writes, saying what is wrong', () => {
    const event = (over: Record<string, unknown>) =>
      Buffer.from(JSON.stringify({ type: 'user.created', cursor: 1, data: { user_id: 'u1', user: { user_id: 'u1' } }, ...over }));
    expect(() => readEvent(Buffer.from('{"type":"user.created",'))).toThrow(/not valid JSON/);
    expect(() => readEvent(Buffer.from('[1]'))).toThrow(/not a JSON object/);
    expect(() => readEvent(event({ type: 'user.renamed' }))).toThrow(/unknown event type "user.renamed"/);
    expect(() => readEvent(event({ cursor: '1' }))).toThrow(/no integer cursor/);
    expect(() => readEvent(event({ data: { user: { user_id: 'u1' } } }))).toThrow(/names no user_id/);
    expect(() => readEvent(event({ data: { user_id: 'u1', user: { user_id: 'u2' } } }))).toThrow(/names another user/);
    expect(() => readEvent(event({ data: { user_id: 'u1' } }))).toThrow(/no "user"/);
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
