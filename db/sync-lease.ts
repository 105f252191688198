/**
 * The sync lease: at most one sync writes a mirror at a time, whichever
 * process runs it.
 *
 * Why in SQLite and not in Redis: the thing to protect is the mirror file,
 * and the file is the one thing every writer shares. A Redis lock keyed by
 * MIRROR_ID would miss a `sync --once` run by hand, or two daemons on one
 * host pointed at different Redis servers but the same file. BEGIN IMMEDIATE
 * takes SQLite's write lock, so the read-decide-write below is atomic across
 * processes.
 *
 * A sync holds the mirror's write lock for its whole run (db/mirror-store.ts),
 * so its renewals are uncommitted until the run ends: to another process the
 * lease may look expired. Taking it needs the write lock, though, which waits
 * for the run's COMMIT; when the wait runs out (SQLITE_BUSY) the lease is held.
 *
 * A lease, not a lock: it expires unless renewed, so a holder that died
 * without releasing (SIGKILL, OOM, power) does not block the mirror forever.
 * On the same host a dead holder's pid frees the lease at once; a holder on
 * another host (a shared file system) is trusted until its lease expires.
 *
 * The table comes from migration 3 (db/migrations/003-sync-lease.ts), which
 * openMirror applies on open: a holder's connection must come from openMirror,
 * not read-only, or the table may not exist yet.
 *
 * Every sync goes through withSyncLease, so the daemon's worker and
 * `sync --once` cannot drift apart in how they take, keep and give up the
 * lease.
 */
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import type { Db } from './open.js';
import { isBusy } from './busy-retry.js';

export interface LeaseRow {
  holder: string;
  host: string;
  pid: number;
  acquiredAt: number;
  expiresAt: number;
}

export interface LeaseClaimant {
  host: string;
}

/** Pure: may `me` take the lease that `current` describes at `now`? */
export function leaseIsFree(current: LeaseRow | undefined, me: LeaseClaimant, now: number, pidAlive: (pid: number) => boolean): boolean {
  if (current === undefined) return true;
  if (current.expiresAt <= now) return true;
  return current.host === me.host && !pidAlive(current.pid);
}

const DEFAULT_LEASE_TTL_MS = 60_000;

export interface SyncLeaseOptions {
  ttlMs?: number;
  /** Called once if a renewal finds the lease gone: the holder must stop writing. */
  onLost?: () => void;
  now?: () => number;
  host?: string;
}

export type AcquireResult = { acquired: true; lease: HeldLease } | { acquired: false; heldBy: LeaseRow };

export interface HeldLease {
  readonly holder: string;
  /** Stops renewing and deletes the row if it is still ours. Idempotent. */
  release(): void;
}

interface LeaseDbRow {
  holder: string;
  host: string;
  pid: number;
  acquired_at: number;
  expires_at: number;
}

export function acquireSyncLease(db: Db, options: SyncLeaseOptions = {}): AcquireResult {
  const ttlMs = options.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const now = options.now ?? Date.now;
  const host = options.host ?? hostname();
  const holder = `${host}:${process.pid}:${randomUUID()}`;

  const claim = db.transaction((): LeaseRow | undefined => {
    const current = readLease(db);
    const t = now();
    if (!leaseIsFree(current, { host }, t, pidAlive)) return current;
    db.prepare(
      `INSERT INTO sync_lease (id, holder, host, pid, acquired_at, expires_at) VALUES (1, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, host = excluded.host, pid = excluded.pid,
         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
    ).run(holder, host, process.pid, t, t + ttlMs);
    return undefined;
  });

  let heldBy: LeaseRow | undefined;
  try {
    heldBy = claim.immediate();
  } catch (err) {
    // A sync holds the mirror's write lock for its whole run, lease renewals included (uncommitted):
    // the lease it shows may look expired, but the lock says it is held.
    if (!isBusy(err)) throw err;
    heldBy = readLease(db) ?? { holder: 'unknown (the mirror is write-locked)', host: '', pid: 0, acquiredAt: 0, expiresAt: 0 };
  }
  if (heldBy !== undefined) return { acquired: false, heldBy };

  let released = false;
  const renew = db.prepare('UPDATE sync_lease SET expires_at = ? WHERE id = 1 AND holder = ?');
  const timer = setInterval(
    () => {
      if (released) return;
      let kept: boolean;
      try {
        kept = renew.run(now() + ttlMs, holder).changes === 1;
      } catch {
        // A busy or closed database: the lease runs on until it expires; the next renewal may succeed.
        return;
      }
      if (!kept) {
        released = true;
        clearInterval(timer);
        options.onLost?.();
      }
    },
    Math.max(1_000, Math.floor(ttlMs / 3)),
  );
  timer.unref();

  return {
    acquired: true,
    lease: {
      holder,
      release() {
        if (released) return;
        released = true;
        clearInterval(timer);
        try {
          db.prepare('DELETE FROM sync_lease WHERE id = 1 AND holder = ?').run(holder);
        } catch {
          // Closed or busy database: the row expires by itself.
        }
      },
    },
  };
}

export interface WithSyncLeaseOptions {
  ttlMs?: number;
  /** Aborts the work as well, e.g. on shutdown or SIGINT. */
  signal?: AbortSignal;
  /** Called once if the lease is lost, just before the work's signal aborts. */
  onLost?: () => void;
}

export type LeasedOutcome<T> = { ran: true; value: T } | { ran: false; heldBy: LeaseRow };

/**
 * Runs `work` while holding the sync lease, or not at all if another live
 * process holds it. The lease is renewed meanwhile and released when `work`
 * settles. `work` gets a signal that aborts if the lease is lost: from then
 * on another sync may be writing, so this one must stop writing.
 */
export async function withSyncLease<T>(
  db: Db,
  options: WithSyncLeaseOptions,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<LeasedOutcome<T>> {
  const lost = new AbortController();
  const claim = acquireSyncLease(db, {
    ttlMs: options.ttlMs,
    onLost: () => {
      options.onLost?.();
      lost.abort(new Error('sync lease lost'));
    },
  });
  if (!claim.acquired) return { ran: false, heldBy: claim.heldBy };
  const signal = options.signal === undefined ? lost.signal : AbortSignal.any([options.signal, lost.signal]);
  try {
    return { ran: true, value: await work(signal) };
  } finally {
    claim.lease.release();
  }
}

function readLease(db: Db): LeaseRow | undefined {
  const row = db.prepare<[], LeaseDbRow>('SELECT holder, host, pid, acquired_at, expires_at FROM sync_lease WHERE id = 1').get();
  return row && { holder: row.holder, host: row.host, pid: row.pid, acquiredAt: row.acquired_at, expiresAt: row.expires_at };
}

/** Whether process `pid` runs on this host (one of another account counts). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
