/**
 * kill -9 of a sync process, mid-scan and mid-publish: the mirror must
 * open, pass integrity_check, hold one complete snapshot (the previous one,
 * or the new one if the publish had committed), and the next run must succeed.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { ensureBuilt, pageOf, range, ROOT, stagedUsers, tempDir, type TempDir } from './support/mirror-fixtures.js';

const N = 6_000;
const dist = (p: string) => JSON.stringify(pathToFileURL(join(ROOT, 'dist', p)).href);

/**
 * Runs sync generation 1 (every user changed, a quarter new), announcing
 * each phase on stdout so the parent can aim its kill. The writer holds the
 * run's write transaction open from beginRun on, with every page written
 * into the mirror's tables as it is staged: mode 'scan' pauses between pages
 * as a scan waiting on the network does, so the kill lands mid-scan.
 */
const CHILD = `
import { checkpointMirror, openMirror } from ${dist('db/open.js')};
import { sqliteRunWriter } from ${dist('src/sync/run-writer.js')};
import { scanRecordSpans } from ${dist('src/service/page-spans.js')};
const [path, mode] = process.argv.slice(2);
const db = openMirror(path);
const writer = sqliteRunWriter(db);
const rec = (n, g) => ({
  user_id: '00000000-0000-4000-8000-' + n.toString(16).padStart(12, '0'),
  team_id: '6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b',
  client_user_id: 'client-' + n,
  connected_sources: [{ created_on: '2026-01-01T00:00:00Z', provider: { slug: 'src-' + g, name: 'S', logo: 'l' } }],
  gen: g,
});
const pages = [];
for (let p = ${N / 4}; p < ${N + N / 4}; p += 500) {
  const body = Buffer.from('{"users":[' + Array.from({ length: 500 }, (_, i) => JSON.stringify(rec(p + i, 1))).join(',') + '],"total":0,"offset":0,"limit":500}');
  pages.push({ body, spans: scanRecordSpans(body).spans });
}
const say = (s) => process.stdout.write(s + '\\n');
for (;;) {
  const runId = writer.beginRun(${N});
  for (const [i, page] of pages.entries()) {
    writer.stagePage(runId, page, 0);
    if (i === 2) say('staging');
    if (mode === 'scan') await new Promise((r) => setTimeout(r, 5));
  }
  if (mode === 'staging' || mode === 'scan') { say('staged'); setInterval(() => {}, 1000); break; }
  say('publishing');
  writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
  writer.finishRun(runId, { status: 'succeeded', pages: pages.length, usersSeen: ${N} });
  say('published');
  // The run is visible at its COMMIT; the WAL is copied into the file after (src/sync/exclusive-run.ts).
  if (mode === 'after-publish') { setInterval(() => {}, 1000); break; }
  if (mode === 'checkpoint') { say('checkpointing'); checkpointMirror(db); say('checkpointed'); setInterval(() => {}, 1000); }
  break;
}
`;

let dir: TempDir;
let path: string;
beforeAll(() => ensureBuilt(), 180_000);
beforeEach(() => {
  dir = tempDir();
  path = dir.file('mirror.db');
  const db = openMirror(path);
  const writer = sqliteRunWriter(db);
  const runId = writer.beginRun(N);
  for (let p = 0; p < N; p += 500) {
    writer.stagePage(runId, pageOf(stagedUsers(range(p, p + 500), () => ({ gen: 0 }))), 0);
  }
  writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
  writer.finishRun(runId, { status: 'succeeded', pages: N / 500, usersSeen: N });
  db.close();
  writeFileSync(dir.file('child.mjs'), CHILD);
});
afterEach(() => dir.remove());

function snapshot(db: Db) {
  return {
    users: db.prepare('SELECT * FROM users ORDER BY user_id').all(),
    sources: db.prepare('SELECT * FROM connected_sources ORDER BY user_id, slug').all(),
    changes: db.prepare('SELECT count(*) FROM user_changes').pluck().get(),
    versions: db.prepare('SELECT * FROM user_versions ORDER BY id').all(),
    connections: db.prepare('SELECT * FROM source_connections ORDER BY id').all(),
    history: db.prepare('SELECT * FROM history_state').all(),
  };
}

/**
 * History holds exactly the published generations: as of each publish, the
 * versions then current are N users of that run's generation with the
 * sources its records list; every version starts and ends at a publish; the
 * open ones are the active users', their record in users.
 */
function expectHistory(db: Db, gens: readonly number[]): void {
  const published = db.prepare(`SELECT published_at FROM sync_runs WHERE published_at IS NOT NULL ORDER BY id`).pluck().all() as string[];
  expect(published).toHaveLength(gens.length);
  gens.forEach((gen, i) => {
    const at = published[i];
    const current = db
      .prepare(
        `SELECT h.raw ->> '$.gen' AS gen, count(*) AS n FROM user_history AS h
         WHERE h.valid_from <= ? AND (h.valid_to IS NULL OR h.valid_to > ?) GROUP BY 1`,
      )
      .all(at, at);
    expect(current).toEqual([{ gen, n: N }]);
    const sources = db
      .prepare(
        `SELECT c.slug, count(*) AS n FROM source_history AS c
         WHERE c.connected_at <= ? AND (c.disconnected_at IS NULL OR c.disconnected_at > ?) GROUP BY 1`,
      )
      .all(at, at);
    // The child's generation 1 lists `src-1`; the fixture's records `oura`.
    expect(sources).toEqual([{ slug: gen === 1 ? 'src-1' : 'oura', n: N }]);
  });
  const times = new Set<unknown>([...published, null]);
  for (const v of db.prepare(`SELECT valid_from, valid_to FROM user_history`).all() as Array<{
    valid_from: string;
    valid_to: string | null;
  }>) {
    expect(times.has(v.valid_from) && times.has(v.valid_to)).toBe(true);
  }
  expect(
    db
      .prepare(
        `SELECT count(*) AS open, sum(u.deleted_at IS NULL AND h.raw = u.raw) AS of_active
         FROM user_history AS h JOIN users AS u USING (user_id) WHERE h.valid_to IS NULL`,
      )
      .get(),
  ).toEqual({ open: N, of_active: N });
  // An open version's row keeps no copy of the record: it is the users row's.
  expect(db.prepare(`SELECT count(*) FROM user_versions WHERE valid_to IS NULL AND raw IS NOT NULL`).pluck().get()).toBe(0);
}

/** Starts the child and SIGKILLs it `delayMs` after it prints `cue`. */
async function killAfter(mode: string, cue: string, delayMs: number, file = path): Promise<string> {
  const child = spawn(process.execPath, [dir.file('child.mjs'), file, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  await new Promise<void>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      if (out.includes(cue)) resolve();
    });
    child.on('exit', () => reject(new Error(`child exited before "${cue}": ${out}`)));
  });
  await new Promise((r) => setTimeout(r, delayMs));
  child.kill('SIGKILL');
  await exited;
  return out;
}

function schema(db: Db): unknown[] {
  return db.prepare(`SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name`).all();
}

function checkRecovers(db: Db): void {
  expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
  expect(db.pragma('foreign_key_check')).toEqual([]);
  const writer = sqliteRunWriter(db);
  const runId = writer.beginRun(N);
  expect(db.prepare(`SELECT status, error FROM sync_runs WHERE id < ? ORDER BY id DESC LIMIT 1`).get(runId)).toMatchObject({
    status: 'failed',
    error: expect.stringMatching(/^interrupted/),
  });
  for (let p = 0; p < N; p += 500) writer.stagePage(runId, pageOf(stagedUsers(range(p, p + 500), () => ({ gen: 2 }))), 0);
  writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
  writer.finishRun(runId, { status: 'succeeded', pages: N / 500, usersSeen: N });
  expect(db.prepare(`SELECT count(*) FROM active_users WHERE raw ->> '$.gen' = 2`).pluck().get()).toBe(N);
  expect(db.prepare(`SELECT count(*) FROM active_users`).pluck().get()).toBe(N);
  // The killed run left no trace in history: the next one continues it.
  const gens = db.prepare(`SELECT DISTINCT raw ->> '$.gen' FROM user_history ORDER BY valid_from`).pluck().all() as number[];
  expectHistory(db, gens);
  expect(gens.at(-1)).toBe(2);
}

describe('kill -9', () => {
  /** Kills the child as `killAfter` does; the mirror must be exactly the snapshot before it, and recover. */
  async function expectPreviousSnapshot(mode: string, cue: string, delayMs: number): Promise<string> {
    const before = (() => {
      const db = openMirror(path, { readonly: true });
      const s = snapshot(db);
      db.close();
      return s;
    })();
    const out = await killAfter(mode, cue, delayMs);
    const db = openMirror(path);
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(snapshot(db)).toEqual(before);
      checkRecovers(db);
    } finally {
      db.close();
    }
    return out;
  }

  it('with the run open and every page written, before publish: the previous snapshot, and the next run succeeds', async () => {
    await expectPreviousSnapshot('staging', 'staging', 50);
  });

  it.each([0, 25, 60])(
    'mid-scan (kill %i ms after page 3), pages written into the open transaction: the previous snapshot',
    async (delay) => {
      const out = await expectPreviousSnapshot('scan', 'staging', delay);
      expect(out).not.toContain('staged');
    },
  );

  it('mid-scan of a first sync (secondary indexes dropped in the open transaction): an empty mirror with its schema', async () => {
    const empty = dir.file('empty.db');
    const fresh = openMirror(empty);
    const before = schema(fresh);
    fresh.close();
    await killAfter('scan', 'staging', 25, empty);
    const db = openMirror(empty);
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(schema(db)).toEqual(before);
      expect(db.prepare('SELECT count(*) FROM users').pluck().get()).toBe(0);
      expect(db.prepare('SELECT count(*) FROM connected_sources').pluck().get()).toBe(0);
      checkRecovers(db);
      expect(schema(db)).toEqual(before);
    } finally {
      db.close();
    }
  });

  it.each([
    ['after publish, before the WAL is checkpointed', 'after-publish', 'published', 20],
    ['during the checkpoint after publish', 'checkpoint', 'checkpointing', 0],
    ['during the checkpoint after publish (later)', 'checkpoint', 'checkpointing', 15],
  ])('%s: the new snapshot, whole', async (_what, mode, cue, delay) => {
    await killAfter(mode, cue, delay);
    const db = openMirror(path);
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(db.prepare(`SELECT raw ->> '$.gen' AS gen, count(*) AS n FROM active_users GROUP BY 1`).all()).toEqual([{ gen: 1, n: N }]);
      expect(db.prepare(`SELECT DISTINCT slug FROM connected_sources JOIN active_users USING (user_id)`).pluck().all()).toEqual(['src-1']);
      expect(db.prepare(`SELECT status FROM sync_runs ORDER BY id DESC LIMIT 1`).pluck().get()).toBe('succeeded');
      expectHistory(db, [0, 1]);
    } finally {
      db.close();
    }
  });

  it.each([0, 40, 120, 400])('during publish (kill %i ms after it starts): old or new snapshot, never a mix', async (delay) => {
    const out = await killAfter('publish', 'publishing', delay);
    const db = openMirror(path);
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      const gens = db.prepare(`SELECT raw ->> '$.gen' AS gen, count(*) AS n FROM active_users GROUP BY 1`).all();
      const published = db.prepare(`SELECT count(*) FROM sync_runs WHERE published_at IS NOT NULL`).pluck().get();
      if (published === 2) expect(gens).toEqual([{ gen: 1, n: N }]);
      else expect(gens).toEqual([{ gen: 0, n: N }]);
      const slugs = db.prepare(`SELECT DISTINCT slug FROM connected_sources JOIN active_users USING (user_id)`).pluck().all();
      expect(slugs).toEqual([published === 2 ? 'src-1' : 'oura']);
      expectHistory(db, published === 2 ? [0, 1] : [0]);
      if (!out.includes('published')) checkRecovers(db);
    } finally {
      db.close();
    }
  });
});
