/**
 * The production flow, as an operator performs it (README, "Deploy"):
 *
 *   build stage   npm ci && npm pack         (prepack builds dist/ and ships the lock as npm-shrinkwrap.json)
 *   host          tar xzf user-mirror-<v>.tgz && cd package && npm ci --omit=dev
 *                 node dist/cli.js --version; sync --once; npx pm2 start ecosystem.config.cjs
 *
 * The pack runs in a copy of the sources (node_modules linked), so the
 * rebuild it does never rewrites the dist/ other test files are running.
 * The host install is real: from the registry, better-sqlite3's shipped
 * Node-API binary (nothing compiled: no build/ folder), the pinned pm2 from
 * the artefact's own dependencies, and not the Node a checkout carries.
 *
 * Also here, the artefact's contract without I/O: `.env.example` is the
 * registry rendered, and the producer entry never loads better-sqlite3.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, relative } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderEnvExample } from '../src/runtime/env-example.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { startTestRedis, freePort, type TestRedis } from './support/redis-server.js';
import { ROOT, daemonEnv, getStatus, keysAsFiles } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';

const run = promisify(execFile);

describe('the artefact contract', () => {
  it('.env.example is the configuration registry, rendered (npm run env-example)', () => {
    expect(readFileSync(join(ROOT, '.env.example'), 'utf8')).toBe(renderEnvExample());
  });

  it('the producer entry (user-mirror/producer) never imports better-sqlite3, the mirror or the sync', () => {
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/^(?:import|export)\s(?!type\b)[^;]*?from\s+'([^']+)'/gm)) {
        const spec = m[1] ?? '';
        if (spec.startsWith('.')) visit(normalize(join(dirname(file), spec)).replace(/\.js$/, '.ts'));
        else bare.add(spec);
      }
    };
    visit('src/producer.ts');
    expect([...bare].filter((b) => b === 'better-sqlite3' || b === 'undici')).toEqual([]);
    expect([...seen].filter((f) => f.startsWith('db/') || f.startsWith('src/sync/'))).toEqual([]);
    expect(seen.has('jobs/removals/producer.ts')).toBe(true);
  });
});

describe('the production flow', () => {
  let dir: string;
  let app: string;
  let redis: TestRedis;
  let standIn: StandIn;
  let tarball: string;
  let pm2Env: Record<string, string> | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'user-mirror-release-'));
    // The build stage, in a copy of the sources: what `git clone` gives, with the installed node_modules linked.
    const src = join(dir, 'src');
    cpSync(ROOT, src, {
      recursive: true,
      filter: (p) =>
        !/^(node_modules|dist|data|logs|\.git|test|prof)(\/|$)|^bench\/(?!README\.md$)/.test(relative(ROOT, p)) && !p.endsWith('.tgz'),
    });
    symlinkSync(join(ROOT, 'node_modules'), join(src, 'node_modules'));
    const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: src, maxBuffer: 64 * 1024 * 1024 });
    const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    if (info === undefined) throw new Error(`npm pack printed nothing: ${packed.stderr}`);
    tarball = join(dir, info.filename);
    // The host: an empty folder, the artefact, a production install from its own lock.
    app = join(dir, 'host');
    mkdirSync(app);
    await run('tar', ['xzf', tarball, '-C', app, '--strip-components=1']);
    await run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund'], { cwd: app, maxBuffer: 64 * 1024 * 1024 });
    redis = await startTestRedis();
    standIn = await startStandIn({ port: 0, users: 700, seed: 9 });
  });

  /** The artefact's pm2, on the Node under test (its bin's `env node` could find another Node on PATH). */
  const pm2 = (args: string[], env: Record<string, string>) =>
    run(process.execPath, [join(app, 'node_modules', 'pm2', 'bin', 'pm2'), ...args], { cwd: app, env, maxBuffer: 16 * 1024 * 1024 });

  afterAll(async () => {
    if (pm2Env !== undefined) await pm2(['kill'], pm2Env).catch(() => undefined);
    await standIn?.close();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('ships the built daemon, its docs and its lock, and no tests, benches, sources or source maps', async () => {
    const listed = (await run('tar', ['tzf', tarball])).stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => l.replace(/^package\//, ''));
    for (const want of [
      'dist/cli.js',
      'dist/src/cli.js',
      'dist/src/producer.js',
      'dist/jobs/removals/worker.js',
      'ecosystem.config.cjs',
      'README.md',
      // The docs link to it for every figure they quote.
      'bench/README.md',
      // The runbooks every alert's runbook_url names (contrib/prometheus/user-mirror.rules.yml).
      'docs/alerts.md',
      '.env.example',
      // What an operator adopts beside the daemon (docs/alerts.md, docs/security.md): alert rules, dashboard, systemd unit.
      'contrib/prometheus/user-mirror.rules.yml',
      'contrib/prometheus/user-mirror.dashboard.json',
      'contrib/systemd/user-mirror.service',
      // docs/backup.md's Litestream configuration, for the host that runs Litestream beside the daemon.
      'contrib/litestream/litestream.yml',
      'npm-shrinkwrap.json',
      'package.json',
    ]) {
      expect(listed, want).toContain(want);
    }
    expect(listed.filter((f) => /^(test|bench|src|jobs|db)\/.*\.ts$|^dist\/(test|bench)\/|\.map$/.test(f))).toEqual([]);
    // The benches' dated sittings stay in the repository: the artefact holds their goals and latest figures only.
    expect(listed.filter((f) => f.startsWith('bench/') && f !== 'bench/README.md')).toEqual([]);
  });

  it('installs without dev dependencies, and says its version', async () => {
    const modules = readdirSync(join(app, 'node_modules'));
    expect(modules).not.toContain('typescript');
    expect(modules).not.toContain('vitest');
    // Litestream is a companion installed on the host, not part of the artefact (docs/backup.md).
    expect(modules).not.toContain('@flydotio');
    // The carried Node is a dev dependency: a host runs the artefact on its own Node.
    expect(modules).not.toContain('node');
    expect(existsSync(join(app, 'node_modules', 'better-sqlite3', 'build'))).toBe(false);
    expect((await run(process.execPath, ['dist/cli.js', '--version'], { cwd: app })).stdout).toMatch(
      /^user-mirror \d+\.\d+\.\d+ \(node v\d+/,
    );
    // The pm2 the artefact pins, not whatever `npx pm2` would fetch.
    const pinned = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { dependencies: { pm2: string } }).dependencies.pm2;
    expect((JSON.parse(readFileSync(join(app, 'node_modules', 'pm2', 'package.json'), 'utf8')) as { version: string }).version).toBe(
      pinned,
    );
    expect(existsSync(join(app, 'node_modules', '.bin', 'pm2'))).toBe(true);
  });

  it('syncs once against the stand-in', async () => {
    const mirror = join(dir, 'once.db');
    const { stdout } = await run(process.execPath, ['dist/cli.js', 'sync', '--once'], {
      cwd: app,
      env: {
        PATH: process.env.PATH ?? '',
        SERVICE_BASE_URL: standIn.baseUrl,
        SERVICE_API_KEY: standIn.apiKey,
        SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
        MIRROR_DB: mirror,
        XDG_CACHE_HOME: join(dir, 'xdg'),
      },
    });
    expect(stdout).toMatch(/succeeded/);
    // Node's compile cache works from the artefact too: the account's folder holds the sync's modules.
    expect(readdirSync(join(dir, 'xdg', 'user-mirror', 'compile-cache'), { recursive: true }).length).toBeGreaterThan(1);
    const db = new Database(mirror, { readonly: true });
    try {
      expect(db.prepare('SELECT count(*) AS n FROM users WHERE deleted_at IS NULL').get()).toEqual({ n: 700 });
    } finally {
      db.close();
    }
  });

  it('runs under the shipped ecosystem file with the pinned pm2', async () => {
    const statusPort = await freePort();
    // The keys as files (the README's deploy): pm2 refuses them by value, since `pm2 save` would store them.
    pm2Env = keysAsFiles(
      {
        ...daemonEnv({
          redisUrl: redis.url,
          standIn,
          mirrorDb: join(dir, 'pm2.db'),
          queuePrefix: 'release',
          statusPort,
          cron: '*/5 * * * * *',
        }),
        PATH: process.env.PATH ?? '',
        HOME: dir,
        PM2_HOME: join(dir, 'pm2-home'),
      },
      join(dir, 'keys'),
    );
    const started = await pm2(['start', 'ecosystem.config.cjs'], pm2Env);
    expect(started.stderr).not.toMatch(/error/i);
    await eventually(
      async () => (await getStatus(statusPort, '/readyz').catch(() => ({ status: 0 }))).status === 200,
      60_000,
      '/readyz 200 under pm2',
    );
    const list = JSON.parse((await pm2(['jlist'], pm2Env)).stdout) as Array<{
      name: string;
      pm2_env: { status: string; pm_exec_path: string };
    }>;
    expect(list).toEqual([
      expect.objectContaining({
        name: 'user-mirror',
        pm2_env: expect.objectContaining({ status: 'online', pm_exec_path: join(app, 'dist', 'cli.js') }),
      }),
    ]);
    expect(existsSync(join(app, 'logs', 'user-mirror.out.log'))).toBe(true);
    await pm2(['kill'], pm2Env);
    pm2Env = undefined;
  });
});
