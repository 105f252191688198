/**
 * For the sink tests: a mirror file whose feed the test writes (events of
 * several types and teams, each record carrying a birth date), and the
 * delivering process: the built sinks (dist/src/sinks) in a child that the
 * test may kill -9 at any moment, as it may the daemon.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ChangeFeed } from '../../db/change-feed.js';
import { openMirror, type Db } from '../../db/open.js';
import { ensureBuilt, OTHER_TEAM, ROOT, TEAM, tempDir, userId, wireUser, type TempDir } from './mirror-fixtures.js';

export interface FeedRig {
  dir: TempDir;
  dbPath: string;
  db: Db;
  feed: ChangeFeed;
  /** Publishes `n` events, alternating: created in TEAM, created in OTHER_TEAM, updated in TEAM, deleted in TEAM. Returns their cursors. */
  publish(n: number): number[];
  close(): void;
}

let serial = 0;

export function createFeedRig(): FeedRig {
  const dir = tempDir('user-mirror-sinks-');
  const dbPath = dir.file('mirror.db');
  const db = openMirror(dbPath);
  const feed = new ChangeFeed(db);
  const publish = (n: number): number[] =>
    db.transaction(() => {
      // One writer, one transaction: the cursors follow the latest one by one (bounds() per event would scan the feed).
      const first = feed.bounds().latest + 1;
      for (let i = 0; i < n; i++) {
        const k = ++serial;
        const kind = k % 4;
        const team = kind === 1 ? OTHER_TEAM : TEAM;
        const raw = JSON.stringify(
          wireUser(k, { team_id: team, fallback_birth_date: { birth_date: '1970-01-01', source_slug: 'manual' } }),
        );
        const change = kind === 2 ? 'updated' : kind === 3 ? 'deleted' : 'created';
        const before =
          change === 'updated' ? { raw: JSON.stringify(wireUser(k, { ingestion_start: '2020-01-01' })), deletedAt: null } : undefined;
        feed.appendChange(
          { change, cause: null, userId: userId(k), teamId: team, clientUserId: `client-${k}`, raw, before },
          new Date().toISOString(),
        );
      }
      return Array.from({ length: n }, (_, i) => first + i);
    })();
  return {
    dir,
    dbPath,
    db,
    feed,
    publish,
    close: () => {
      db.close();
      dir.remove();
    },
  };
}

const CHILD = `
import { openMirror } from ${JSON.stringify(join(ROOT, 'dist/db/open.js'))};
import { ChangeFeed } from ${JSON.stringify(join(ROOT, 'dist/db/change-feed.js'))};
import { parseSinks } from ${JSON.stringify(join(ROOT, 'dist/src/sinks/sinks-file.js'))};
import { startSinks } from ${JSON.stringify(join(ROOT, 'dist/src/sinks/start.js'))};
import { silentLogger } from ${JSON.stringify(join(ROOT, 'dist/src/runtime/log.js'))};
const db = openMirror(process.env.SINK_TEST_MIRROR);
startSinks(new ChangeFeed(db), parseSinks(JSON.parse(process.env.SINK_TEST_SINKS), process.env), silentLogger);
setInterval(() => undefined, 60_000);
`;

/** The built sinks delivering `sinks` (a SINKS_FILE's JSON) from the mirror at `dbPath`, in a child process. */
export function startSinkChild(dbPath: string, sinks: unknown): ChildProcess {
  ensureBuilt();
  return spawn(process.execPath, ['--input-type=module', '-e', CHILD], {
    env: { ...process.env, SINK_TEST_MIRROR: dbPath, SINK_TEST_SINKS: JSON.stringify(sinks) },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

export async function killHard(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
}

/**
 * Publishes batches of 30-89 events and kills the delivering child -9
 * `kills` times, each at a random moment 50-500 ms after a batch (mid-way
 * through a delivery, or between two); returns the child left running.
 */
export async function publishWhileKilling(rig: FeedRig, sinks: unknown, kills: number): Promise<ChildProcess> {
  let child = startSinkChild(rig.dbPath, sinks);
  for (let i = 0; i < kills; i++) {
    rig.publish(30 + Math.floor(Math.random() * 60));
    await sleep(50 + Math.random() * 450);
    await killHard(child);
    child = startSinkChild(rig.dbPath, sinks);
  }
  return child;
}
