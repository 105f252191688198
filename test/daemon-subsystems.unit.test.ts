/**
 * The daemon's parts and their stops (src/daemon/subsystems.ts): stopped in
 * reverse of their start, intake (the backup and export schedules) first; a
 * part that fails to stop does not keep the rest running; a part recorded
 * after the stop began is stopped at once; a start step that throws stops
 * what started before it.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { Subsystems } from '../src/daemon/subsystems.js';

function recorder(): { stopped: string[]; stop: (name: string) => () => void } {
  const stopped: string[] = [];
  return { stopped, stop: (name) => () => void stopped.push(name) };
}

describe('Subsystems', () => {
  it('stops the last started first, intake before everything', async () => {
    const parts = new Subsystems(silentLogger);
    const { stopped, stop } = recorder();
    parts.add('mirror', stop('mirror'));
    parts.add('backups', stop('backups'), 'intake');
    parts.add('status', stop('status'));
    parts.add('exports', stop('exports'), 'intake');
    parts.add('workers', stop('workers'));
    parts.add('schedule', stop('schedule'));
    expect(await parts.stopAll()).toBe(true);
    expect(stopped).toEqual(['exports', 'backups', 'schedule', 'workers', 'status', 'mirror']);
  });

  it('waits for each stop before the next, and gives each the time the stop began', async () => {
    const parts = new Subsystems(silentLogger);
    const seen: string[] = [];
    const sinces: number[] = [];
    parts.add('first', (since) => {
      sinces.push(since);
      seen.push('first');
    });
    parts.add('second', async (since) => {
      sinces.push(since);
      await new Promise((resolve) => setTimeout(resolve, 20));
      seen.push('second');
    });
    expect(await parts.stopAll(1234)).toBe(true);
    expect(seen).toEqual(['second', 'first']);
    expect(sinces).toEqual([1234, 1234]);
  });

  it('stops the rest when one part fails to stop, and says the stop was not clean', async () => {
    const parts = new Subsystems(silentLogger);
    const { stopped, stop } = recorder();
    parts.add('mirror', stop('mirror'));
    parts.add('redis', () => Promise.reject(new Error('connection refused')));
    parts.add('schedule', stop('schedule'));
    expect(await parts.stopAll()).toBe(false);
    expect(stopped).toEqual(['schedule', 'mirror']);
  });

  it('stops at once a part recorded after the stop began, and never twice', async () => {
    const parts = new Subsystems(silentLogger);
    const { stopped, stop } = recorder();
    parts.add('mirror', stop('mirror'));
    expect(await parts.stopAll()).toBe(true);
    parts.add('late worker', stop('late worker'));
    await Promise.resolve();
    expect(stopped).toEqual(['mirror', 'late worker']);
    expect(await parts.stopAll()).toBe(true);
    expect(stopped).toEqual(['mirror', 'late worker']);
  });

  it('stops what started before a start step that throws, and passes the error on', async () => {
    const parts = new Subsystems(silentLogger);
    const { stopped, stop } = recorder();
    parts.add('mirror', stop('mirror'));
    parts.add('audit', stop('audit'));
    await expect(
      parts.starting(() => {
        throw new Error('port in use');
      }),
    ).rejects.toThrow('port in use');
    expect(stopped).toEqual(['audit', 'mirror']);
    expect(await parts.starting(() => 7)).toBe(7);
  });
});
