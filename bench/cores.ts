/**
 * How much a second busy thread adds on this machine: the question behind
 * every "move this to a worker thread" (bench/history/README.md, "Using the second
 * core"). Each thread does the sync's kind of work, alone and then two at
 * once: parse stand-in records, hash them (SHA-256, as the sync does) and
 * insert them into a SQLite table in memory. Two threads that each ran as
 * fast as one alone would do 2.00× the work in the time; virtual CPUs that
 * share a physical core, or a busy host, do less.
 *
 * `node dist/bench/cores.js` prints it; bench:sync prints it beside its table.
 */
import Database from 'better-sqlite3';
import { pathToFileURL } from 'node:url';
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { contentHash } from '../db/user-row.js';
import { generateUserJson, userKeys } from '../src/stand-in/user-generator.js';

const RECORDS = 2_000;
const PASSES = 20;

/** One thread's share: prepares, calls `ready`, and once `go` resolves does the work; returns its seconds. */
async function share(go: Promise<void>, ready: () => void = () => undefined): Promise<number> {
  const keys = userKeys(1);
  const texts = Array.from({ length: RECORDS }, (_, i) => generateUserJson(keys, i));
  const db = new Database(':memory:');
  db.exec('CREATE TABLE users (user_id TEXT PRIMARY KEY, content_hash TEXT NOT NULL, raw TEXT NOT NULL)');
  const insert = db.prepare<[string, string, string]>('INSERT OR REPLACE INTO users VALUES (?, ?, ?)');
  ready();
  await go;
  const started = performance.now();
  for (let pass = 0; pass < PASSES; pass++) {
    for (const text of texts) insert.run((JSON.parse(text) as { user_id: string }).user_id, contentHash(text), text);
  }
  const seconds = (performance.now() - started) / 1000;
  // Every record stored, once: a thread that skipped its work cannot look fast.
  const stored = db.prepare<[], number>('SELECT count(DISTINCT user_id) FROM users').pluck().get();
  db.close();
  if (stored !== RECORDS) throw new Error(`bench/cores.ts: ${stored ?? 0} users stored, expected ${RECORDS}`);
  return seconds;
}

export interface ParallelScaling {
  /** Seconds for one thread's share alone. */
  alone: number;
  /** Seconds for two threads' shares at once. */
  together: number;
  /** Work done per second by two threads against one: 2 × alone / together. */
  scaling: number;
}

/** Two threads' shares at once against one alone; the best of `rounds` each. */
export async function parallelScaling(rounds = 3): Promise<ParallelScaling> {
  let alone = Infinity;
  let together = Infinity;
  for (let round = 0; round < rounds; round++) {
    alone = Math.min(alone, await share(Promise.resolve()));
    const worker = new Worker(new URL(import.meta.url));
    const ready = new Promise<void>((resolve) => worker.once('message', () => resolve()));
    const theirs = new Promise<number>((resolve, reject) => {
      worker.on('message', (m: unknown) => typeof m === 'number' && resolve(m));
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`bench/cores.ts: the worker exited (${code}) before reporting`)));
    });
    let start: () => void = () => undefined;
    const ours = share(new Promise((resolve) => (start = resolve)));
    await ready;
    const started = performance.now();
    worker.postMessage('go');
    start();
    await Promise.all([ours, theirs]);
    together = Math.min(together, (performance.now() - started) / 1000);
    await worker.terminate();
  }
  return { alone, together, scaling: (2 * alone) / together };
}

if (!isMainThread) {
  const port = parentPort;
  if (port === null) throw new Error('bench/cores.ts: no parent port');
  const go = new Promise<void>((resolve) => port.once('message', () => resolve()));
  void share(go, () => port.postMessage('ready')).then((seconds) => port.postMessage(seconds));
} else if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const s = await parallelScaling();
  console.log(
    `| threads | seconds | work per second |\n|---:|---:|---:|\n| 1 | ${s.alone.toFixed(2)} | 1.00× |\n| 2 | ${s.together.toFixed(2)} | ${s.scaling.toFixed(2)}× |`,
  );
}
