/**
 * `user-mirror resolve` as a user runs it: the built CLI in a child process,
 * judged by exit code, stdout and stderr.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { DEFAULT_BUSY_TIMEOUT_MS, openMirror } from '../db/open.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { ensureBuilt, pageOf, ROOT, stagedUsers, tempDir, wireUser, type TempDir, type WireRecord } from './support/mirror-fixtures.js';

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(args: string[], env: Record<string, string>): Promise<Result> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(ROOT, 'dist/cli.js'), 'resolve', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 30_000 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

let dir: TempDir;
let mirror: string;

beforeAll(() => ensureBuilt(), 180_000);
beforeEach(() => {
  dir = tempDir();
  mirror = dir.file('mirror.db');
  const db = openMirror(mirror);
  const writer = sqliteRunWriter(db);
  for (const ns of [
    [1, 2, 3],
    [2, 3],
  ]) {
    const runId = writer.beginRun();
    writer.stagePage(runId, pageOf(stagedUsers(ns)), 0);
    writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
    writer.finishRun(runId, { status: 'succeeded', pages: 1, usersSeen: ns.length });
  }
  db.close();
});
afterEach(() => dir.remove());

describe('offline', () => {
  it('prints the User as pretty JSON and exits 0', async () => {
    const r = await cli(['client-2'], { MIRROR_DB: mirror });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual(wireUser(2));
    expect(r.stdout).toContain('\n  "user_id"');
  });

  it('not found: exit 3, nothing on stdout, one line on stderr', async () => {
    const r = await cli(['nobody'], { MIRROR_DB: mirror });
    expect(r.code).toBe(3);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/"nobody" not found in the mirror/);
  });

  it('not found with --json: exit 3, and one JSON line on stdout saying so', async () => {
    const r = await cli(['nobody', '--json'], { MIRROR_DB: mirror });
    expect(r.code).toBe(3);
    expect(r.stdout.endsWith('\n')).toBe(true);
    expect(JSON.parse(r.stdout)).toEqual({ found: false, source: 'mirror', client_user_id: 'nobody' });
    expect(r.stderr).toMatch(/"nobody" not found in the mirror/);
  });

  it('a deleted user is not found unless --include-deleted, which flags it', async () => {
    expect((await cli(['client-1'], { MIRROR_DB: mirror })).code).toBe(3);
    const r = await cli(['client-1', '--include-deleted'], { MIRROR_DB: mirror });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(wireUser(1));
    expect(r.stderr).toMatch(/deleted upstream/);
  });

  it('--json prints one line with the verdict and the user', async () => {
    const r = await cli(['client-1', '--include-deleted', '--json'], { MIRROR_DB: mirror });
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ found: true, source: 'mirror', deleted_at: expect.any(String), user: wireUser(1) });
  });

  it.each([
    [[], /exactly one client_user_id/],
    [['a', 'b'], /exactly one client_user_id/],
    [['a', '--nope'], /Unknown option '--nope'/],
    [['a', '--team', 'not-a-uuid'], /--team: must be a team UUID/],
  ])('usage error %j: exit 2', async (args, message) => {
    const r = await cli(args, { MIRROR_DB: mirror });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('no mirror file: exit 1 with the reason', async () => {
    const r = await cli(['client-2'], { MIRROR_DB: dir.file('nope.db') });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no mirror database at .*nope\.db/);
  });
});

describe('--online', () => {
  let standIn: StandIn;
  let env: Record<string, string>;
  let known: WireRecord;

  beforeAll(async () => {
    standIn = await startStandIn({ users: 10, seed: 11 });
    env = { SERVICE_BASE_URL: standIn.baseUrl, SERVICE_API_KEY: standIn.apiKey, SERVICE_API_KEY_HEADER: standIn.apiKeyHeader };
    const first = standIn.directory.page(0, 1)[0];
    if (first === undefined) throw new Error('the stand-in has no users');
    known = first;
  });
  afterAll(() => standIn.close());

  it('asks the service, prints the user and writes it into the mirror', async () => {
    const clientUserId = String(known.client_user_id);
    expect((await cli([clientUserId], { MIRROR_DB: mirror })).code).toBe(3);
    const r = await cli([clientUserId, '--online', '--json'], { ...env, MIRROR_DB: mirror });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ found: true, source: 'service', user: { user_id: known.user_id } });
    const offline = await cli([clientUserId], { MIRROR_DB: mirror });
    expect(offline.code).toBe(0);
    expect(JSON.parse(offline.stdout)).toMatchObject({ user_id: known.user_id, client_user_id: clientUserId });
    const db = openMirror(mirror, { readonly: true });
    try {
      expect(db.prepare(`SELECT change FROM user_changes WHERE run_id IS NULL AND user_id = ?`).pluck().all(known.user_id)).toEqual([
        'created',
      ]);
    } finally {
      db.close();
    }
  });

  it('stores a record whose optional fields break their rule, with its warnings, and prints it as received', async () => {
    const odd = wireUser(40, { ingestion_start: 'ingestion_start', ingestion_end: 'ingestion_end' });
    const service = await startStandIn({ users: 0, records: [odd] });
    try {
      const oddEnv = { SERVICE_BASE_URL: service.baseUrl, SERVICE_API_KEY: service.apiKey, SERVICE_API_KEY_HEADER: service.apiKeyHeader };
      const r = await cli(['client-40', '--online', '--json'], { ...oddEnv, MIRROR_DB: mirror });
      expect(r.code).toBe(0);
      const out = JSON.parse(r.stdout) as { user: unknown; warnings: Array<{ field: string }> };
      expect(out.user).toEqual(odd);
      expect(out.warnings.map((w) => w.field)).toEqual(['ingestion_start', 'ingestion_end']);
      const db = openMirror(mirror, { readonly: true });
      try {
        expect(db.prepare('SELECT ingestion_start, ingestion_end, raw FROM users WHERE user_id = ?').get(odd.user_id)).toEqual({
          ingestion_start: null,
          ingestion_end: null,
          raw: JSON.stringify(odd),
        });
        expect(db.prepare('SELECT field FROM field_warnings WHERE user_id = ? ORDER BY field').pluck().all(odd.user_id)).toEqual([
          'ingestion_end',
          'ingestion_start',
        ]);
      } finally {
        db.close();
      }
    } finally {
      await service.close();
    }
  });

  it('a 404 is not found (exit 3) and deletes nothing from the mirror', async () => {
    const r = await cli(['client-2', '--online', '--json'], { ...env, MIRROR_DB: mirror });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/not found in the service/);
    expect(JSON.parse(r.stdout)).toEqual({ found: false, source: 'service', client_user_id: 'client-2' });
    expect((await cli(['client-2'], { MIRROR_DB: mirror })).code).toBe(0);
  });

  it('missing service configuration is a configuration error: exit 2, names the variable', async () => {
    const r = await cli(['client-2', '--online'], { MIRROR_DB: mirror });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/SERVICE_BASE_URL: is required/);
    expect(r.stderr).toMatch(/SERVICE_API_KEY: is required/);
  });

  /** Another connection holding the mirror's write lock, as a sync's publish does, for `ms`. */
  function publishFor(ms: number): Promise<void> {
    const holder = new Database(mirror);
    holder.exec('BEGIN IMMEDIATE');
    return new Promise((resolve) =>
      setTimeout(() => {
        holder.exec('ROLLBACK');
        holder.close();
        resolve();
      }, ms),
    );
  }

  function storedByResolve(userId: string): string[] {
    const db = openMirror(mirror, { readonly: true });
    try {
      return db.prepare(`SELECT change FROM user_changes WHERE run_id IS NULL AND user_id = ?`).pluck().all(userId) as string[];
    } finally {
      db.close();
    }
  }

  it('waits out a publish longer than the usual busy timeout, then stores the answer', async () => {
    const clientUserId = String(known.client_user_id);
    const publish = publishFor(DEFAULT_BUSY_TIMEOUT_MS + 2_000);
    const r = await cli([clientUserId, '--online', '--json'], { ...env, MIRROR_DB: mirror });
    await publish;
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toMatchObject({ found: true, source: 'service', user: { user_id: known.user_id } });
    expect(storedByResolve(String(known.user_id))).toEqual(['created']);
  });

  it('a publish that outlasts RESOLVE_WRITE_WAIT_MS: the answer is printed, a warning says it was not stored, exit 0', async () => {
    const clientUserId = String(known.client_user_id);
    // Held until the command has ended, however long a busy machine takes to start it.
    const holder = new Database(mirror);
    holder.exec('BEGIN IMMEDIATE');
    let r;
    try {
      r = await cli([clientUserId, '--online', '--json'], { ...env, MIRROR_DB: mirror, RESOLVE_WRITE_WAIT_MS: '300' });
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ found: true, source: 'service', user: { user_id: known.user_id } });
    expect(r.stderr).toMatch(/warning: the mirror was not refreshed.*RESOLVE_WRITE_WAIT_MS/);
    expect(r.stderr).not.toMatch(/database is locked/);
    expect(storedByResolve(String(known.user_id))).toEqual([]);
  });

  it('a wrong key is a failure (exit 1), not a "not found"', async () => {
    const r = await cli(['client-2', '--online'], { ...env, SERVICE_API_KEY: 'sk_wrong', MIRROR_DB: mirror });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/HTTP 401/);
  });
});
