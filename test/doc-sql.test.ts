/**
 * The SQL docs/sql.md and db/SCHEMA.md show analysts is part of the contract:
 * every statement in their ```sql blocks must answer against a mirror synced
 * from the stand-in (legacy records included, so warnings exist too), then
 * synced again after the stand-in created, updated (sources connected and
 * disconnected) and deleted users; the removal audit's statements against an
 * audit file holding one removal. The few that answer nothing on this data
 * as written must run, and answer once changed as ADAPTED says. The "Changes
 * in the last run" recipes must answer with what that second run saw.
 *
 * Each statement is answered twice: through better-sqlite3 (it must be a
 * reader), and through the sqlite3 CLI the docs open the mirror with
 * (`sqlite3 -readonly`), as written: the block's `.parameter set` lines
 * before it, then the statement, and it must print rows. A parameter the CLI
 * is not given (a bare `?`) matches nothing there, so none may be left. Each
 * block, pasted whole, must run without an error. The docs' example ids are
 * the fixture's: a user the second sync updated, the member removed.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAudit } from '../db/open-audit.js';
import { openMirror, type Db } from '../db/open.js';
import { createRemovalAudit } from '../db/removal-audit.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { ROOT } from './support/mirror-fixtures.js';
import { auditPathFor } from '../db/audit-location.js';

/** One statement of a ```sql block, with the sqlite3 dot-commands before it in its block and the block itself. */
interface Recipe {
  statement: string;
  commands: string[];
  block: string;
}

function sqlBlocks(file: string, section?: string): string[] {
  let text = readFileSync(join(ROOT, file), 'utf8');
  if (section !== undefined) {
    const start = text.indexOf(`### ${section}`);
    text = text.slice(start, text.indexOf('\n#', start + 1) === -1 ? undefined : text.indexOf('\n#', start + 1));
  }
  return [...text.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
}

/** A block as sqlite3 reads it: a line starting with a dot between statements is a command, the rest statements ending in `;`. */
function recipesOf(block: string): Recipe[] {
  const out: Recipe[] = [];
  const commands: string[] = [];
  let pending = '';
  for (const line of block.replace(/--[^\n]*/g, '').split('\n')) {
    if (pending.trim() === '' && line.trim().startsWith('.')) {
      commands.push(line.trim());
      continue;
    }
    pending += `${line}\n`;
    for (let end = pending.indexOf(';'); end !== -1; end = pending.indexOf(';')) {
      const statement = pending.slice(0, end).trim();
      if (statement !== '') out.push({ statement, commands: [...commands], block });
      pending = pending.slice(end + 1);
    }
  }
  return out;
}

function sqlRecipes(file: string, section?: string): Recipe[] {
  return sqlBlocks(file, section).flatMap(recipesOf);
}

function sqlStatements(file: string, section?: string): string[] {
  return sqlRecipes(file, section).map((r) => r.statement);
}

/** The parameters a block's `.parameter set :name 'value'` lines give, by name. */
function parametersOf(commands: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of commands) {
    const m = /^\.parameter set :(\w+) '((?:[^']|'')*)'$/.exec(c);
    if (m === null) throw new Error(`a dot-command this test does not know: ${c}`);
    out[m[1] ?? ''] = (m[2] ?? '').replaceAll("''", "'");
  }
  return out;
}

/** The sqlite3 CLI reading `script` on a mirror or audit file, read-only, as the docs open them. */
function sqlite3(db: string, script: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('sqlite3', ['-readonly', db], { input: script, encoding: 'utf8' });
  if (r.error !== undefined)
    throw new Error(`the sqlite3 CLI cannot run (apt-get install sqlite3; .ci/run installs it): ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The member of the one removal in the audit file. */
const MEMBER = 'b2c3d4e5-0000-4000-8000-000000000001';

let rig: SyncRig;
let reader: Db;
let audit: Db;
/** The docs' example client_user_id (the stand-in's first user, seed 11): one the second sync updates. */
const SAMPLE = 'cu_ed376cd4';
beforeAll(async () => {
  rig = await createSyncRig({ users: 1_500, legacyRecords: 0.2 });
  expect((await rig.sync()).status).toBe('succeeded');
  // A day of life upstream: sources connected and disconnected, users added and deleted.
  const directory = rig.standIn.directory;
  const page = directory.page(0, 40);
  expect(page[0]?.client_user_id, "the docs' example client_user_id is the fixture's first user").toBe(SAMPLE);
  const listed = page.map((u) => String(u.user_id));
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
    .prepare<[string], number>(
      `SELECT count(*) FROM user_changes AS c JOIN users AS u USING (user_id) WHERE c.change = 'updated' AND u.client_user_id = ?`,
    )
    .pluck()
    .get(SAMPLE);
  expect(updated, `the second sync updated ${SAMPLE}`).toBeGreaterThan(0);
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

const FILES = ['docs/sql.md', 'db/SCHEMA.md', 'docs/followers.md'];

describe.each(FILES)('the SQL examples in %s', (file) => {
  const recipes = sqlRecipes(file);
  it('are found on the page (none found would pass every check below)', () => expect(recipes.length).toBeGreaterThan(0));
  it.each(recipes.map((r) => [r.statement.split('\n')[0] ?? r.statement, r]))('%s', (_first, { statement, commands }) => {
    const inAudit = AUDIT_TABLE.test(statement);
    // Strings aside, no `?`: the CLI would leave it unbound and print nothing.
    expect(statement.replace(/'(?:[^']|'')*'/g, "''"), 'a parameter the sqlite3 CLI is given').not.toContain('?');
    const parameters = parametersOf(commands);
    const answer = (sql: string): unknown[] => {
      const stmt = (inAudit ? audit : reader).prepare(sql);
      expect(stmt.reader, 'SQL shown to readers only reads').toBe(true);
      const used = Object.fromEntries(Object.entries(parameters).filter(([name]) => new RegExp(`:${name}\\b`).test(sql)));
      return Object.keys(used).length === 0 ? stmt.all() : stmt.all(used);
    };
    const printed = (sql: string): string => {
      const r = sqlite3(inAudit ? auditPathFor(rig.dbPath) : rig.dbPath, `${[...commands, `${sql};`].join('\n')}\n`);
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      return r.stdout;
    };
    const adapted = ADAPTED.find(({ pattern }) => pattern.test(statement));
    const rows = answer(statement);
    const output = printed(statement);
    if (adapted === undefined) {
      expect(rows.length).toBeGreaterThan(0);
      expect(output, 'the sqlite3 CLI prints rows').not.toBe('');
      return;
    }
    const changed = adapted.change(statement);
    expect(changed).not.toBe(statement);
    expect(answer(changed).length, adapted.why).toBeGreaterThan(0);
    expect(printed(changed), adapted.why).not.toBe('');
  });
  it.each(sqlBlocks(file).map((b, i) => [i + 1, b]))('block %i runs whole in the sqlite3 CLI as written', (_n, block) => {
    const inAudit = recipesOf(block).every((r) => AUDIT_TABLE.test(r.statement));
    const r = sqlite3(inAudit ? auditPathFor(rig.dbPath) : rig.dbPath, block);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).not.toBe('');
  });
});

describe("the docs' example values", () => {
  const given = FILES.flatMap((file) => sqlRecipes(file)).flatMap((r) => Object.entries(parametersOf(r.commands)));
  it("are the fixture's: the client_user_id of a user the second sync updated, the member of the removal", () => {
    expect(given.length).toBeGreaterThan(0);
    for (const [name, value] of given) expect(value, name).toBe(name === 'member_id' ? MEMBER : SAMPLE);
  });
});

describe('the adapted statements', () => {
  const all = FILES.flatMap((file) => sqlStatements(file));
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
