/**
 * `npm run bench:resolve`: offline resolve throughput.
 *
 * Builds a mirror of BENCH_RESOLVE_USERS (default 200,000) users, a tenth of
 * them deleted, through the sync's RunWriter, then times resolveOffline in this
 * process (goal: >= 100,000 lookups/s for hits) and the `user-mirror resolve`
 * command as a fresh process per lookup (when dist/cli.js is built).
 *
 * Prints a markdown table. Every scenario checks its answers, so a fast
 * wrong answer cannot pass.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openMirror } from '../db/open.js';
import type { StagedRecord } from '../db/mirrored-user.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { UserSchema } from '../src/service/schemas.js';
import { closeResolvers, resolveOffline, resolveOfflineMany, type ResolveOptions } from '../src/replica/resolve.js';
import { pageOf } from '../test/support/mirror-fixtures.js';

const USERS = Number(process.env.BENCH_RESOLVE_USERS ?? 200_000);
const LOOKUPS = Number(process.env.BENCH_RESOLVE_LOOKUPS ?? 300_000);
const CLI_RUNS = Number(process.env.BENCH_RESOLVE_CLI_RUNS ?? 10);
const TEAM = '6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Row {
  scenario: string;
  lookups: number;
  perSecond: number;
  microsPerLookup: number;
  goal: string;
}

function record(n: number): Record<string, unknown> {
  const provider = { logo: `https://cdn.example/logos/${n % 7}.png`, name: `Source ${n % 7}`, slug: `source-${n % 7}` };
  return {
    user_id: `00000000-0000-4000-8000-${n.toString(16).padStart(12, '0')}`,
    team_id: TEAM,
    client_user_id: `client-${n}`,
    created_on: '2022-08-04T12:42:45.596792+00:00',
    connected_sources: [{ created_on: '2026-01-12T12:39:40Z', provider, source: provider }],
    fallback_time_zone: { id: 'Europe/London', source_slug: 'manual', updated_at: '2026-01-12T12:39:40Z' },
    fallback_birth_date: null,
    ingestion_start: '2022-01-01',
    ingestion_end: null,
  };
}

function buildMirror(path: string): void {
  const db = openMirror(path);
  const writer = sqliteRunWriter(db);
  const runPages = (from: number, to: number, sweep: boolean) => {
    const runId = writer.beginRun();
    for (let p = from; p < to; p += 500) {
      const page: StagedRecord[] = [];
      for (let n = p; n < Math.min(to, p + 500); n++) {
        const raw = record(n);
        page.push({ user: UserSchema.parse(raw), rawJson: JSON.stringify(raw), warnings: [] });
      }
      writer.stagePage(runId, pageOf(page), 0);
    }
    writer.publish(
      runId,
      sweep
        ? { deletionsChecked: true, deletions: writer.pickUnseenActive(runId, Infinity).map((u) => u.user_id) }
        : { deletionsChecked: false, deletions: [] },
    );
    writer.finishRun(runId, { status: 'succeeded', pages: Math.ceil((to - from) / 500), usersSeen: to - from });
  };
  runPages(0, USERS, true);
  // The first tenth goes missing upstream: deleted in the mirror.
  runPages(USERS / 10, USERS, true);
  db.close();
}

/** Deterministic spread over the id space, so the page cache is not flattered by one hot row. */
function clientIds(count: number, from: number, to: number): string[] {
  const span = to - from;
  return Array.from({ length: count }, (_, i) => `client-${from + ((i * 7919) % span)}`);
}

function time(
  scenario: string,
  path: string,
  ids: readonly string[],
  options: ResolveOptions,
  expectFound: boolean,
  goal = '',
  readUser = false,
): Row {
  resolveOffline(path, ids[0] ?? '', options); // open + prepare outside the clock
  const started = process.hrtime.bigint();
  let found = 0;
  for (const id of ids) {
    const entry = resolveOffline(path, id, options);
    if (entry === undefined) continue;
    // Reading `user` parses the record; forwarding `raw` (a replica, a cache) does not.
    if (readUser && entry.user.client_user_id !== id) throw new Error(`${scenario}: wrong user for ${id}`);
    if (!readUser && entry.raw.length === 0) throw new Error(`${scenario}: empty record for ${id}`);
    found++;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (found !== (expectFound ? ids.length : 0)) throw new Error(`${scenario}: ${found} of ${ids.length} found`);
  return { scenario, lookups: ids.length, perSecond: ids.length / seconds, microsPerLookup: (seconds * 1e6) / ids.length, goal };
}

function timeBatch(path: string, ids: readonly string[], batch: number): Row {
  const started = process.hrtime.bigint();
  let found = 0;
  let distinct = 0;
  for (let i = 0; i < ids.length; i += batch) {
    const ask = ids.slice(i, i + batch);
    found += resolveOfflineMany(path, ask).size;
    distinct += new Set(ask).size;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (found !== distinct) throw new Error(`batch: ${found} of ${distinct} distinct ids found`);
  return {
    scenario: `hit, batches of ${batch} (resolveOfflineMany, one snapshot each)`,
    lookups: ids.length,
    perSecond: ids.length / seconds,
    microsPerLookup: (seconds * 1e6) / ids.length,
    goal: '',
  };
}

function timeCli(path: string): Row | undefined {
  const cli = join(ROOT, 'dist/cli.js');
  if (!existsSync(cli) || CLI_RUNS <= 0) return undefined;
  const ids = clientIds(CLI_RUNS, USERS / 10, USERS);
  const started = process.hrtime.bigint();
  for (const id of ids) {
    const out = execFileSync(process.execPath, [cli, 'resolve', id, '--json'], { env: { ...process.env, MIRROR_DB: path } });
    if (!out.toString().includes(`"client_user_id":"${id}"`)) throw new Error(`cli: wrong answer for ${id}`);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return {
    scenario: '`user-mirror resolve` process per lookup',
    lookups: ids.length,
    perSecond: ids.length / seconds,
    microsPerLookup: (seconds * 1e6) / ids.length,
    goal: '',
  };
}

function main(): void {
  const dir = mkdtempSync(join(tmpdir(), 'bench-resolve-'));
  const path = join(dir, 'mirror.db');
  try {
    const built = process.hrtime.bigint();
    buildMirror(path);
    process.stderr.write(`built a mirror of ${USERS} users in ${(Number(process.hrtime.bigint() - built) / 1e9).toFixed(1)} s\n`);
    const active = clientIds(LOOKUPS, USERS / 10, USERS);
    const deleted = clientIds(LOOKUPS / 10, 0, USERS / 10);
    const missing = Array.from({ length: LOOKUPS / 10 }, (_, i) => `nobody-${i}`);
    // One untimed pass, so that no scenario pays for reading the file into the page cache first.
    for (const id of active) resolveOffline(path, id);
    const rows: Row[] = [
      time('hit, active user (raw record)', path, active, {}, true, '>= 100,000/s'),
      time('hit, active user, record parsed (`.user`)', path, active, {}, true, '', true),
      timeBatch(path, active, 100),
      time('hit, active user, team given', path, active, { teamId: TEAM }, true),
      time('hit, deleted user, --include-deleted', path, deleted, { includeDeleted: true }, true),
      time('miss (deleted, not included)', path, deleted, {}, false),
      time('miss (unknown id)', path, missing, { includeDeleted: true }, false),
      time('hit, re-validated with the wire schema', path, active.slice(0, LOOKUPS / 10), { validate: true }, true),
    ];
    closeResolvers();
    const cli = timeCli(path);
    if (cli !== undefined) rows.push(cli);
    print(rows);
  } finally {
    closeResolvers();
    rmSync(dir, { recursive: true, force: true });
  }
}

function print(rows: readonly Row[]): void {
  const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const lines = [
    `offline resolve, mirror of ${fmt(USERS)} users (node ${process.version})`,
    '',
    '| scenario | lookups | lookups/s | µs/lookup | goal |',
    '|---|---:|---:|---:|---|',
    ...rows.map((r) => `| ${r.scenario} | ${fmt(r.lookups)} | ${fmt(r.perSecond)} | ${fmt(r.microsPerLookup, 2)} | ${r.goal} |`),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main();
