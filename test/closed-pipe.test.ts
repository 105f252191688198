/**
 * Output read by a reader that stops early (`| head -1`): the CLI ends
 * quietly with status 0, no EPIPE trace, whatever it was streaming.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { CLI, runCli } from './support/daemon-process.js';

const run = promisify(execFile);

let dir: string;
let standIn: StandIn;
let env: Record<string, string>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-pipe-'));
  standIn = await startStandIn({ port: 0, users: 20_000, seed: 41 });
  env = {
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: join(dir, 'mirror.db'),
    // A user.created per user: a feed long enough that `changes` is still writing when head has gone.
    CHANGES_BASELINE: 'events',
  };
  const sync = await runCli(['sync', '--once'], env, 60_000);
  if (sync.code !== 0) throw new Error(`sync failed: ${sync.stderr}`);
});

afterAll(async () => {
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a reader that closes the pipe early', () => {
  it.each([[['changes']], [['changes', '--json']]])('user-mirror %s | head -1: one line, exit 0, nothing on stderr', async (args) => {
    const script = `"${process.execPath}" "${CLI}" ${args.join(' ')} 2>"${dir}/err" | head -1; echo "status=\${PIPESTATUS[0]}"; cat "${dir}/err"`;
    const { stdout } = await run('bash', ['-c', script], { env: { ...env, PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    const [first, status, ...rest] = stdout.split('\n');
    expect(first).toMatch(args.includes('--json') ? /^\{"id":"evt_/ : /^ {2}CURSOR {2}TIMESTAMP/);
    expect(status).toBe('status=0');
    expect(rest.join('\n').trim()).toBe('');
  });
});
