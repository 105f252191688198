/**
 * `sync --once` runs under the sync's V8 flags and allocator setting, like
 * the daemon's sync process (src/sync/process-settings.ts), by replacing
 * itself with a Node started with them (src/entry.ts). What must hold for
 * an operator: they are in effect in the process that syncs, it is the same
 * process (the pid a supervisor or a shell holds; its exit code and its
 * signals), and an operator's own settings win. A hook given by
 * NODE_OPTIONS writes each process image's pid, flags, arena setting and
 * compile cache folder at its start: the replaced image leaves one line,
 * the syncing image another. The daemon's sync process
 * (src/sync/child-process.ts) is started with them and leaves one line:
 * it never re-executes.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { dirname, join } from 'node:path';
import { startCli } from './support/cli-process.js';
import { runDaemonSyncChild } from './support/sync-child.js';
import { ensureBuilt, tempDir, type TempDir } from './support/mirror-fixtures.js';

const HOOK = `import { appendFileSync } from 'node:fs';
import { getCompileCacheDir } from 'node:module';
const image = { pid: process.pid, execArgv: process.execArgv, arenas: process.env.MALLOC_ARENA_MAX ?? null, cache: getCompileCacheDir() ?? null };
appendFileSync(process.env.IMAGE_LOG, JSON.stringify(image) + '\\n');
`;

interface Image {
  pid: number;
  execArgv: string[];
  arenas: string | null;
  cache: string | null;
}

let dir: TempDir;
let standIn: StandIn;
let hookFile: string;
let runs = 0;

async function syncOnce(
  extraNodeOptions = '',
  extraEnv: Record<string, string> = {},
): Promise<{ code: number | null; pid: number | undefined; images: Image[]; mirror: string }> {
  const log = dir.file(`images-${++runs}.jsonl`);
  const mirror = dir.file(`mirror-${runs}.db`);
  writeFileSync(log, '');
  const cli = startCli(['sync', '--once'], {
    PATH: process.env.PATH ?? '',
    NODE_OPTIONS: `--import=${pathToFileURL(hookFile).href} ${extraNodeOptions}`.trim(),
    IMAGE_LOG: log,
    MIRROR_DB: mirror,
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    XDG_CACHE_HOME: dir.file('xdg-cache'),
    ...extraEnv,
  });
  const code = await cli.exited(60_000);
  return { code, pid: cli.child.pid, images: readImages(log), mirror };
}

function readImages(log: string): Image[] {
  return readFileSync(log, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Image);
}

beforeAll(() => {
  ensureBuilt();
  dir = tempDir('sync-cli-flags-');
  hookFile = dir.file('image-log.mjs');
  writeFileSync(hookFile, HOOK);
});

beforeAll(async () => {
  standIn = await startStandIn({ port: 0, users: 30, seed: 43 });
});

afterAll(async () => {
  await standIn?.close();
  dir?.remove();
});

describe('sync --once under the sync V8 flags', () => {
  it('syncs in the same process, started again with --max-semi-space-size=2, and exits with the sync code', async () => {
    const r = await syncOnce();
    expect(r.code).toBe(0);
    expect(r.images).toHaveLength(2);
    const [first, syncing] = r.images;
    expect(first?.execArgv).not.toContain('--max-semi-space-size=2');
    expect(first?.arenas).toBeNull();
    expect(syncing?.execArgv).toContain('--max-semi-space-size=2');
    expect(syncing?.arenas).toBe('2');
    // The cache folder src/entry.ts enabled is passed on: the syncing image starts with it.
    // (Node's folder for this Node version, inside it.)
    expect(dirname(syncing?.cache ?? '')).toBe(join(dir.file('xdg-cache'), 'user-mirror', 'compile-cache'));
    // One pid throughout: the child the caller spawned is the one that synced.
    expect(first?.pid).toBe(r.pid);
    expect(syncing?.pid).toBe(r.pid);
    const db = new Database(r.mirror, { readonly: true });
    try {
      expect(db.prepare('SELECT count(*) FROM users WHERE deleted_at IS NULL').pluck().get()).toBe(30);
    } finally {
      db.close();
    }
  });

  it("keeps an operator's own young-generation size from NODE_OPTIONS, and still adds the arena limit", async () => {
    const r = await syncOnce('--max-semi-space-size=8');
    expect(r.code).toBe(0);
    expect(r.images).toHaveLength(2);
    expect(r.images[1]?.execArgv).not.toContain('--max-semi-space-size=2');
    expect(r.images[1]?.arenas).toBe('2');
    expect(r.images[1]?.pid).toBe(r.pid);
  });

  it("keeps an operator's own flag and arena limit, and starts no second image", async () => {
    const r = await syncOnce('--max-semi-space-size=8', { MALLOC_ARENA_MAX: '4' });
    expect(r.code).toBe(0);
    expect(r.images).toHaveLength(1);
    expect(r.images[0]?.execArgv).not.toContain('--max-semi-space-size=2');
    expect(r.images[0]?.arenas).toBe('4');
  });
});

describe("the daemon's sync process", () => {
  it('is started with the flags, the arena limit and the compile cache, and does not re-execute', async () => {
    const log = dir.file('images-daemon-child.jsonl');
    writeFileSync(log, '');
    const cache = dir.file('daemon-cache');
    const env: Record<string, string> = {
      NODE_OPTIONS: `--import=${pathToFileURL(hookFile).href}`,
      IMAGE_LOG: log,
      MIRROR_DB: dir.file('mirror-daemon-child.db'),
      SERVICE_BASE_URL: standIn.baseUrl,
      SERVICE_API_KEY: standIn.apiKey,
      SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
      // As src/entry.ts leaves it in the daemon once it has enabled the cache.
      NODE_COMPILE_CACHE: cache,
      LOG_LEVEL: 'warn',
    };
    const outcome = await runDaemonSyncChild(env, ['MALLOC_ARENA_MAX']);
    expect(outcome.ran && outcome.value.status).toBe('succeeded');
    const images = readImages(log);
    expect(images).toHaveLength(1);
    expect(images[0]?.execArgv).toContain('--max-semi-space-size=2');
    expect(images[0]?.arenas).toBe('2');
    expect(dirname(images[0]?.cache ?? '')).toBe(cache);
  });
});
