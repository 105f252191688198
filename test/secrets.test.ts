/**
 * Keys never leak: not into log lines (at the chattiest level), not into
 * error output, not into the mirror file. Runs the real CLI against the
 * stand-in, with the keys the stand-in accepts and with wrong ones.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';

const TEAM_KEY = 'pk_us_7h1s_1s_th3_t3am_k3y';
const MANAGEMENT_KEY = 'mg_7h1s_1s_th3_m4n4g3m3nt_k3y';

let standIn: StandIn;
let dir: string;

beforeAll(async () => {
  requireBuiltCli();
  standIn = await startStandIn({ port: 0, users: 1_200, seed: 5, apiKey: TEAM_KEY, managementKey: MANAGEMENT_KEY });
  dir = mkdtempSync(join(tmpdir(), 'user-mirror-secrets-'));
});

afterAll(async () => {
  await standIn?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function env(extra: Record<string, string>): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    LOG_LEVEL: 'trace',
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: TEAM_KEY,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MANAGEMENT_URL: standIn.managementUrl,
    MANAGEMENT_KEY: MANAGEMENT_KEY,
    MIRROR_DB: join(dir, 'mirror.db'),
    ...extra,
  };
}

function expectNoKeys(text: string): void {
  expect(text).not.toContain(TEAM_KEY);
  expect(text).not.toContain(MANAGEMENT_KEY);
  expect(text).not.toContain('7h1s_1s_th3');
}

describe('keys never leak', () => {
  it('not from a successful sync, its trace logs, or the mirror file', async () => {
    const run = await runCli(['sync', '--once'], env({}), 60_000);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('sync.finished');
    expectNoKeys(run.stdout + run.stderr);
    for (const file of readdirSync(dir)) expectNoKeys(readFileSync(join(dir, file), 'latin1'));
  });

  it('not from a sync the service refuses (401)', async () => {
    const wrong = `${TEAM_KEY}_wrong`;
    const run = await runCli(['sync', '--once'], env({ SERVICE_API_KEY: wrong, MIRROR_DB: join(dir, 'refused.db') }), 60_000);
    expect(run.code).toBe(1);
    expect(run.stdout + run.stderr).toContain('401');
    expect(run.stdout + run.stderr).not.toContain(wrong);
    expectNoKeys(run.stdout + run.stderr);
  });

  it('not from an online resolve, found or not', async () => {
    const [user] = [...standIn.directory.records()].slice(3, 4) as Array<{ client_user_id: string }>;
    const found = await runCli(['resolve', '--online', user!.client_user_id], env({}));
    expect(found.code).toBe(0);
    const missing = await runCli(['resolve', '--online', 'nobody-like-this'], env({}));
    expect(missing.code).toBe(3);
    expectNoKeys(found.stdout + found.stderr + missing.stdout + missing.stderr);
  });

  it('not from a REDIS_URL with a password given by value: the CLI refuses it (exit 2), naming REDIS_URL_FILE', async () => {
    const run = await runCli(['status'], env({ REDIS_URL: `redis://127.0.0.1:1/?password=${TEAM_KEY}` }));
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('REDIS_URL: carries a password (in its query), given by value');
    expect(run.stderr).toContain('set REDIS_URL_FILE instead');
    expectNoKeys(run.stdout + run.stderr);
  });

  it('not from a configuration error about the keys themselves', async () => {
    const run = await runCli(['sync', '--once'], env({ SERVICE_BASE_URL: `not a url ${TEAM_KEY}` }));
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('SERVICE_BASE_URL');
    expectNoKeys(run.stdout + run.stderr);
  });
});
