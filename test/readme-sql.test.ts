/**
 * The SQL docs/sql.md and db/SCHEMA.md show analysts is part of the contract:
 * every statement in their ```sql blocks must run against a mirror synced
 * from the stand-in (legacy records included, so warnings exist too).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { ROOT } from './support/mirror-fixtures.js';

function sqlStatements(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
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
  reader = openMirror(rig.dbPath, { readonly: true });
});
afterAll(async () => {
  reader.close();
  await rig.close();
});

describe.each(['docs/sql.md', 'db/SCHEMA.md'])('the SQL examples in %s', (file) => {
  const statements = sqlStatements(file);
  it('are there to check', () => expect(statements.length).toBeGreaterThan(0));
  it.each(statements.map((s) => [s.split('\n')[0] ?? s, s]))('%s', (_first, statement) => {
    // A `?` is a placeholder for a client_user_id in the docs.
    expect(() => reader.prepare(statement.replaceAll('?', "'cu_00000000'")).all()).not.toThrow();
  });
});
