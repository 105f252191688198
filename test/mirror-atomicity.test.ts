/**
 * A reader in another process, polling while publishes run, must only ever
 * see complete snapshots: every active user from one and the same run, the
 * full count, and that run's sources.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import type { StagedRecord } from '../db/mirrored-user.js';
import { eventually } from './support/eventually.js';
import { pageOf, range, ROOT, staged, tempDir, wireUser, type TempDir } from './support/mirror-fixtures.js';

const N = 3_000;
const SHIFT = 1_000;
const GENERATIONS = 6;

let dir: TempDir;
let db: Db;
beforeEach(() => {
  dir = tempDir();
  db = openMirror(dir.file('mirror.db'));
});
afterEach(() => {
  db.close();
  dir.remove();
});

/** Generation g lists users [g*SHIFT, g*SHIFT + N), all tagged g, all with the source `src-g`. */
function generation(g: number): StagedRecord[][] {
  const src = { slug: `src-${g}`, name: `Source ${g}`, logo: 'https://l/x.png' };
  const records = range(g * SHIFT, g * SHIFT + N).map((n) =>
    staged(wireUser(n, { gen: g, connected_sources: [{ created_on: '2026-01-01T00:00:00Z', provider: src, source: src }] })),
  );
  return Array.from({ length: N / 500 }, (_, p) => records.slice(p * 500, p * 500 + 500));
}

const READER = `
import Database from ${JSON.stringify(pathToFileURL(join(ROOT, 'node_modules/better-sqlite3/lib/index.js')).href)};
const db = new Database(process.argv[2], { readonly: true, fileMustExist: true });
db.pragma('busy_timeout = 5000');
const users = db.prepare("SELECT count(*) AS n, count(DISTINCT raw ->> '$.gen') AS gens, min(raw ->> '$.gen') AS gen FROM active_users");
const sources = db.prepare("SELECT count(*) AS n, count(DISTINCT cs.slug) AS slugs, min(cs.slug) AS slug FROM connected_sources cs JOIN active_users u USING (user_id)");
const run = db.prepare("SELECT id, created + updated AS written FROM sync_runs WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT 1");
const snapshot = db.transaction(() => ({ u: users.get(), s: sources.get(), r: run.get() }));
let stop = false, reads = 0;
const violations = [], gens = new Set();
process.stdin.on('data', () => {}).on('end', () => { stop = true; });
function loop() {
  const end = Date.now() + 20;
  while (!stop && Date.now() < end) {
    const { u, s, r } = snapshot();
    reads++;
    gens.add(u.gen);
    const problems = [];
    if (u.n !== ${N}) problems.push('active ' + u.n);
    if (u.gens !== 1) problems.push('generations ' + u.gens);
    if (s.n !== ${N} || s.slugs !== 1 || s.slug !== 'src-' + u.gen) problems.push('sources ' + JSON.stringify(s));
    if (r === undefined || (u.gen > 0 && r.written !== ${N})) problems.push('run ' + JSON.stringify(r));
    if (problems.length > 0 && violations.length < 10) violations.push(problems.join(', '));
    if (reads === 1) process.stdout.write('ready\\n');
  }
  if (stop) process.stdout.write(JSON.stringify({ reads, violations, gens: [...gens] }) + '\\n');
  else setImmediate(loop);
}
loop();
`;

it('a reader process never sees a half-published run', async () => {
  const writer = sqliteRunWriter(db);
  const publish = (g: number) => {
    const runId = writer.beginRun(N);
    for (const page of generation(g)) writer.stagePage(runId, pageOf(page), 0);
    const r = writer.publish(runId, { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) });
    writer.finishRun(runId, { status: 'succeeded', pages: N / 500, usersSeen: N, ...r });
    return r;
  };
  publish(0);

  const script = dir.file('reader.mjs');
  writeFileSync(script, READER);
  const child = spawn(process.execPath, [script, dir.file('mirror.db')], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  await eventually(() => out.includes('ready'), 60_000, 'the reader process', 10);

  for (let g = 1; g < GENERATIONS; g++) {
    expect(publish(g)).toMatchObject({ created: SHIFT, updated: N - SHIFT, deleted: SHIFT });
    // Let the reader poll between publishes too.
    await new Promise((r) => setTimeout(r, 30));
  }
  child.stdin.end();
  expect(await exited).toBe(0);
  const report = JSON.parse(out.trim().split('\n').pop() ?? '{}') as { reads: number; violations: string[]; gens: number[] };
  expect(report.violations).toEqual([]);
  expect(report.reads).toBeGreaterThan(GENERATIONS);
  // It did observe the mirror moving, not one frozen snapshot.
  expect(report.gens.length).toBeGreaterThan(1);
});
