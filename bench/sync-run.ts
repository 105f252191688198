/**
 * One bench:sync scenario in a process of its own, as the daemon runs each
 * sync (src/sync/child-main.ts): a fresh process per run, so that its peak RSS
 * is that run's and not what an earlier scenario left in the heap. Forked by
 * bench/sync.ts with a SyncRunRequest as its argument; replies a RunResult
 * over IPC and exits. The peers (bench/peer-script.ts, bench/peer-sdk.ts)
 * and the fetch-only floor run here too, so that every figure is measured the
 * same way: a fresh process, the same RSS sampling, the same clock.
 */
import Database from 'better-sqlite3';
import { readFileSync } from 'node:fs';
import { Pool } from 'undici';
import { checkpointMirror, openMirror } from '../db/open.js';
import { ServiceClient } from '../src/service/client.js';
import { ACCEPT_ENCODING } from '../src/service/content-encoding.js';
import { runSync, type SyncSummary } from '../src/sync/engine.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { MAX_PAGE_LIMIT } from '../src/service/schemas.js';

export interface SyncRunRequest {
  /** Our sync, the competent script (bench/peer-script.ts), the SDK loop (bench/peer-sdk.ts), or the fetch-only floor. */
  kind: 'sync' | 'script' | 'sdk' | 'fetch-only';
  baseUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  dbPath: string;
  users: number;
  concurrency: number;
  /** HTTP connections of the client. */
  connections: number;
  /** A peer's re-sync of an unchanged directory: fail if it rewrote any row. */
  expectUnchanged?: boolean;
  /** The fetch-only floor asks for compressed bodies (and reads them still compressed), as ours and fetch do. */
  compressed?: boolean;
}

export interface RunResult {
  seconds: number;
  /** The sampled peak and the kernel's high-water mark (VmHWM), whichever is higher. */
  peakRssMb: number;
  /** The WAL checkpoint after the run (src/sync/exclusive-run.ts does the same), not in `seconds`. */
  checkpointSeconds?: number;
}

const MB = 1024 * 1024;

/**
 * The process's RSS high-water mark. On Linux, VmHWM of /proc/self/status:
 * it belongs to this process image. Not ru_maxrss (process.resourceUsage()),
 * which Linux carries across the fork and exec that start a child, so that a
 * child's figure can be its parent's RSS at the fork rather than its own.
 */
function maxRssMb(): number {
  try {
    const kb = /^VmHWM:\s*(\d+)\s*kB/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    if (kb !== undefined) return Number(kb) / 1024;
  } catch {
    // not Linux
  }
  return (process.resourceUsage().maxRSS * 1024) / MB;
}

/** Samples RSS while `work` runs. */
async function measured<T>(work: () => Promise<T>): Promise<{ result: T; seconds: number; peakRssMb: number }> {
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 20);
  const started = performance.now();
  try {
    const result = await work();
    const seconds = (performance.now() - started) / 1000;
    peak = Math.max(peak, process.memoryUsage().rss);
    return { result, seconds, peakRssMb: peak / MB };
  } finally {
    clearInterval(sampler);
  }
}

function expectComplete(summary: SyncSummary, users: number, what: string): void {
  if (summary.status !== 'succeeded' || summary.usersSeen !== users) {
    throw new Error(`${what}: expected a succeeded run over ${users} users, got ${JSON.stringify(summary)}`);
  }
}

async function sync(client: ServiceClient, r: SyncRunRequest): Promise<RunResult> {
  const db = openMirror(r.dbPath);
  try {
    const { result, seconds, peakRssMb } = await measured(() =>
      runSync({ client, writer: sqliteRunWriter(db), concurrency: r.concurrency }),
    );
    expectComplete(result, r.users, `sync of ${r.users} users`);
    const checkpointSeconds = checkpointMirror(db).ms / 1000;
    return { seconds, peakRssMb: Math.max(peakRssMb, maxRssMb()), checkpointSeconds };
  } finally {
    db.close();
  }
}

/** Rows stored by a peer: the check that it stored every user. */
function expectRows(dbPath: string, users: number, what: string): void {
  const db = new Database(dbPath, { readonly: true });
  try {
    const n = db.prepare<[], number>('SELECT count(*) FROM users').pluck().get();
    if (n !== users) throw new Error(`${what}: expected ${users} users stored, found ${n}`);
  } finally {
    db.close();
  }
}

async function peerRun(r: SyncRunRequest): Promise<RunResult> {
  const what = `${r.kind} over ${r.users} users`;
  // Loaded here, by the process that runs it: the SDK alone adds ~70 MB of RSS
  // to whatever process imports it, and ours must not carry it.
  const work =
    r.kind === 'script'
      ? await import('./peer-script.js').then(
          (m) => () =>
            m.runScript({ baseUrl: r.baseUrl, apiKey: r.apiKey, apiKeyHeader: r.apiKeyHeader, dbPath: r.dbPath, maxUsers: r.users }),
        )
      : await import('./peer-sdk.js').then(
          (m) => () => m.runSdkLoop({ baseUrl: r.baseUrl, apiKey: r.apiKey, dbPath: r.dbPath, maxUsers: r.users }),
        );
  const { result, seconds, peakRssMb } = await measured<{ changed?: number; pages?: number }>(work);
  expectRows(r.dbPath, r.users, what);
  // A re-sync of an unchanged directory must change nothing: the script's skip has to work to count.
  if (r.expectUnchanged === true && result.changed !== undefined && result.changed !== 0)
    throw new Error(`${what}: re-sync changed ${result.changed} rows`);
  return { seconds, peakRssMb: Math.max(peakRssMb, maxRssMb()) };
}

/**
 * The floor: the same page requests (offset, limit 500) at the same
 * concurrency over the same HTTP client library (an undici Pool), each body
 * read and discarded. No parsing, no SQLite: the best any client can do.
 */
async function fetchOnly(r: SyncRunRequest): Promise<RunResult> {
  const origin = new URL(r.baseUrl);
  const pool = new Pool(origin.origin, { connections: r.connections });
  const prefix = origin.pathname.replace(/\/+$/, '');
  const headers: Record<string, string> = { accept: 'application/json', [r.apiKeyHeader]: r.apiKey };
  if (r.compressed === true) headers['accept-encoding'] = ACCEPT_ENCODING;
  let pages = 0;
  let bytes = 0;
  try {
    const { seconds, peakRssMb } = await measured(async () => {
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < r.users) {
          const offset = next;
          next += MAX_PAGE_LIMIT;
          const res = await pool.request({
            method: 'GET',
            path: `${prefix}/v2/user/?offset=${offset}&limit=${Math.min(MAX_PAGE_LIMIT, r.users - offset)}`,
            headers,
          });
          for await (const chunk of res.body) bytes += (chunk as Buffer).length;
          if (res.statusCode !== 200) throw new Error(`fetch-only: offset ${offset}: HTTP ${res.statusCode}`);
          pages++;
        }
      };
      await Promise.all(Array.from({ length: r.concurrency }, worker));
    });
    // Every page answered 200 with a body of about the size the sync reads.
    const expectedPages = Math.ceil(r.users / MAX_PAGE_LIMIT);
    if (pages !== expectedPages || bytes < r.users * (r.compressed === true ? 20 : 100))
      throw new Error(`fetch-only: ${pages}/${expectedPages} pages, ${bytes} bytes`);
    return { seconds, peakRssMb: Math.max(peakRssMb, maxRssMb()) };
  } finally {
    await pool.close();
  }
}

async function main(): Promise<void> {
  const r = JSON.parse(process.argv[2] ?? '{}') as SyncRunRequest;
  let result: RunResult;
  if (r.kind === 'sync') {
    const client = new ServiceClient({ baseUrl: r.baseUrl, apiKey: r.apiKey, apiKeyHeader: r.apiKeyHeader, connections: r.connections });
    try {
      result = await sync(client, r);
    } finally {
      await client.close();
    }
  } else if (r.kind === 'fetch-only') {
    result = await fetchOnly(r);
  } else {
    result = await peerRun(r);
  }
  await new Promise<void>((resolve) => process.send?.(result, undefined, {}, () => resolve()) ?? resolve());
}

await main();
