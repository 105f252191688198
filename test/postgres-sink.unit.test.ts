/**
 * The PostgreSQL sink's pure decisions: COPY's text format, waves of a
 * batch, what a pass does next, and the field policy on a row.
 */
import { describe, expect, it } from 'vitest';
import type { FeedPage } from '../db/change-feed.js';
import { compileFieldPolicy } from '../src/sinks/field-policy.js';
import { nextStep } from '../src/sinks/postgres/replicate-decisions.js';
import { copyLine, userValues, USER_COLUMNS, waves, type Change } from '../src/sinks/postgres/rows.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../src/runtime/config.js';
import { parseSinks } from '../src/sinks/sinks-file.js';
import { describePostgres } from '../src/sinks/postgres/config.js';

describe('copyLine', () => {
  it('writes tabs between values, \\N for NULL, and escapes backslash, tab, newline and CR', () => {
    expect(copyLine(['a', null, 'b'])).toBe('a\t\\N\tb\n');
    expect(copyLine(['x\\y\tz\nw\rv'])).toBe('x\\\\y\\tz\\nw\\rv\n');
    expect(copyLine(['{"a":"\\n"}'])).toBe('{"a":"\\\\n"}\n');
  });
});

describe('waves', () => {
  const up = (userId: string, cursor: number): Change => ({ kind: 'upsert', cursor, at: 't', userId, user: [], sources: [] });
  it('puts a user in one wave per change, in feed order; other users share waves', () => {
    const w = waves([up('a', 1), up('b', 2), up('a', 3), up('a', 4), up('c', 5)] as Exclude<Change, { kind: 'rebaseline' }>[]);
    expect(w.map((wave) => wave.map((c) => c.cursor))).toEqual([[1, 2, 5], [3], [4]]);
  });
});

describe('nextStep', () => {
  const position = { cursor: 10, epoch: 'e1', fieldPolicy: 'pass:x', completeSince: null, baselineAt: 't', appliedAt: 't' };
  const feed = { cursor: 12, epoch: 'e1', completeSince: null };
  const event = (cursor: number, type: string) => ({
    cursor,
    id: `evt_e1_${cursor}`,
    type,
    userId: null,
    publishedAt: 't',
    body: `{"cursor":${cursor}}`,
  });
  const page = (...events: ReturnType<typeof event>[]): FeedPage => ({ gone: false, events, next: 0 }) as FeedPage;

  it('baselines first, after an epoch change, a policy change, a gone cursor, or a destination ahead of the feed', () => {
    expect(nextStep(undefined, feed, 'pass:x', undefined).kind).toBe('baseline');
    expect(nextStep(position, { ...feed, epoch: 'e2' }, 'pass:x', page()).kind).toBe('baseline');
    expect(nextStep(position, feed, 'custom:y', page()).kind).toBe('baseline');
    expect(nextStep(position, feed, 'pass:x', { gone: true, oldest: 11 }).kind).toBe('baseline');
    expect(nextStep(position, { ...feed, cursor: 9 }, 'pass:x', page()).kind).toBe('baseline');
  });

  it('applies the events before a restart event, then baselines at it; done at the end of the feed', () => {
    const step = nextStep(position, feed, 'pass:x', page(event(11, 'user.created'), event(12, 'mirror.restored')));
    expect(step).toMatchObject({ kind: 'batch', to: 11, after: { cursor: 10, epoch: 'e1' } });
    expect(nextStep({ ...position, cursor: 11 }, feed, 'pass:x', page(event(12, 'mirror.restored')))).toEqual({
      kind: 'baseline',
      why: 'the mirror was restored from a backup',
    });
    expect(nextStep({ ...position, cursor: 12 }, feed, 'pass:x', page())).toEqual({ kind: 'done' });
  });
});

describe('userValues', () => {
  const user = {
    user_id: 'u',
    team_id: 't',
    client_user_id: 'c',
    created_on: '2026-01-01T00:00:00.000Z',
    fallback_time_zone_id: 'Europe/Paris',
    fallback_time_zone_source_slug: 'manual',
    fallback_time_zone_updated_at: null,
    fallback_birth_date: '1990-01-01',
    fallback_birth_date_source_slug: 'manual',
    fallback_birth_date_updated_at: null,
    ingestion_start: null,
    ingestion_end: null,
    raw: '{"user_id":"u","client_user_id":"c","fallback_birth_date":{"value":"1990-01-01"},"x":1}',
    deleted_at: null,
  };
  it('leaves the record as it is under a policy that passes all', () => {
    expect(userValues(user, compileFieldPolicy(undefined))[USER_COLUMNS.indexOf('raw')]).toBe(user.raw);
  });
  it('drops a field from its columns and from raw, and drops client_user_id where asked', () => {
    const values = userValues(user, compileFieldPolicy({ client_user_id: 'drop', fields: { drop: ['fallback_birth_date'] } }));
    const at = (c: (typeof USER_COLUMNS)[number]) => values[USER_COLUMNS.indexOf(c)];
    expect(at('fallback_birth_date')).toBeNull();
    expect(at('fallback_birth_date_source_slug')).toBeNull();
    expect(at('client_user_id')).toBeNull();
    expect(at('fallback_time_zone_id')).toBe('Europe/Paris');
    expect(JSON.parse(String(at('raw')))).toEqual({ user_id: 'u', x: 1 });
  });
});

describe('a postgres entry in SINKS_FILE', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pg-sink-options-'));
  const file = join(dir, 'connection');
  writeFileSync(file, 'postgres://writer:s3cret-pw@127.0.0.1:6543/analytics\n', { mode: 0o600 });
  const remote = join(dir, 'remote');
  writeFileSync(remote, 'postgres://writer:s3cret-pw@db.example:5432/analytics\n', { mode: 0o600 });
  const problems = (entry: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): readonly string[] => {
    try {
      parseSinks({ sinks: [{ name: 'pg', kind: 'postgres', ...entry }] }, env);
      return [];
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return err.problems;
    }
  };

  it('reads the connection by reference, a lower-case schema (default user_mirror), and names it without the password', () => {
    const [sink] = parseSinks({ sinks: [{ name: 'pg', kind: 'postgres', connection: { file } }] }, {});
    expect(sink?.kind).toBe('postgres');
    if (sink?.kind !== 'postgres') return;
    expect(sink.schema).toBe('user_mirror');
    expect(sink.connectionString).toContain('s3cret-pw');
    expect(describePostgres(sink)).toBe('postgres 127.0.0.1:6543/analytics schema user_mirror');
    expect(problems({ connection: { credential: 'pg-url' } }, { CREDENTIALS_DIRECTORY: dir })).toEqual([
      `SINKS_FILE: sinks[0] "pg".connection: ${join(dir, 'pg-url')}: cannot be read (ENOENT)`,
    ]);
  });

  it('refuses a connection by value, a schema not lower-case, a filter, and clear text beyond this host', () => {
    expect(problems({ connection: 'postgres://writer:pw@h/db' }).join('\n')).toMatch(/connection: must be \{ "file"/);
    expect(problems({ connection: { file }, schema: 'Mirror' }).join('\n')).toMatch(/schema: must be a lower-case identifier/);
    expect(problems({ connection: { file }, filter: { types: ['user.created'] } }).join('\n')).toMatch(
      /filter: a postgres sink replicates the whole mirror and takes no filter/,
    );
    const clear = problems({ connection: { file: remote } });
    expect(clear.join('\n')).toMatch(/db\.example is beyond this host/);
    expect(clear.join('\n')).not.toContain('s3cret-pw');
    expect(
      parseSinks({ sinks: [{ name: 'pg', kind: 'postgres', connection: { file: remote } }] }, {}, 'x', { tlsByProxy: true }),
    ).toHaveLength(1);
  });

  it('leaves nothing behind', () => {
    rmSync(dir, { recursive: true, force: true });
  });
});
