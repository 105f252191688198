/**
 * bench:sync's SDK peer: the loop a user writes with the official SDK
 * (@tryvital/vital-node). `client.user.getAll` page after page until a page
 * comes back short, one SQLite transaction per page upserting each user into
 * a plain table and replacing its sources. The SDK's and SQLite's defaults
 * throughout (rollback journal, synchronous=FULL, the SDK's retries), as such
 * a loop is written.
 *
 * A script of its own, as such a loop is run: bench/sync.ts starts it with
 * its SdkLoopOptions as one JSON argument and times the process to its exit
 * (bench/scenario-process.ts).
 */
import { VitalClient } from '@tryvital/vital-node';
import Database from 'better-sqlite3';
import { reportRun, scenarioRequest } from './scenario-process.js';

export interface SdkLoopOptions {
  baseUrl: string;
  apiKey: string;
  dbPath: string;
  /** Stop after this many users (the bench may run peers on fewer users than the directory holds). */
  maxUsers: number;
}

const PAGE = 500;

async function runSdkLoop(o: SdkLoopOptions): Promise<{ pages: number }> {
  // The SDK sends its key in x-vital-api-key: bench/sync-stand-in.ts takes the key in that header.
  const client = new VitalClient({ apiKey: o.apiKey, baseUrl: o.baseUrl });
  const db = new Database(o.dbPath);
  db.exec(`CREATE TABLE IF NOT EXISTS users (user_id TEXT PRIMARY KEY, team_id TEXT, client_user_id TEXT, created_on TEXT, raw TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS users_client_user_id ON users (client_user_id);
    CREATE TABLE IF NOT EXISTS connected_sources (user_id TEXT NOT NULL, slug TEXT NOT NULL, name TEXT, created_on TEXT, PRIMARY KEY (user_id, slug));`);
  const upsert = db.prepare(`INSERT INTO users (user_id, team_id, client_user_id, created_on, raw) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (user_id) DO UPDATE SET team_id = excluded.team_id, client_user_id = excluded.client_user_id,
      created_on = excluded.created_on, raw = excluded.raw`);
  const dropSources = db.prepare('DELETE FROM connected_sources WHERE user_id = ?');
  const addSource = db.prepare('INSERT OR REPLACE INTO connected_sources (user_id, slug, name, created_on) VALUES (?, ?, ?, ?)');
  try {
    let pages = 0;
    for (let offset = 0; offset < o.maxUsers; offset += PAGE) {
      const page = await client.user.getAll({ offset, limit: Math.min(PAGE, o.maxUsers - offset) });
      pages++;
      db.transaction(() => {
        for (const u of page.users) {
          upsert.run(u.userId, u.teamId, u.clientUserId, u.createdOn.toISOString(), JSON.stringify(u));
          dropSources.run(u.userId);
          for (const s of u.connectedSources) addSource.run(u.userId, s.provider.slug, s.provider.name, s.createdOn.toISOString());
        }
      })();
      if (page.users.length < PAGE) break;
    }
    return { pages };
  } finally {
    db.close();
  }
}

const options = scenarioRequest<SdkLoopOptions>();
await reportRun(() => runSdkLoop(options));
