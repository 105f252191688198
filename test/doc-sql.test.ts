/**
 * The SQL docs/sql.md and db/SCHEMA.md show analysts is part of the contract:
 * every statement in their ```sql blocks must answer against a mirror synced
 * from the stand-in (legacy records included, so warnings exist too), then
 * synced again after the stand-in created, updated (sources connected and
 * disconnected) and deleted users; the removal audit's statements against an
 * audit file holding one removal. The few that answer nothing on this data
 * as written must run, and answer once changed as ADAPTED says. The "Changes
 * in the last run" recipes must answer with what that second run saw.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAudit } from '../db/open-audit.js';
import { openMirror, type Db } from '../db/open.js';
import { createRemovalAudit } from '../db/removal-audit.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { ROOT } from './support/mirror-fixtures.js';
import { auditPathFor } from '../db/audit-location.js';

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

/** The member of the one removal in the audit file. */
const MEMBER = 'b2c3d4e5-0000-4000-8000-000000000001';

let rig: SyncRig;
let reader: Db;
let audit: Db;
/** What a `?` in the docs stands for: a client_user_id, one the second sync updated. */
let sample: string;
beforeAll(async () => {
  rig = await createSyncRig({ users: 1_500, legacyRecords: 0.2 });
  expect((await rig.sync()).status).toBe('succeeded');
  // A day of life upstream: sources connected and disconnected, users added and deleted.
  const directory = rig.standIn.directory;
  const listed = directory.page(0, 40).map((u) => String(u.user_id));
  const slugs = (r: { connected_sources?: unknown } | undefined) => JSON.stringify(r?.connected_sources ?? []);
  const before = new Map(directory.page(0, 20).map((u) => [String(u.user_id), slugs(u)]));
  for (const id of listed.slice(0, 20)) directory.update(id, 'connected_sources', 'connect');
  // Five of them lose a source too: the history recipes' disconnections. Updates accumulate, so a
  // disconnection can take back the source just connected: one more connection keeps the user changed.
  for (const id of listed.slice(0, 5)) {
    const after = directory.update(id, 'connected_sources', 'disconnect');
    if (slugs(after) === before.get(id)) directory.update(id, 'connected_sources', 'connect');
  }
  directory.delete(listed.slice(20, 25));
  directory.add(5);
  expect((await rig.sync()).status).toBe('succeeded');
  reader = openMirror(rig.dbPath, { readonly: true });
  const updated = reader
    .prepare<[], string>(
      `SELECT u.client_user_id FROM user_changes AS c JOIN users AS u USING (user_id) WHERE c.change = 'updated' LIMIT 1`,
    )
    .pluck()
    .get();
  if (updated === undefined) throw new Error('the second sync updated no user');
  sample = updated;
  // The removal audit (AUDIT_DB) as a worker leaves it after removing one member.
  const writable = openAudit(auditPathFor(rig.dbPath));
  const removals = createRemovalAudit(writable);
  const job = { jobId: '1', enqueuedAt: Date.now() };
  removals.started(job, { target: 'https://management.example', org_id: 'a1b2c3d4-0000-4000-8000-000000000001', member_id: MEMBER });
  removals.finished(job, 'succeeded');
  writable.close();
  audit = openAudit(auditPathFor(rig.dbPath), { readonly: true });
});
afterAll(async () => {
  audit?.close();
  reader?.close();
  await rig?.close();
});

/**
 * Statements that answer nothing on the stand-in's data as written, and the
 * one change that makes them answer there: each runs as written (it must
 * run) and as changed (it must answer). Every other statement must answer
 * as written.
 */
const ADAPTED: Array<{ pattern: RegExp; why: string; change: (statement: string) => string }> = [
  {
    pattern: /source_count = 0 AND u\.created_on >= .*'-7 days'/s,
    why: 'a week of a five-year spread of 1,500 users is a handful, each likely to have a source; over the spread, some have none',
    change: (statement) => statement.replace("'-7 days'", "'-10 years'"),
  },
  {
    pattern: /'2026-06-01T00:00:00\.000Z'/,
    why: "a fixed date, before this test mirror's history began (answers there: test/history.test.ts); now, the user has a version",
    change: (statement) => statement.replaceAll('2026-06-01T00:00:00.000Z', new Date().toISOString()),
  },
];

/** The removal audit's tables live in AUDIT_DB, not in the mirror: their statements read the audit file. */
const AUDIT_TABLE = /\bmember_removals\b/;

describe.each(['docs/sql.md', 'db/SCHEMA.md', 'docs/followers.md'])('the SQL examples in %s', (file) => {
  const statements = sqlStatements(file);
  it('are there to check', () => expect(statements.length).toBeGreaterThan(0));
  it.each(statements.map((s) => [s.split('\n')[0] ?? s, s]))('%s', (_first, statement) => {
    const inAudit = AUDIT_TABLE.test(statement);
    const answer = (sql: string): unknown[] => {
      const stmt = (inAudit ? audit : reader).prepare(sql.replaceAll('?', `'${inAudit ? MEMBER : sample}'`));
      expect(stmt.reader, 'SQL shown to readers only reads').toBe(true);
      return stmt.all();
    };
    const adapted = ADAPTED.find(({ pattern }) => pattern.test(statement));
    const rows = answer(statement);
    if (adapted === undefined) {
      expect(rows.length).toBeGreaterThan(0);
      return;
    }
    const changed = adapted.change(statement);
    expect(changed).not.toBe(statement);
    expect(answer(changed).length, adapted.why).toBeGreaterThan(0);
  });
});

describe('the adapted statements', () => {
  const all = ['docs/sql.md', 'db/SCHEMA.md', 'docs/followers.md'].flatMap((file) => sqlStatements(file));
  it.each(ADAPTED.map((a) => [String(a.pattern), a]))('%s still names a statement in the docs', (_name, { pattern }) => {
    expect(all.filter((s) => pattern.test(s))).toHaveLength(1);
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
