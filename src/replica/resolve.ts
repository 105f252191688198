/**
 * Offline resolve: client_user_id → the service's User, from the mirror file
 * alone, with no network and no key. Meant to be called many times from one
 * process: the mirror is opened readonly once per path and its statement is
 * reused, so each call costs one indexed lookup; the record is parsed only
 * when the caller reads `user` (`raw` is the stored text, for callers that
 * forward it). The
 * readonly connection reads the last published snapshot while a sync writes
 * (WAL), and never blocks it.
 */
import { existsSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { openMirror, type Db } from '../../db/open.js';
import { MirrorReader, type LookupOptions, type MirrorEntry as StoredEntry } from '../../db/mirror-reader.js';
import type { User } from '../service/schemas.js';
import { parseUser } from '../service/user-record.js';

export type ResolveOptions = LookupOptions;
export type MirrorEntry = StoredEntry<User>;

/** `validate`: the stored record parsed again as the sync parses a listed one. */
export function checkStoredUser(record: unknown): User {
  const parsed = parseUser(record);
  if (!parsed.ok) throw new Error(`stored record does not parse: ${parsed.issues}`);
  return parsed.user;
}

export class MirrorMissingError extends Error {
  override name = 'MirrorMissingError';
}

interface OpenReader {
  reader: MirrorReader<User>;
  /** The readonly connection, for other readers of the same file (history). */
  db: Db;
  close: () => void;
}

const readers = new Map<string, OpenReader>();

/** Opens the mirror at `dbPath` readonly. The caller closes it. */
export function openResolver(dbPath: string): OpenReader {
  if (!existsSync(dbPath)) throw new MirrorMissingError(`no mirror database at ${dbPath}; run a sync first`);
  // Offline resolve and history read and exit: on a full disk they may read without a -shm (db/wal-pair.ts).
  const db = openMirror(dbPath, { readonly: true, mapped: true, readWhenFull: true });
  try {
    return { reader: new MirrorReader(db, checkStoredUser), db, close: () => db.close() };
  } catch (err) {
    db.close();
    throw err;
  }
}

/**
 * The user with `clientUserId`, or undefined. Deleted users only with
 * `includeDeleted`. Keeps the mirror open for the next call: see closeResolvers.
 */
export function resolveOffline(dbPath: string, clientUserId: string, options: ResolveOptions = {}): MirrorEntry | undefined {
  return (readers.get(dbPath) ?? readerFor(dbPath)).reader.lookup(clientUserId, options);
}

/**
 * Many client_user_ids at once, answered from one snapshot of the mirror
 * (one read transaction). Ids not found are absent from the map.
 */
export function resolveOfflineMany(
  dbPath: string,
  clientUserIds: Iterable<string>,
  options: ResolveOptions = {},
): Map<string, MirrorEntry> {
  return (readers.get(dbPath) ?? readerFor(dbPath)).reader.lookupMany(clientUserIds, options);
}

/** Keyed by the path as given (the hot path) and as resolved (one connection per file). */
function readerFor(dbPath: string): OpenReader {
  const absolute = resolvePath(dbPath);
  const open = readers.get(absolute) ?? openResolver(absolute);
  readers.set(absolute, open);
  readers.set(dbPath, open);
  return open;
}

/** Closes every mirror resolveOffline opened. */
export function closeResolvers(): void {
  for (const open of new Set(readers.values())) open.close();
  readers.clear();
}
