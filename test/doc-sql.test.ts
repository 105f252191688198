/**
 * The SQL docs/sql.md and db/SCHEMA.md show analysts is part of the contract:
 * every statement in their ```sql blocks must run against a mirror synced
 * from the stand-in (legacy records included, so warnings exist too), then
 * synced again after the stand-in created, updated (sources connected and
 * disconnected) and deleted users; the "Changes in the last run" recipes
 * must answer with what that second run saw.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { ROOT } from './support/mirror-fixtures.js';

function sqlStatements(file: string, section?: string): string[] {
  let text = readFileSync(join(ROOT, file), 'utf8');
  if (section !== undefined) {
    const start = text.indexOf(`### ${section}`);
    text = text.slice(start, text.indexOf('\n#', start + 1) === -1 ? undefined : text.indexOf('\n#', start + 1));
  }
  const blocks = [...text.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  return blocks.flatMap((b) =>
    b
      .replace(/--[^\n]*/g, '')
      .split(';')
      .map((s) => s.trim())
      .filter((s) => s !== ''),
  );
}

let rig: SyncRig;
let reader: Db;
beforeAll(async () => {
  rig = await createSyncRig({ users: 1_500, legacyRecords: 0.2 });
  expect((await rig.sync()).status).toBe('succeeded');
  // A day of life upstream: sources connected and disconnected, users added and deleted.
  const directory = rig.standIn.directory;
  const listed = directory.page(0, 40).map((u) => String(u.user_id));
  for (const id of listed.slice(0, 20)) directory.update(id, 'connected_sources');
  // Five of them lose one of their original sources too: the history recipes' disconnections.
  for (const id of listed.slice(0, 5)) directory.update(id, 'connected_sources');
  directory.delete(listed.slice(20, 25));
  directory.add(5);
  expect((await rig.sync()).status).toBe('succeeded');
  reader = openMirror(rig.dbPath, { readonly: true });
});
afterAll(async () => {
  reader.close();
  await rig.close();
});

/**
 * Statements that may answer nothing on the stand-in's data, and why; every
 * other one must show the reader an answer.
 */
const MAY_BE_EMPTY: Array<[RegExp, string]> = [
  [/member_removals/, 'the removal audit lives in AUDIT_DB, not in the mirror'],
  [
    /source_count = 0 AND u\.created_on >= .*'-7 days'/s,
    'a week of a five-year spread of 1,500 users is a handful, each likely to have a source',
  ],
  [
    /valid_from <= '2026-06-01T00:00:00\.000Z'/,
    "a fixed date, before this test mirror's history began (answers there: test/history.test.ts)",
  ],
];

describe.each(['docs/sql.md', 'db/SCHEMA.md'])('the SQL examples in %s', (file) => {
  const statements = sqlStatements(file);
  it('are there to check', () => expect(statements.length).toBeGreaterThan(0));
  it.each(statements.map((s) => [s.split('\n')[0] ?? s, s]))('%s', (_first, statement) => {
    // A `?` is a placeholder for a client_user_id in the docs: one the second sync updated.
    const sample = reader
      .prepare<[], string>(
        `SELECT u.client_user_id FROM user_changes AS c JOIN users AS u USING (user_id) WHERE c.change = 'updated' LIMIT 1`,
      )
      .pluck()
      .get();
    const stmt = reader.prepare(statement.replaceAll('?', `'${sample ?? ''}'`));
    const rows = stmt.reader ? stmt.all() : [];
    if (stmt.reader && !MAY_BE_EMPTY.some(([pattern]) => pattern.test(statement))) expect(rows.length).toBeGreaterThan(0);
  });
});

describe('the "Changes in the last run" recipes in docs/sql.md', () => {
  const [counts, who, sources] = sqlStatements('docs/sql.md', 'Changes in the last run');
  const all = (sql: string | undefined) => reader.prepare(sql ?? 'SELECT 1 WHERE 0').all() as Array<Record<string, unknown>>;

  it('count what the last run created, updated and deleted', () => {
    const byChange: Record<string, unknown> = Object.fromEntries(all(counts).map((r) => [String(r.change), r.users]));
    expect(byChange).toMatchObject({ created: 5, deleted: 5 });
    expect(Number(byChange.updated)).toBeGreaterThanOrEqual(20);
  });

  it('name who was created or deleted', () => {
    const rows = all(who);
    expect(rows.filter((r) => r.change === 'deleted')).toHaveLength(5);
    expect(rows.filter((r) => r.change === 'created')).toHaveLength(5);
  });

  it('list the sources each updated user connected or disconnected', () => {
    const rows = all(sources);
    expect(new Set(rows.map((r) => r.user_id)).size).toBe(20);
    expect(rows.every((r) => (r.what === 'connected' || r.what === 'disconnected') && typeof r.slug === 'string')).toBe(true);
  });
});
