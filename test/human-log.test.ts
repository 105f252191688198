/**
 * What a person at a terminal reads: sentences, never JSON, and a run that
 * waits on a dead service says so as it waits (it used to be silent for
 * nearly two minutes, the retries logged only in JSON mode).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { humanLine } from '../src/runtime/log.js';
import { CLI } from './support/daemon-process.js';
import { requireBuiltCli } from './support/cli-process.js';

describe('humanLine', () => {
  it('says what a retry is waiting for', () => {
    const line = JSON.stringify({
      level: 30,
      event: 'sync.retry',
      what: 'offset 0',
      attempt: 2,
      delayMs: 1_500,
      err: 'connect ECONNREFUSED',
      msg: 'x',
    });
    expect(humanLine(line)).toBe('retrying offset 0: attempt 2 failed (connect ECONNREFUSED); next try in 1.5 s');
  });

  it('leaves out what the command shows another way, and marks warnings', () => {
    expect(humanLine(JSON.stringify({ level: 50, event: 'sync.finished', msg: 'sync failed' }))).toBeUndefined();
    expect(humanLine(JSON.stringify({ level: 40, pid: 1, time: 2, event: 'x', msg: 'careful', count: 3 }))).toBe('warn: careful (count=3)');
    expect(humanLine('not json at all')).toBe('not json at all');
  });
});

describe('sync --once at a terminal', () => {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-tty-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('shows each retry as it happens and no JSON', () => {
    requireBuiltCli('src/commands/sync.js');
    // `script` gives the command a pseudo-terminal, as a person's shell would.
    const env = {
      PATH: process.env.PATH ?? '',
      SERVICE_BASE_URL: 'http://127.0.0.1:9',
      SERVICE_API_KEY: 'sk_test',
      MIRROR_DB: join(dir, 'mirror.db'),
      SYNC_PAGE_ATTEMPTS: '3',
      SYNC_PAGE_RETRY_BUDGET_MS: '0',
    };
    const run = spawnSync('script', ['-qec', `${process.execPath} ${CLI} sync --once`, '/dev/null'], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    const out = run.stdout.replace(/\r/g, '');
    expect(run.status).toBe(1);
    expect(out).toMatch(/retrying offset 0: attempt 1 failed \(.*\); next try in \d+\.\d s/);
    expect(out).toMatch(/retrying offset 0: attempt 2 failed/);
    expect(out).toMatch(/status\s+failed/);
    expect(out).not.toMatch(/\{"level"/);
  });
});
