/**
 * The watchdog adapter and the restartable worker, with fakes: sampling,
 * restarting, and staying out of the way while Redis cannot be asked.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../src/runtime/log.js';
import { startWatchdog, type WorkerSample } from '../src/daemon/watchdog.js';
import { restartableWorker } from '../src/daemon/watchdog.js';
import { eventually } from './support/eventually.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('startWatchdog', () => {
  it('restarts a worker whose queue has waiting jobs and nothing active, once per stall window', async () => {
    let restarts = 0;
    const reported: string[] = [];
    const dog = startWatchdog({
      workers: [
        {
          name: 'w',
          sample: async (): Promise<WorkerSample> => ({ running: true, waiting: 2, active: 0, rateLimited: false }),
          restart: async () => {
            restarts++;
          },
        },
      ],
      intervalMs: 20,
      stallMs: 300,
      logger: silentLogger,
      onRestart: (worker, reason) => reported.push(`${worker}:${reason}`),
    });
    const t0 = Date.now();
    await eventually(() => restarts > 0, 5_000, 'a restart', 5);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    // The stall clock starts again after a restart.
    await sleep(150);
    await dog.stop();
    expect(restarts).toBe(1);
    expect(reported).toEqual(['w:idle-with-waiting-jobs']);
  });

  it('restarts a worker that stopped running at the next check', async () => {
    let running = false;
    const dog = startWatchdog({
      workers: [
        {
          name: 'w',
          sample: async () => ({ running, waiting: 0, active: 0, rateLimited: false }),
          restart: async () => {
            running = true;
          },
        },
      ],
      intervalMs: 20,
      stallMs: 10_000,
      logger: silentLogger,
    });
    await sleep(70);
    await dog.stop();
    expect(running).toBe(true);
  });

  it('does nothing while samples fail or hang (Redis down)', async () => {
    let restarts = 0;
    let calls = 0;
    const dog = startWatchdog({
      workers: [
        {
          name: 'w',
          sample: () => {
            calls++;
            return calls % 2 === 0 ? Promise.reject(new Error('ECONNREFUSED')) : new Promise<WorkerSample>(() => undefined);
          },
          restart: async () => {
            restarts++;
          },
        },
      ],
      intervalMs: 10,
      stallMs: 1,
      sampleTimeoutMs: 15,
      logger: silentLogger,
    });
    await sleep(150);
    await dog.stop();
    expect(calls).toBeGreaterThan(2);
    expect(restarts).toBe(0);
  });
});

describe('restartableWorker', () => {
  it('closes and disposes the old generation before starting a new one', async () => {
    const events: string[] = [];
    let n = 0;
    const w = restartableWorker({
      name: 'w',
      restartCloseTimeoutMs: 1_000,
      start: () => {
        const id = ++n;
        events.push(`start ${id}`);
        return { handle: id, dispose: () => events.push(`dispose ${id}`) };
      },
      close: async (id) => {
        events.push(`close ${id}`);
        return true;
      },
    });
    expect(w.current()).toBe(1);
    await w.restart();
    expect(w.current()).toBe(2);
    expect(await w.close(1_000)).toBe(true);
    await w.restart();
    expect(events).toEqual(['start 1', 'close 1', 'dispose 1', 'start 2', 'close 2', 'dispose 2']);
  });

  it('drops a generation whose close throws', async () => {
    const disposed: number[] = [];
    let n = 0;
    const w = restartableWorker({
      name: 'w',
      restartCloseTimeoutMs: 1_000,
      start: () => {
        const id = ++n;
        return { handle: id, dispose: () => disposed.push(id) };
      },
      close: async () => {
        throw new Error('stuck');
      },
    });
    await w.restart();
    expect(disposed).toEqual([1]);
    expect(w.current()).toBe(2);
  });
});
