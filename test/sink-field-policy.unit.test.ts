import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { compileFieldPolicy, FieldPolicySchema, hmacKeyFromFile } from '../src/sinks/field-policy.js';

const KEY = 'k'.repeat(40);
const keyFile = (path: string): Uint8Array => {
  if (path !== '/keys/join') throw new Error(`unexpected ${path}`);
  return Buffer.from(`${KEY}\n`);
};

const user = {
  user_id: 'u-1',
  team_id: 't-1',
  client_user_id: 'patient-42',
  fallback_birth_date: { birth_date: '1970-01-01', source_slug: 'x' },
  fallback_time_zone: { id: 'Europe/Berlin' },
  connected_sources: [{ provider: { slug: 'oura' } }],
  ingestion_start: '2026-01-01',
};
const updated = JSON.stringify({
  id: 'evt_ab_7',
  cursor: 7,
  type: 'user.updated',
  timestamp: '2026-11-29T00:00:00.000Z',
  run_id: 3,
  data: {
    user_id: 'u-1',
    team_id: 't-1',
    client_user_id: 'patient-42',
    user,
    changed_fields: ['connected_sources', 'fallback_birth_date', 'ingestion_start'],
    sources_added: ['oura'],
    sources_removed: [],
    previous: { fallback_birth_date: { birth_date: '1969-12-31' }, ingestion_start: '2025-01-01', connected_sources: [] },
  },
});
const hmac = (id: string): string => createHmac('sha256', Buffer.from(KEY)).update(id).digest('hex');

describe('field policy', () => {
  it('passes an event untouched (its very bytes) when it changes nothing', () => {
    const p = compileFieldPolicy(undefined);
    expect(p.passesAll).toBe(true);
    expect(p.name).toBe('pass');
    expect(p.applyToEvent(updated)).toBe(updated);
  });

  it('drops a listed field from user, previous and changed_fields, and hashes client_user_id in both places', () => {
    const p = compileFieldPolicy(
      { name: 'no-birth', fields: { drop: ['fallback_birth_date'] }, client_user_id: 'hmac', hmac_key_file: '/keys/join' },
      keyFile,
    );
    const out = p.applyToEvent(updated);
    expect(out).not.toContain('birth');
    expect(out).not.toContain('patient-42');
    const e = JSON.parse(out) as { data: Record<string, unknown> & { user: Record<string, unknown> } };
    expect(e.data.client_user_id).toBe(hmac('patient-42'));
    expect(e.data.user.client_user_id).toBe(hmac('patient-42'));
    expect(e.data.changed_fields).toEqual(['connected_sources', 'ingestion_start']);
    expect(e.data.previous).toEqual({ ingestion_start: '2025-01-01', connected_sources: [] });
    expect(e.data.sources_added).toEqual(['oura']);
    expect(p.id).toBe(`no-birth:${p.fingerprint}`);
  });

  it('lets only allowed fields leave, empties source lists when connected_sources stays home, drops client_user_id', () => {
    const p = compileFieldPolicy({ fields: { allow: ['user_id', 'team_id'] }, client_user_id: 'drop' });
    const e = JSON.parse(p.applyToEvent(updated)) as { data: Record<string, unknown> };
    expect(e.data).toEqual({
      user_id: 'u-1',
      team_id: 't-1',
      user: { user_id: 'u-1', team_id: 't-1' },
      changed_fields: [],
      sources_added: [],
      sources_removed: [],
      previous: {},
    });
    expect(p.name).toBe('custom');
  });

  it('leaves mirror events and deletions whole but for the ids', () => {
    const p = compileFieldPolicy({ client_user_id: 'drop', fields: { drop: ['x'] } });
    const baseline = '{"id":"evt_ab_1","cursor":1,"type":"mirror.baseline","data":{"users":3,"note":"n"}}';
    expect(p.applyToEvent(baseline)).toBe(baseline);
    const deleted = JSON.parse(
      p.applyToEvent(
        '{"id":"evt_ab_2","type":"user.deleted","data":{"user_id":"u","team_id":"t","client_user_id":"c","user":null,"reason":"verified"}}',
      ),
    ) as { data: unknown };
    expect(deleted.data).toEqual({ user_id: 'u', team_id: 't', user: null, reason: 'verified' });
  });

  it('has a fingerprint that follows the rule and the key, never shows the key, and ignores list order', () => {
    const a = compileFieldPolicy({ fields: { drop: ['a', 'b'] } });
    const b = compileFieldPolicy({ fields: { drop: ['b', 'a'] } });
    const c = compileFieldPolicy({ fields: { allow: ['a', 'b'] } });
    expect(a.fingerprint).toBe(b.fingerprint);
    expect(a.fingerprint).not.toBe(c.fingerprint);
    expect(a.fingerprint).toMatch(/^[0-9a-f]{16}$/);
    const spec = { client_user_id: 'hmac', hmac_key_file: '/keys/join' } as const;
    const k1 = compileFieldPolicy(spec, keyFile);
    const k2 = compileFieldPolicy(spec, () => Buffer.from('z'.repeat(40)));
    expect(k1.fingerprint).not.toBe(k2.fingerprint);
    expect(k1.id).not.toContain(KEY);
    expect(compileFieldPolicy(spec, keyFile).fingerprint).toBe(k1.fingerprint);
  });

  it('refuses a short key naming the file, never its bytes', () => {
    expect(() => compileFieldPolicy({ client_user_id: 'hmac', hmac_key_file: '/k' }, () => Buffer.from('secret-short'))).toThrow(
      /hmac_key_file \/k: the key is 12 bytes; at least 32/,
    );
    try {
      compileFieldPolicy({ client_user_id: 'hmac', hmac_key_file: '/k' }, () => Buffer.from('secret-short'));
    } catch (err) {
      expect(String(err)).not.toContain('secret-short');
    }
  });

  it('reports every problem of a policy at once, by field', () => {
    const r = FieldPolicySchema.safeParse({ name: 'Bad Name', fields: { allow: ['a', 'a'], drop: [] }, client_user_id: 'hmac', extra: 1 });
    expect(r.success).toBe(false);
    const paths = r.error?.issues.map((i) => i.path.join('.')) ?? [];
    expect(paths).toEqual(expect.arrayContaining(['name', 'fields', '']));
    const hmacless = FieldPolicySchema.safeParse({ client_user_id: 'hmac' });
    expect(hmacless.error?.issues.map((i) => `${i.path.join('.')} ${i.message}`)).toEqual([
      'hmac_key_file is required when client_user_id is "hmac"',
    ]);
    expect(FieldPolicySchema.safeParse({ fields: { drop: ['client_user_id'] } }).success).toBe(false);
    expect(FieldPolicySchema.safeParse({ client_user_id: 'pass', hmac_key_file: '/k' }).success).toBe(false);
  });

  it('reads a key file with one trailing line end ignored', () => {
    expect(hmacKeyFromFile(Buffer.from('abc\r\n')).toString()).toBe('abc');
    expect(hmacKeyFromFile(Buffer.from('abc\n\n')).toString()).toBe('abc\n');
  });
});
