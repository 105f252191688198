/**
 * bench:sync's competent script: what a good engineer writes in an afternoon
 * without this project. 4 pages in flight over keep-alive fetch, JSON.parse,
 * one transaction for the whole run, prepared upserts that leave unchanged
 * rows alone, sources rewritten only for users whose row changed, WAL with
 * synchronous=NORMAL. No validation, no change log, no deletions.
 *
 * A script of its own, as such a script is run: bench/sync.ts starts it with
 * its ScriptOptions as one JSON argument and times the process to its exit;
 * it prints how many rows it changed (bench/scenario-process.ts).
 */
import Database from 'better-sqlite3';
import { Agent, fetch } from 'undici';
import { reportRun, scenarioRequest } from './scenario-process.js';

export interface ScriptOptions {
  baseUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  dbPath: string;
  /** Stop after this many users (the bench may run peers on fewer users than the directory holds). */
  maxUsers: number;
}

interface Source {
  provider?: { slug: string; name: string };
  created_on: string;
}
interface User {
  user_id: string;
  team_id: string;
  client_user_id: string;
  created_on: string;
  connected_sources: Source[];
}

const PAGE = 500;
const IN_FLIGHT = 4;

async function runScript(o: ScriptOptions): Promise<{ changed: number }> {
  const db = new Database(o.dbPath);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(`CREATE TABLE IF NOT EXISTS users (user_id TEXT PRIMARY KEY, team_id TEXT, client_user_id TEXT, created_on TEXT, raw TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS users_client_user_id ON users (client_user_id);
    CREATE TABLE IF NOT EXISTS connected_sources (user_id TEXT NOT NULL, slug TEXT NOT NULL, name TEXT, created_on TEXT, PRIMARY KEY (user_id, slug)) WITHOUT ROWID;`);
  const upsert = db.prepare(`INSERT INTO users (user_id, team_id, client_user_id, created_on, raw) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (user_id) DO UPDATE SET team_id = excluded.team_id, client_user_id = excluded.client_user_id,
      created_on = excluded.created_on, raw = excluded.raw WHERE users.raw IS NOT excluded.raw`);
  const dropSources = db.prepare('DELETE FROM connected_sources WHERE user_id = ?');
  const addSource = db.prepare('INSERT OR REPLACE INTO connected_sources (user_id, slug, name, created_on) VALUES (?, ?, ?, ?)');
  const dispatcher = new Agent({ connections: IN_FLIGHT, keepAliveTimeout: 30_000 });
  const headers = { accept: 'application/json', [o.apiKeyHeader]: o.apiKey };
  const get = async (offset: number, limit: number): Promise<{ users: User[]; total: number }> => {
    const res = await fetch(`${o.baseUrl}/v2/user/?offset=${offset}&limit=${limit}`, { headers, dispatcher });
    if (!res.ok) throw new Error(`GET offset ${offset}: HTTP ${res.status}`);
    return JSON.parse(await res.text()) as { users: User[]; total: number };
  };
  let changed = 0;
  const write = (users: User[]): void => {
    for (const u of users) {
      if (upsert.run(u.user_id, u.team_id, u.client_user_id, u.created_on, JSON.stringify(u)).changes === 0) continue;
      changed++;
      dropSources.run(u.user_id);
      for (const s of u.connected_sources) if (s.provider) addSource.run(u.user_id, s.provider.slug, s.provider.name, s.created_on);
    }
  };
  try {
    db.exec('BEGIN');
    const first = await get(0, Math.min(PAGE, o.maxUsers));
    const end = Math.min(first.total, o.maxUsers);
    write(first.users);
    let next = first.users.length;
    const worker = async (): Promise<void> => {
      while (next < end) {
        const offset = next;
        next += PAGE;
        write((await get(offset, Math.min(PAGE, end - offset))).users);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    db.exec('COMMIT');
    return { changed };
  } finally {
    if (db.inTransaction) db.exec('ROLLBACK');
    db.close();
    await dispatcher.close();
  }
}

const options = scenarioRequest<ScriptOptions>();
await reportRun(() => runScript(options));
