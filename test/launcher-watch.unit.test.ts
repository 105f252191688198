/**
 * Which processes a command started through npm follows (src/runtime/launcher-watch.ts): the
 * chain up to the npm that started it, and none when no npm is there (systemd, pm2, a shell).
 */
import { describe, expect, it } from 'vitest';
import { launcherChain, stillRunning, type ProcInfo } from '../src/runtime/launcher-watch.js';

const table = (procs: Record<number, ProcInfo>) => (pid: number) => procs[pid];
const proc = (ppid: number, cmdline: string, startTime = '100', state = 'S'): ProcInfo => ({ ppid, cmdline, startTime, state });

describe('launcherChain', () => {
  it('follows the shell and the npm above it (npx, npm exec)', () => {
    const read = table({
      20: proc(10, "sh -c 'user-mirror' serve", '7'),
      10: proc(5, 'npm exec user-mirror serve', '6'),
      5: proc(1, '-bash'),
    });
    expect(launcherChain(20, read)).toEqual([
      { pid: 20, startTime: '7' },
      { pid: 10, startTime: '6' },
    ]);
  });

  it('knows npm run by its script path too', () => {
    const read = table({ 10: proc(5, '/usr/bin/node /usr/lib/node_modules/npm/bin/npm-cli.js run serve') });
    expect(launcherChain(10, read)).toHaveLength(1);
  });

  it('follows nothing when no npm is near: systemd, pm2, a shell', () => {
    expect(launcherChain(1, table({}))).toEqual([]);
    expect(launcherChain(30, table({ 30: proc(1, 'PM2 v7.0.4: God Daemon (/root/.pm2)') }))).toEqual([]);
    expect(launcherChain(40, table({ 40: proc(1, '-bash') }))).toEqual([]);
  });

  it('follows nothing under a pm2 that npx started: pm2 runs it, not that npm', () => {
    const read = table({
      30: proc(25, 'PM2 v7.0.4: God Daemon (/root/.pm2)'),
      25: proc(20, 'node /srv/app/node_modules/.bin/pm2 start ecosystem.config.cjs'),
      20: proc(10, "sh -c 'pm2' start ecosystem.config.cjs"),
      10: proc(5, 'npm exec pm2 start ecosystem.config.cjs'),
    });
    expect(launcherChain(30, read)).toEqual([]);
  });
});

describe('stillRunning', () => {
  const w = { pid: 10, startTime: '6' };
  it('is false once the process is gone, a zombie, or its PID belongs to another process', () => {
    expect(stillRunning(w, table({ 10: proc(1, 'npm exec x', '6') }))).toBe(true);
    expect(stillRunning(w, table({}))).toBe(false);
    expect(stillRunning(w, table({ 10: proc(1, 'npm exec x', '6', 'Z') }))).toBe(false);
    expect(stillRunning(w, table({ 10: proc(1, 'other', '9') }))).toBe(false);
  });
});
