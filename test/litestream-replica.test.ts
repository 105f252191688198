/**
 * A continuous replica with the real Litestream (0.3.13, the devDependency
 * @flydotio/litestream-linux-x64) and the shipped contrib/litestream/litestream.yml,
 * replicating to a file replica while `sync --once` runs again and again
 * against the stand-in with churn and chosen changes (MIRROR_CHECKPOINTS=external).
 * Then the host's files are lost (Litestream killed -9, the mirror's folder
 * removed), `litestream restore` writes the mirror to a new path, and
 * `status`, `resolve --as-of` at every noted time, `history` and `changes`
 * must answer there exactly as they did on the lost mirror; installed with
 * `user-mirror restore`, it keeps the same past and syncs on. The drill of
 * docs/backup.md ("Continuous replica with Litestream"), on one machine.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { openMirror } from '../db/open.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { ROOT } from './support/mirror-fixtures.js';
import { mirrorFingerprint } from './support/sync-rig.js';

const LITESTREAM = join(ROOT, 'node_modules', '@flydotio', 'litestream-linux-x64', 'litestream');
const CONFIG = join(ROOT, 'contrib', 'litestream', 'litestream.yml');
const HAVE_LITESTREAM = existsSync(LITESTREAM);
const run = promisify(execFile);

const suite = HAVE_LITESTREAM ? describe : describe.skip;
const TITLE = HAVE_LITESTREAM
  ? 'a Litestream replica restored after the host lost its files'
  : 'a Litestream replica — NOT RUN: no Litestream binary (the devDependency @flydotio/litestream-linux-x64 is for Linux x64 only)';

const tick = () => new Promise((r) => setTimeout(r, 20));

/** What the CLI answered on one mirror, to be compared with the same questions on another. */
interface Answers {
  status: { code: number | null; mirror: Record<string, unknown>; changeFeed: unknown };
  asOf: Array<{ at: string; client: string; code: number | null; stdout: string }>;
  history: Array<{ client: string; code: number | null; stdout: string }>;
  changes: { code: number | null; stdout: string };
  changesAfter: { code: number | null; stdout: string };
}

let standIn: StandIn;
let dir: string;
let mirrorDir: string;
let mirrorPath: string;
let replicaDir: string;
let litestream: ChildProcess | undefined;
let litestreamLog = '';
const moments: string[] = [];
const clients: string[] = [];
let before: Answers;
let lagMs = 0;

function cliEnv(dbPath: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: dbPath,
    MIRROR_CHECKPOINTS: 'external',
    // A port nothing listens on: status reports Redis unreachable at once, and never reads another test's Redis.
    REDIS_URL: 'redis://127.0.0.1:1',
    LOG_LEVEL: 'warn',
  };
}

/** Litestream's environment: what contrib/litestream/litestream.yml expands. */
function litestreamEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, MIRROR_DB: mirrorPath, LITESTREAM_REPLICA_URL: `file://${replicaDir}`, LITESTREAM_S3_ENDPOINT: '' };
}

async function syncOnce(): Promise<void> {
  const r = await runCli(['sync', '--once'], cliEnv(mirrorPath), 120_000);
  expect(r.code, r.stderr + r.stdout).toBe(0);
}

async function restore(to: string): Promise<void> {
  await run(LITESTREAM, ['restore', '-config', CONFIG, '-o', to, mirrorPath], { env: litestreamEnv() });
}

async function answers(dbPath: string): Promise<Answers> {
  const env = cliEnv(dbPath);
  const status = await runCli(['status', '--json'], env);
  const report = JSON.parse(status.stdout) as { mirror: Record<string, unknown>; changeFeed: unknown };
  const { activeUsers, deletedUsers, lastSucceededAt, lastRuns, lastAttemptFailed, available } = report.mirror;
  const asOf: Answers['asOf'] = [];
  for (const at of moments) {
    for (const client of clients) {
      const r = await runCli(['resolve', client, '--as-of', at, '--json'], env);
      asOf.push({ at, client, code: r.code, stdout: r.stdout });
    }
  }
  const history: Answers['history'] = [];
  for (const client of clients) {
    const r = await runCli(['history', client, '--json'], env);
    history.push({ client, code: r.code, stdout: r.stdout });
  }
  const changes = await runCli(['changes', '--json', '--limit', '100000'], env);
  const changesAfter = await runCli(['changes', '--json', '--after', '3', '--limit', '5'], env);
  return {
    status: {
      code: status.code,
      mirror: { available, activeUsers, deletedUsers, lastSucceededAt, lastRuns, lastAttemptFailed },
      changeFeed: report.changeFeed,
    },
    asOf,
    history,
    changes: { code: changes.code, stdout: changes.stdout },
    changesAfter: { code: changesAfter.code, stdout: changesAfter.stdout },
  };
}

/** The replica's generations: one as long as nobody but Litestream checkpoints the mirror. */
function generations(): string[] {
  const path = join(replicaDir, 'generations');
  return existsSync(path) ? readdirSync(path) : [];
}

/** The newest run and the published users of a mirror file, read in one snapshot each. */
function contentOf(path: string): { run: number; users: string } {
  const db = openMirror(path, { readonly: true });
  try {
    const run = db.prepare('SELECT max(id) FROM sync_runs').pluck().get() as number;
    return { run, users: mirrorFingerprint(db).digest };
  } finally {
    db.close();
  }
}

suite(TITLE, () => {
  beforeAll(async () => {
    requireBuiltCli();
    // 1,200 users: three pages, so the churn lands between pages of every run.
    standIn = await startStandIn({
      seed: 39,
      users: 1_200,
      orgs: 0,
      membersPerOrg: 0,
      faults: { churnAddPerPage: 2, churnDeletePerPage: 1, churnUpdatePerPage: 3 },
    });
    dir = join(tmpdir(), `user-mirror-litestream-${process.pid}-${Date.now()}`);
    mirrorDir = join(dir, 'host');
    replicaDir = join(dir, 'replica');
    mirrorPath = join(mirrorDir, 'mirror.db');
    mkdirSync(dir, { recursive: true });
    await syncOnce();

    litestream = spawn(LITESTREAM, ['replicate', '-config', CONFIG], { env: litestreamEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    litestream.stdout?.on('data', (d: Buffer) => (litestreamLog += d.toString()));
    litestream.stderr?.on('data', (d: Buffer) => (litestreamLog += d.toString()));
    await eventually(
      () => generations().length > 0,
      60_000,
      () => `Litestream's first snapshot in the replica\n${litestreamLog}`,
    );

    const d = standIn.directory;
    const listed = d.page(0, 30);
    const pick = (i: number) => String(listed[i]?.user_id);
    clients.push(...[1, 2, 3, 4, 5].map((i) => String(listed[i]?.client_user_id)));
    for (let run = 0; run < 4; run++) {
      d.update(pick(1), 'fallback_time_zone');
      d.update(pick(2), 'connected_sources');
      if (run === 1) d.delete([pick(3), pick(4)]);
      if (run === 2) d.restore([pick(4)]);
      if (run === 0) clients.push(...d.add(1).map((id) => String(d.get(id)?.client_user_id)));
      await syncOnce();
      await tick();
      moments.push(new Date().toISOString());
      await tick();
    }
    const synced = Date.now();
    const last = contentOf(mirrorPath);
    await eventually(
      async () => {
        const probe = join(dir, `probe-${Date.now()}.db`);
        await restore(probe);
        const got = contentOf(probe);
        rmSync(probe, { force: true });
        return got.run === last.run && got.users === last.users;
      },
      60_000,
      () => `the replica holding run ${last.run}\n${litestreamLog}`,
      500,
    );
    lagMs = Date.now() - synced;
    before = await answers(mirrorPath);
  }, 600_000);

  afterAll(async () => {
    litestream?.kill('SIGKILL');
    await standIn?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('replicated every run in one generation: user-mirror never checkpointed behind its back', () => {
    expect(generations()).toHaveLength(1);
    // The one new generation is the first ("no generation exists"); an outside checkpoint would log another.
    expect(litestreamLog.match(/new generation.*/g)).toEqual([expect.stringMatching(/reason="no generation exists"/)]);
    console.info(`litestream replica lag (last sync --once exited → a restore holds its run): ${lagMs} ms`);
  });

  it('after the host lost its files, the restored mirror answers status, resolve --as-of, history and changes as before; installed with user-mirror restore, it syncs on', async () => {
    litestream?.kill('SIGKILL');
    rmSync(mirrorDir, { recursive: true, force: true });
    expect(existsSync(mirrorPath)).toBe(false);

    const restored = join(dir, 'new-host', 'mirror.db');
    mkdirSync(join(dir, 'new-host'), { mode: 0o700 });
    const started = Date.now();
    await restore(restored);
    console.info(`litestream restore of ${statSync(restored).size} bytes: ${Date.now() - started} ms`);

    const after = await answers(restored);
    expect(before.status.code).toBe(0);
    expect(after.status).toEqual(before.status);
    expect(after.asOf).toEqual(before.asOf);
    expect(after.history).toEqual(before.history);
    expect(after.changes).toEqual(before.changes);
    expect(after.changesAfter).toEqual(before.changesAfter);
    // The questions did have answers to lose: users found and absent at the noted times, events in the feed.
    expect(before.asOf.map((a) => a.code)).toContain(0);
    expect(before.asOf.map((a) => a.code)).toContain(3);
    expect(before.history.every((h) => h.code === 0)).toBe(true);
    expect(before.changes.stdout.split('\n').length).toBeGreaterThan(10);

    // Installed as the docs say, with `user-mirror restore`: a new feed epoch, and the same past.
    const installed = join(dir, 'new-host', 'installed.db');
    const install = await runCli(['restore', restored], cliEnv(installed));
    expect(install.code, install.stderr + install.stdout).toBe(0);
    const env = cliEnv(installed);
    // Every noted time but the last, which comes after the last run published: the restore's gap, "unknown" until the next sync.
    for (const a of before.asOf.filter((x) => x.at !== moments.at(-1))) {
      const r = await runCli(['resolve', a.client, '--as-of', a.at, '--json'], env);
      expect({ code: r.code, stdout: r.stdout }, `${a.client} at ${a.at}`).toEqual({ code: a.code, stdout: a.stdout });
    }
    // And it is a mirror to go on with: the next sync runs on it, and status is well.
    const next = await runCli(['sync', '--once'], env, 120_000);
    expect(next.code, next.stderr).toBe(0);
    expect((await runCli(['status'], env)).code).toBe(0);
  }, 300_000);
});
