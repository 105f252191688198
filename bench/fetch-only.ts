/**
 * bench:sync's fetch-only floor, a process of its own: the same page
 * requests as a sync (offset, limit 500) at the same concurrency over the
 * same HTTP client library (an undici Pool), each body read and discarded.
 * No parsing, no SQLite: the best any client can do. Reports how many pages
 * and bytes it read; bench/sync.ts checks that every page was answered.
 */
import { Pool } from 'undici';
import { ACCEPT_ENCODING } from '../src/service/content-encoding.js';
import { reportRun, scenarioRequest } from './scenario-process.js';

export interface FetchOnlyRequest {
  baseUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  users: number;
  concurrency: number;
  /** HTTP connections of the pool. */
  connections: number;
  /** Ask for compressed bodies (and read them still compressed), as ours and fetch do. */
  compressed?: boolean;
}

/** MAX_PAGE_LIMIT of src/service/schemas.ts, not imported: that module loads zod, which the floor has no use for. */
const PAGE = 500;

async function fetchOnly(r: FetchOnlyRequest): Promise<{ pages: number; bytes: number }> {
  const origin = new URL(r.baseUrl);
  const pool = new Pool(origin.origin, { connections: r.connections });
  const prefix = origin.pathname.replace(/\/+$/, '');
  const headers: Record<string, string> = { accept: 'application/json', [r.apiKeyHeader]: r.apiKey };
  if (r.compressed === true) headers['accept-encoding'] = ACCEPT_ENCODING;
  let pages = 0;
  let bytes = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < r.users) {
      const offset = next;
      next += PAGE;
      const res = await pool.request({
        method: 'GET',
        path: `${prefix}/v2/user/?offset=${offset}&limit=${Math.min(PAGE, r.users - offset)}`,
        headers,
      });
      for await (const chunk of res.body) bytes += (chunk as Buffer).length;
      if (res.statusCode !== 200) throw new Error(`fetch-only: offset ${offset}: HTTP ${res.statusCode}`);
      pages++;
    }
  };
  try {
    await Promise.all(Array.from({ length: r.concurrency }, worker));
    return { pages, bytes };
  } finally {
    await pool.close();
  }
}

const request = scenarioRequest<FetchOnlyRequest>();
await reportRun(() => fetchOnly(request));
