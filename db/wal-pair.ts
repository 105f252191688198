/**
 * The mirror's `-wal` and `-shm` stay in place between runs.
 *
 * SQLite deletes both when the last connection that may write closes (it
 * checkpoints, then unlinks them); a connection opened read-only never does.
 * Without them two readers fail (measured, SQLite 3.54 through
 * better-sqlite3 13 and the sqlite3 CLI):
 *  - a reader in MIRROR_GROUP (`sqlite3 -readonly`, Python's `mode=ro`):
 *    the folder is not group-writable, so it cannot create `-wal`
 *    ("attempt to write a readonly database"). With both files there and
 *    group-readable, it opens `-shm` read-only, finds no writer holding it
 *    (SQLITE_READONLY_CANTINIT) and builds its WAL index in its own memory
 *    from `-wal`: it reads, with or without a daemon running;
 *  - any reader on a full disk: creating `-shm` means growing it to 32 KiB
 *    ("disk I/O error", SQLITE_IOERR_SHMSIZE). With the pair in place the
 *    first reader truncates `-shm` and grows it back into the blocks it
 *    just freed: on a full tmpfs and a full ext4 (bavail 0), offline
 *    resolve answered.
 *
 * So a writable connection is closed behind a read-only one
 * (keepWalPairOnClose): its close is then not the last and leaves the files,
 * and the read-only one's close never deletes. better-sqlite3 offers no
 * SQLITE_FCNTL_PERSIST_WAL, which would say the same. The close's own
 * checkpoint is skipped with it; every sync checkpoints before it closes
 * (db/open.ts checkpointMirror), and what a WAL still holds is read and
 * copied by the next connection as after a crash: nothing is lost.
 *
 * Where even that fails (the pair deleted by hand or by an older build,
 * another process taking the freed blocks first) a command that reads
 * briefly falls back to openWithoutShm.
 */
import { closeSync, fchownSync, openSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';

type Db = Database.Database;

/** Makes `db.close()` leave `-wal` and `-shm` in place (see above). */
export function keepWalPairOnClose(db: Db, path: string): void {
  const close = db.close.bind(db);
  db.close = () => {
    let keeper: Db | undefined;
    try {
      keeper = new Database(path, { readonly: true, fileMustExist: true });
      // A read: the keeper now holds the shared lock that makes the writer's close not the last.
      keeper.pragma('schema_version', { simple: true });
    } catch {
      keeper?.close();
      keeper = undefined;
    }
    try {
      close();
    } finally {
      keeper?.close();
    }
    return db;
  };
}

/**
 * A read that needs no `-shm` and no new byte: the file opened for writing
 * (without creating it) in EXCLUSIVE locking mode, where SQLite keeps the
 * WAL index in the process's memory, and query_only, so nothing is written.
 * It holds the mirror's lock while open: a sync waits for it, so only
 * commands that read and exit use it, and only when the ordinary read failed
 * for want of space. SQLite deletes `-wal` at its close; an empty one is put
 * back (readers in MIRROR_GROUP need it), which is the same as none to SQLite.
 */
export function openWithoutShm(path: string, busyTimeoutMs: number): Db {
  const db = new Database(path, { fileMustExist: true });
  try {
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    db.pragma('locking_mode = EXCLUSIVE');
    db.pragma('query_only = ON');
    db.pragma('schema_version', { simple: true });
  } catch (err) {
    db.close();
    throw err;
  }
  const close = db.close.bind(db);
  db.close = () => {
    close();
    restoreEmptyWal(path);
    return db;
  };
  return db;
}

/** An empty `-wal` beside a `-shm` that lost it, with the database's mode and group; nothing when it is there or cannot be made. */
function restoreEmptyWal(path: string): void {
  try {
    statSync(`${path}-shm`);
    const db = statSync(path);
    const fd = openSync(`${path}-wal`, 'wx', db.mode & 0o640);
    try {
      fchownSync(fd, -1, db.gid);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Not there to keep company, already there, or no room for even an inode: the next writer makes it.
  }
}
