/**
 * `.env` without shell traps: the CLI and ecosystem.config.cjs read it with
 * Node's parser (never a shell), from ENV_FILE or ./.env, the environment
 * winning over the file; .env.example quotes every value a shell would take
 * apart, so the file works whichever way it is read. Real CLI processes, the
 * real ecosystem file, bash.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from './support/daemon-process.js';
import { ROOT, tempDir } from './support/mirror-fixtures.js';

const dir = tempDir('user-mirror-env-file-');
afterAll(() => dir.remove());

/** `status --json`'s schedule interval: a value only SYNC_CRON decides. */
async function intervalSeconds(env: Record<string, string>): Promise<{ seconds: number | undefined; code: number | null; stderr: string }> {
  const run = await runCli(['status', '--json'], { MIRROR_DB: dir.file('none.db'), REDIS_URL: 'redis://127.0.0.1:1', ...env }, 30_000);
  const seconds = run.stdout.startsWith('{')
    ? (JSON.parse(run.stdout) as { schedule: { intervalSeconds: number } }).schedule.intervalSeconds
    : undefined;
  return { seconds, code: run.code, stderr: run.stderr };
}

describe('.env', () => {
  const envFile = dir.file('prod.env');
  writeFileSync(envFile, "# a deploy's file\nSYNC_CRON='*/5 * * * *'\nLOG_LEVEL=warn\n");

  it('is read by the CLI from ENV_FILE, with a cron value a shell would expand', async () => {
    expect((await intervalSeconds({ ENV_FILE: envFile })).seconds).toBe(300);
  });

  it('loses to the environment', async () => {
    expect((await intervalSeconds({ ENV_FILE: envFile, SYNC_CRON: '*/10 * * * *' })).seconds).toBe(600);
  });

  it('ENV_FILE naming no file is a configuration error (exit 2)', async () => {
    const r = await intervalSeconds({ ENV_FILE: dir.file('missing.env') });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`ENV_FILE: ${dir.file('missing.env')} does not exist`);
  });

  it('is read by ecosystem.config.cjs, whose secret check sees its values, and left for the daemon to read at each start', () => {
    const load = (env: Record<string, string>) =>
      execFileSync(process.execPath, ['-e', "console.log(JSON.stringify(require('./ecosystem.config.cjs').apps[0].env))"], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', ...env },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    // pm2 keeps what it is given across reloads: none of the file's values, only where the file is (test/pm2-reload.test.ts).
    const appEnv = JSON.parse(load({ ENV_FILE: envFile })) as Record<string, string>;
    expect(appEnv).toMatchObject({ ENV_FILE: envFile });
    expect(appEnv.SYNC_CRON).toBeUndefined();
    expect(appEnv.LOG_LEVEL).toBeUndefined();
    const withKey = dir.file('key.env');
    writeFileSync(withKey, 'SERVICE_API_KEY=sk_in_the_file\n');
    expect(() => load({ ENV_FILE: withKey })).toThrow(/SERVICE_API_KEY set in the environment of pm2 start.*SERVICE_API_KEY_FILE/s);
  });

  it('.env.example, every default uncommented, reads the same through Node and through a shell', () => {
    const uncommented = readFileSync(join(ROOT, '.env.example'), 'utf8')
      .split('\n')
      .filter((l) => /^# [A-Z][A-Z0-9_]*=.+$/.test(l))
      .map((l) => l.slice(2));
    expect(uncommented.length).toBeGreaterThan(20);
    const file = dir.file('example.env');
    writeFileSync(file, `${uncommented.join('\n')}\n`);
    const names = uncommented.map((l) => l.slice(0, l.indexOf('=')));
    const print = `for n in ${names.join(' ')}; do printf '%s=%s\\n' "$n" "\${!n}"; done`;
    // In an empty directory, so an unquoted * would expand to nothing and show.
    const viaShell = execFileSync('bash', ['-c', `set -euo pipefail; set -a; . ${file}; set +a; ${print}`], {
      cwd: dir.path,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '' },
    });
    const viaNode = execFileSync(
      process.execPath,
      [
        '-e',
        `process.loadEnvFile(${JSON.stringify(file)}); for (const n of ${JSON.stringify(names)}) console.log(n + '=' + process.env[n]);`,
      ],
      { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } },
    );
    expect(viaShell).toBe(viaNode);
    expect(viaNode).toContain('SYNC_CRON=*/15 * * * *\n');
  });
});
