/**
 * `npx user-mirror serve` stops when the PID that was started (npx's own,
 * npm's) is killed (issue 50: the server went on serving, orphaned). npm runs
 * the command as its grandchild (npm, `sh -c`, node): SIGTERM to npm reaches
 * the shell only, and SIGKILL nothing; the server follows npm and stops
 * gracefully (src/runtime/launcher-watch.ts).
 *
 * A real npx from PATH, in this checkout (as an operator runs it), with its
 * cache in a temporary folder; the mirror comes from a real sync.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli } from './support/cli-process.js';
import { ROOT } from './support/daemon-process.js';
import { freePort } from './support/redis-server.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { eventually } from './support/eventually.js';

/** Whether a process with this PID still runs (a zombie counts as gone: it serves nothing). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('npx user-mirror serve', () => {
  let rig: SyncRig;
  let dir: string;
  let keyFile: string;

  beforeAll(async () => {
    requireBuiltCli('src/commands/serve.js', 'src/runtime/launcher-watch.js');
    rig = await createSyncRig({ users: 30, seed: 9 });
    await rig.sync();
    dir = mkdtempSync(join(tmpdir(), 'npx-serve-'));
    keyFile = join(dir, 'replica-key');
    writeFileSync(keyFile, 'rk_npx_serve_test\n', { mode: 0o600 });
  });

  afterAll(async () => {
    await rig?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it.each(['SIGTERM', 'SIGKILL'] as const)('stops when the npx process is killed with %s', async (signal) => {
    const port = await freePort();
    const npx: ChildProcess = spawn('npx', ['user-mirror', 'serve'], {
      cwd: ROOT,
      // Its own process group, so that whatever is left is cleaned up whatever happens.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        // The Node under test first: the CLI's `#!/usr/bin/env node` runs on it.
        PATH: `${dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        HOME: dir,
        npm_config_cache: join(dir, 'npm-cache'),
        npm_config_update_notifier: 'false',
        ENV_FILE: '/dev/null',
        MIRROR_DB: rig.dbPath,
        REPLICA_PORT: String(port),
        REPLICA_API_KEY_FILE: keyFile,
      },
    });
    let out = '';
    let err = '';
    npx.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    npx.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    const pgid = npx.pid ?? 0;
    try {
      const listening = await eventually(
        () => out.split('\n').find((l) => l.includes('"event":"replica.listening"')),
        60_000,
        'serve listening under npx',
      ).catch((e: unknown) => {
        throw new Error(`${String(e)}\nstdout: ${out}\nstderr: ${err}`);
      });
      const servePid = (JSON.parse(listening) as { pid: number }).pid;
      // npm's grandchild, not npm itself: the case that was left running.
      expect(servePid).not.toBe(npx.pid);
      // It answers (401: no key given).
      expect((await fetch(`http://127.0.0.1:${port}/v2/user/resolve/someone`)).status).toBe(401);

      const exited = new Promise((resolve) => npx.once('exit', resolve));
      npx.kill(signal);
      await exited;
      await eventually(() => !running(servePid), 60_000, `serve (pid ${servePid}) to stop after npx got ${signal}`).catch((e: unknown) => {
        throw new Error(`${String(e)}\nstdout: ${out}\nstderr: ${err}`);
      });
      // Stopped through its own graceful stop, saying why.
      expect(out).toMatch(/"event":"replica.stopped"/);
      expect(err).toMatch(/the npm process that started this command is gone; stopping/);
      await expect(fetch(`http://127.0.0.1:${port}/v2/user/resolve/someone`)).rejects.toThrow();
    } finally {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // Already gone, as it should be.
      }
    }
  });
});
