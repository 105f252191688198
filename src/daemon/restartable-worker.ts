/**
 * A worker the watchdog can replace. Each generation gets its own Redis
 * connection: a worker stuck on a half-dead connection is only really
 * replaced if the connection goes with it.
 */

export interface WorkerGeneration<H> {
  handle: H;
  /** Drops what the generation holds once it is closed (its Redis connection). */
  dispose(): void;
}

export interface RestartableWorkerOptions<H> {
  name: string;
  start: () => WorkerGeneration<H>;
  /** Graceful close within `timeoutMs`; resolves true if it finished in time. */
  close: (handle: H, timeoutMs: number) => Promise<boolean>;
  /** How long a restart waits for the old generation before dropping it. */
  restartCloseTimeoutMs: number;
}

export interface RestartableWorker<H> {
  readonly name: string;
  current(): H;
  restart(): Promise<void>;
  close(timeoutMs: number): Promise<boolean>;
}

export function restartableWorker<H>(options: RestartableWorkerOptions<H>): RestartableWorker<H> {
  let generation = options.start();
  let closed = false;

  const retire = async (old: WorkerGeneration<H>, timeoutMs: number): Promise<boolean> => {
    try {
      return await options.close(old.handle, timeoutMs);
    } catch {
      return false;
    } finally {
      old.dispose();
    }
  };

  return {
    name: options.name,
    current: () => generation.handle,
    async restart() {
      if (closed) return;
      const old = generation;
      await retire(old, options.restartCloseTimeoutMs);
      if (closed) return;
      generation = options.start();
    },
    async close(timeoutMs) {
      closed = true;
      return retire(generation, timeoutMs);
    },
  };
}
