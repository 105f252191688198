import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');
const BUILT = join(ROOT, 'dist/src/commands/stand-in.js');

/** Builds when dist is missing or older than the sources; others' type errors do not stop tsc emitting. */
function ensureBuilt(): void {
  const sources = [
    join(ROOT, 'src/commands/stand-in.ts'),
    ...readdirSync(join(ROOT, 'src/stand-in')).map((f) => join(ROOT, 'src/stand-in', f)),
  ];
  const newest = Math.max(...sources.map((f) => statSync(f).mtimeMs));
  if (existsSync(BUILT) && existsSync(join(ROOT, 'dist/cli.js')) && statSync(BUILT).mtimeMs >= newest) return;
  spawnSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
}

function run(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcessWithoutNullStreams {
  const clean = { ...process.env, SERVICE_API_KEY: '', MANAGEMENT_KEY: '', SERVICE_API_KEY_HEADER: '', ...env };
  return spawn(process.execPath, [join(ROOT, 'dist/cli.js'), 'stand-in', ...args], { cwd: ROOT, env: clean });
}

/** Resolves the pasted env lines (`export NAME=value`) once the banner is complete; `text` is the whole banner. */
function banner(child: ChildProcessWithoutNullStreams): Promise<Record<string, string> & { text?: string }> {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (!out.includes('MANAGEMENT_KEY=') || !out.endsWith('\n')) return;
      const lines = out
        .split('\n')
        .filter((l) => /^export [A-Z_]+=/.test(l))
        .map((l) => l.slice('export '.length));
      resolve({ ...Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])), text: out });
    });
    child.once('exit', (code) => reject(new Error(`stand-in exited early with ${code}`)));
  });
}

function exitCode(child: ChildProcessWithoutNullStreams): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

beforeAll(() => {
  ensureBuilt();
  expect(existsSync(BUILT)).toBe(true);
});

describe('user-mirror stand-in', () => {
  it('prints its URL and keys, serves pages, and exits 0 on SIGTERM', async () => {
    const child = run(['--port', '0', '--users', '100', '--seed', '7']);
    const env = await banner(child);
    expect(env.SERVICE_BASE_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(env.SERVICE_API_KEY).toMatch(/^sk_[0-9a-f]{32}$/);
    expect(env.MANAGEMENT_KEY).toMatch(/^mg_[0-9a-f]{32}$/);
    expect(env.MANAGEMENT_URL).toBe(env.SERVICE_BASE_URL);
    // Pasted verbatim into a shell, the block sets the variables for the commands that follow.
    const pasted = (env.text ?? '')
      .split('\n')
      .filter((l) => l.startsWith('export ') || l.startsWith('#'))
      .join('\n');
    const shell = spawnSync('sh', ['-c', `${pasted}\nprintf '%s' "$MANAGEMENT_KEY"`], { encoding: 'utf8' });
    expect(shell.status).toBe(0);
    expect(shell.stdout).toBe(env.MANAGEMENT_KEY);
    // A member to try a removal with, printed so nobody borrows ids from elsewhere; it exists.
    const member = /^#\s+([0-9a-f-]{36}) ([0-9a-f-]{36})$/m.exec(env.text ?? '');
    expect(member).not.toBeNull();
    const removed = await fetch(`${env.MANAGEMENT_URL}/v1/org/${member?.[1]}/member/${member?.[2]}`, {
      method: 'DELETE',
      headers: { 'x-management-key': env.MANAGEMENT_KEY ?? '' },
    });
    expect(removed.status).toBe(200);
    const res = await fetch(`${env.SERVICE_BASE_URL}/v2/user?limit=500`, { headers: { 'x-service-api-key': env.SERVICE_API_KEY ?? '' } });
    expect(res.status).toBe(200);
    const page = (await res.json()) as { users: unknown[]; total: number };
    expect(page.total).toBe(100);
    expect(page.users).toHaveLength(100);
    const exited = exitCode(child);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('accepts the keys and header from the environment', async () => {
    const child = run(['--port', '0', '--users', '3'], {
      SERVICE_API_KEY: 'pk_eu_from_env',
      MANAGEMENT_KEY: 'mg_from_env',
      SERVICE_API_KEY_HEADER: 'X-Api-Key',
    });
    const env = await banner(child);
    expect(env).toMatchObject({ SERVICE_API_KEY: 'pk_eu_from_env', MANAGEMENT_KEY: 'mg_from_env', SERVICE_API_KEY_HEADER: 'x-api-key' });
    const res = await fetch(`${env.SERVICE_BASE_URL}/v2/user`, { headers: { 'X-Api-Key': 'pk_eu_from_env' } });
    expect(res.status).toBe(200);
    const exited = exitCode(child);
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  });

  it('keeps keys derived from --seed across restarts, and says where each key came from', async () => {
    const start = async (args: string[], env: NodeJS.ProcessEnv = {}) => {
      const child = run(['--port', '0', '--users', '3', ...args], env);
      const env2 = await banner(child);
      const exited = exitCode(child);
      child.kill('SIGTERM');
      await exited;
      return env2;
    };
    const first = await start(['--seed', '7']);
    const again = await start(['--seed', '7']);
    expect([again.SERVICE_API_KEY, again.MANAGEMENT_KEY]).toEqual([first.SERVICE_API_KEY, first.MANAGEMENT_KEY]);
    expect(first.text).toMatch(/SERVICE_API_KEY derived from --seed 7: stable across restarts/);
    expect(first.text).toMatch(/MANAGEMENT_KEY derived from --seed 7: stable across restarts/);
    const other = await start(['--seed', '8']);
    expect(other.SERVICE_API_KEY).not.toBe(first.SERVICE_API_KEY);
    const mixed = await start(['--seed', '7'], { MANAGEMENT_KEY: 'mg_from_env' });
    expect(mixed.text).toMatch(/MANAGEMENT_KEY from the environment/);
    expect(mixed.SERVICE_API_KEY).toBe(first.SERVICE_API_KEY);
    expect(mixed.text).toMatch(/dates: created_on up to \d{4}-\d\d-\d\d/);
  });

  it('serves a repeated page and a changing order by flag, and says so in the banner', async () => {
    const child = run(['--port', '0', '--users', '1000', '--repeat-page', '500:0', '--repeat-page-times', '1', '--reorder-rate', '0']);
    try {
      const env = await banner(child);
      expect(env.text).toMatch(/faults: repeatPageAt=500 repeatPageTimes=1/);
      const page = async (offset: number) => {
        const res = await fetch(`${env.SERVICE_BASE_URL}/v2/user?offset=${offset}&limit=500`, {
          headers: { 'x-service-api-key': env.SERVICE_API_KEY ?? '' },
        });
        return (await res.json()) as { users: Array<{ user_id: string }>; offset: number };
      };
      const first = await page(0);
      const repeated = await page(500);
      expect(repeated.offset).toBe(500);
      expect(repeated.users.map((u) => u.user_id)).toEqual(first.users.map((u) => u.user_id));
      // Once only: asked again, the page is its own.
      expect((await page(500)).users[0]?.user_id).not.toBe(first.users[0]?.user_id);
    } finally {
      child.kill('SIGTERM');
      await exitCode(child);
    }
  });

  it('rejects bad flags with exit code 2, naming the flag', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--rate-429', '2'], /rate/],
      [['--port', 'x'], /--port/],
      [['--rate-429', '0.6', '--rate-503', '0.6'], /rate/],
      [['--nope'], /nope/],
      [['--legacy-records', '1.5'], /--legacy-records: must be a share from 0 to 1/],
      [['--legacy-records=-0.1'], /--legacy-records: must be a share from 0 to 1/],
      [['--legacy-records', 'some'], /--legacy-records/],
      [['--churn-update-per-page', '-1'], /--churn-update-per-page/],
      [['--today', '2026-13-01'], /--today: must be a date YYYY-MM-DD/],
      [['--repeat-page', '500'], /--repeat-page: must be N:M/],
      [['--reorder-rate', '1.5'], /--reorder-rate/],
    ];
    for (const [args, message] of cases) {
      const child = run(args);
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      expect(await exitCode(child), args.join(' ')).toBe(2);
      expect(err).toMatch(message);
    }
  });

  it("serves today's shape by default and a share of legacy records with --legacy-records", async () => {
    const lacksCreatedOn = async (args: string[]) => {
      const child = run(['--port', '0', '--users', '400', ...args]);
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      const env = await banner(child);
      const res = await fetch(`${env.SERVICE_BASE_URL}/v2/user?limit=500`, { headers: { 'x-service-api-key': env.SERVICE_API_KEY ?? '' } });
      const page = (await res.json()) as { users: Array<Record<string, unknown>> };
      const exited = exitCode(child);
      child.kill('SIGTERM');
      await exited;
      return { banner: out, lacking: page.users.filter((u) => !('created_on' in u)).length };
    };
    const today = await lacksCreatedOn([]);
    expect(today.banner).toMatch(/legacy records: 0% of generated users/);
    expect(today.lacking).toBe(0);
    const legacy = await lacksCreatedOn(['--legacy-records', '1']);
    expect(legacy.banner).toMatch(/legacy records: 100% of generated users/);
    expect(legacy.lacking).toBeGreaterThan(0);
  });

  it('documents --legacy-records in --help', async () => {
    const child = run(['--help']);
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    expect(await exitCode(child)).toBe(0);
    expect(out).toMatch(/--legacy-records R +share 0\.\.1 of generated users/);
    expect(out).toMatch(/--churn-update-per-page K after each list page, change K random live users/);
    expect(out).toMatch(/POST \/_stand-in\/users\/\{user_id\}\/restore/);
  });
});
