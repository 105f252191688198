import { describe, expect, it } from 'vitest';
import { requireBuiltCli, runCli } from './support/cli-process.js';

const COMMANDS = [
  'stand-in',
  'sync',
  'resolve',
  'remove-member',
  'removals',
  'webhooks',
  'sinks',
  'worker',
  'daemon',
  'serve',
  'demo',
  'status',
];

describe('user-mirror help', () => {
  it('lists every command', async () => {
    requireBuiltCli();
    const run = await runCli(['--help'], { PATH: process.env.PATH });
    expect(run.code).toBe(0);
    for (const name of COMMANDS) expect(run.stdout).toContain(`  ${name} `);
  });

  it.each(COMMANDS)('%s --help prints its usage and exits 0 without touching anything', async (name) => {
    // No configuration at all: help must not need any.
    const run = await runCli([name, '--help'], { PATH: process.env.PATH });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`usage: user-mirror ${name}`);
  });

  it('status --help documents its exit codes', async () => {
    const run = await runCli(['status', '--help'], { PATH: process.env.PATH });
    expect(run.stdout).toMatch(/exit codes: 0 all well; 1 needs attention: the mirror is stale .* or Redis is unreachable/s);
  });

  it('rejects an unknown command with exit 2', async () => {
    const run = await runCli(['frobnicate'], { PATH: process.env.PATH });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("unknown command 'frobnicate'");
  });
});
