/**
 * What the replica (src/replica) reads: pages of active users and resolves,
 * each with the sync runs they reflect, on its own readonly connection.
 *
 * Consistency: every read of one event-loop turn (the requests a server
 * handles between two polls of its sockets) comes from one read transaction,
 * opened by the turn's first read and ended after it (setImmediate), so each
 * answer sees one committed snapshot (WAL) and a sync that publishes
 * mid-request shows up entirely in a later turn, never half in this one. Why
 * a turn and not a statement per request: a busy server answers many
 * requests a turn, and reading the freshness once for all of them instead of
 * beside every lookup took a resolve from 23 to 18-20 µs of CPU
 * (bench/history/README.md, bench:replica). A reader never blocks the writer and is never blocked
 * by it; a turn lasts as long as the answers computed in it (about a
 * millisecond under load), and holds a checkpoint back no longer.
 *
 * The freshness itself is read again only when the snapshot changed: a
 * turn's first read is PRAGMA data_version, which changes whenever another
 * connection committed anything since this connection's last transaction
 * (this one only reads), so a turn whose version equals the last one read
 * the very same database and the freshness read then holds. A publish is a
 * commit, so it is never missed.
 *
 * Order: active users by `users.rowid`, the order in which the mirror first
 * stored them (the first sync stores them by user_id; later ones append).
 * A restored user keeps its place. SQL's OFFSET walks every skipped row, so
 * paging a big mirror by offset would cost O(n²); instead a position → rowid
 * index of the active users is kept in memory, rebuilt inside the page's own
 * transaction whenever the set of active users may have changed.
 *
 * Raw records go onto the wire as the bytes SQLite holds. A page reads them
 * as BLOBs. A resolve reads its one record as text, which costs half a
 * Buffer's making (a native Buffer per record was 2 of a resolve's ~5 µs of
 * lookup): text decoded from valid UTF-8 encodes back to the same bytes,
 * and a record that is not valid UTF-8 decodes with U+FFFD in it, so one
 * holding U+FFFD is read again as bytes.
 */
import { openChangeFeed, type ChangeFeed, type FeedPage } from './change-feed.js';
import type { Db } from './open.js';
import { MirrorNotReadyError } from './mirror-reader.js';
import { lineageColumns, lineageOf, type LineageFreshness, type LineageRow } from './lineage-freshness.js';

export interface Freshness {
  /** The latest run that published (succeeded or partial): what the answer reflects. */
  runId: number | null;
  /** When the latest succeeded (complete) run finished. */
  syncedAt: string | null;
  /** The leader's side of a chain of mirrors (db/lineage-freshness.ts), read in the same statement. */
  lineage?: LineageFreshness;
}

export interface ResolveAnswer extends Freshness {
  /**
   * The user's record exactly as last received, or undefined if no active
   * user has that id: as text when the stored bytes are valid UTF-8 (then
   * its UTF-8 encoding is those very bytes), else as the bytes.
   */
  raw: string | Buffer | undefined;
}

export interface PageAnswer extends Freshness {
  /** The records of the page, as received, in order. */
  users: Buffer[];
  /** Active users in the snapshot. */
  total: number;
}

interface FreshnessRow extends LineageRow {
  run_id: number | null;
  synced_at: string | null;
}

const FRESHNESS = `
  (SELECT id FROM sync_runs WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT 1) AS run_id,
  (SELECT finished_at FROM sync_runs WHERE status = 'succeeded' ORDER BY id DESC LIMIT 1) AS synced_at`;

function freshnessOf(row: FreshnessRow | undefined): Freshness {
  if (row === undefined) return { runId: null, syncedAt: null };
  const lineage = lineageOf(row);
  return { runId: row.run_id, syncedAt: row.synced_at, ...(lineage && { lineage }) };
}

/**
 * Every write that changes which users are active, or adds one, also writes
 * a user_changes row in the same transaction (db/mirror-store.ts,
 * db/user-writes.ts), and its ids only grow: so an unchanged max id means an
 * unchanged set of active rowids. Sync lease renewals and run bookkeeping
 * commit often during a sync and leave it alone, which PRAGMA data_version
 * would not.
 */
const CHANGE_KEY = `(SELECT max(id) FROM user_changes) AS change_key`;

/** The in-memory position → rowid index of the active users, for one change key. */
interface ActiveIndex {
  key: number | null | undefined;
  rowids: Float64Array;
}

const SCHEMA_VERSION = 1;

const RESOLVE = `FROM users INDEXED BY users_client_user_id WHERE client_user_id = ? AND deleted_at IS NULL LIMIT 1`;
/** What a UTF-8 decoder puts in place of bytes that are not valid UTF-8. */
const REPLACEMENT_CHARACTER = '\uFFFD';

export interface ReplicaReaderOptions {
  /**
   * Called inside a page's read transaction, between its first read and the
   * page's rows. Tests commit a write there, from another connection, to
   * show the page ignores it: the window is too short to hit by timing.
   */
  midRead?: () => void;
}

export class ReplicaReader {
  private readonly s;
  private index: ActiveIndex = { key: undefined, rowids: new Float64Array(0) };
  /** The freshness of this turn's snapshot, while its read transaction is open. */
  private turn: Freshness | undefined;
  /** The last freshness read, and the data_version of the snapshot it was read in. */
  private last: { version: number; freshness: Freshness } | undefined;
  private readonly endTurn = () => {
    this.turn = undefined;
    if (this.db.open && this.db.inTransaction) this.s.commit.run();
  };
  private readonly pageTx: (offset: number, limit: number) => PageAnswer;
  private feed: ChangeFeed | undefined;

  constructor(
    private readonly db: Db,
    private readonly options: ReplicaReaderOptions = {},
  ) {
    const version = db.pragma('user_version', { simple: true });
    if (typeof version !== 'number' || version < SCHEMA_VERSION) {
      throw new MirrorNotReadyError(`${db.name} holds no mirror yet (schema version ${String(version)}); run a sync first`);
    }
    const lineage = lineageColumns(db);
    this.s = {
      begin: db.prepare('BEGIN'),
      commit: db.prepare('COMMIT'),
      resolve: db.prepare<[string], string>(`SELECT raw ${RESOLVE}`).pluck(),
      resolveBytes: db.prepare<[string], Buffer>(`SELECT CAST(raw AS BLOB) ${RESOLVE}`).pluck(),
      freshness: db.prepare<[], FreshnessRow>(`SELECT ${FRESHNESS}${lineage}`),
      // Its first read opens the turn's read transaction: the version is that snapshot's.
      dataVersion: db.prepare<[], number>('PRAGMA data_version').pluck(),
      head: db.prepare<[], FreshnessRow & { change_key: number | null }>(`SELECT ${FRESHNESS}${lineage}, ${CHANGE_KEY}`),
      activeCount: db
        .prepare<[], number>(`SELECT count(*) FROM users INDEXED BY users_active_client_user WHERE deleted_at IS NULL`)
        .pluck(),
      // The partial index holds exactly the active users and is a fraction of the table's size;
      // its order is not rowid order, so the ids are sorted here.
      activeRowids: db.prepare<[], number>(`SELECT rowid FROM users INDEXED BY users_active_client_user WHERE deleted_at IS NULL`).pluck(),
      range: db
        .prepare<[number, number, number], Buffer>(
          `SELECT CAST(raw AS BLOB) FROM users WHERE rowid BETWEEN ? AND ? AND deleted_at IS NULL ORDER BY rowid LIMIT ?`,
        )
        .pluck(),
    };
    this.pageTx = db.transaction((offset: number, limit: number) => this.readPage(offset, limit));
  }

  resolve(clientUserId: string): ResolveAnswer {
    const freshness = this.freshness();
    const text = this.s.resolve.get(clientUserId);
    // U+FFFD: the stored bytes may not be valid UTF-8 (or hold the character itself); the bytes are sure.
    const raw = text === undefined || !text.includes(REPLACEMENT_CHARACTER) ? text : this.s.resolveBytes.get(clientUserId);
    return { raw, ...freshness };
  }

  /** The freshness of this turn's snapshot; the turn's first read opens it. */
  freshness(): Freshness {
    if (this.turn !== undefined) return this.turn;
    // Ended after the turn whatever happens next: a failed read below must not leave it open for good.
    if (!this.db.inTransaction) {
      this.s.begin.run();
      setImmediate(this.endTurn);
    }
    const version = this.s.dataVersion.get() ?? -1;
    if (this.last?.version !== version) this.last = { version, freshness: freshnessOf(this.s.freshness.get()) };
    this.turn = this.last.freshness;
    return this.turn;
  }

  /** One read transaction (this turn's, or its own when called outside one). */
  page(offset: number, limit: number): PageAnswer {
    return this.pageTx(offset, limit);
  }

  private readPage(offset: number, limit: number): PageAnswer {
    const head = this.s.head.get() ?? { run_id: null, synced_at: null, change_key: null };
    const freshness = freshnessOf(head);
    if (head.change_key !== this.index.key) this.rebuildIndex(head.change_key);
    this.options.midRead?.();
    let slice = this.slice(offset, limit);
    if (slice === undefined) {
      // The index disagrees with the snapshot: some writer broke the invariant above. Heal.
      this.rebuildIndex(head.change_key);
      slice = this.slice(offset, limit);
      if (slice === undefined) throw new Error('replica index does not match the mirror snapshot');
    }
    return { ...freshness, ...slice };
  }

  /** Undefined when the snapshot holds fewer active users in the range than the index says. */
  private slice(offset: number, limit: number): { users: Buffer[]; total: number } | undefined {
    const { rowids } = this.index;
    const total = rowids.length;
    const end = Math.min(offset + limit, total);
    if (offset >= end) return { users: [], total };
    const users = this.s.range.all(rowids[offset] ?? 0, rowids[end - 1] ?? 0, end - offset);
    return users.length === end - offset ? { users, total } : undefined;
  }

  private rebuildIndex(key: number | null): void {
    const rowids = new Float64Array(this.s.activeCount.get() ?? 0);
    let n = 0;
    for (const rowid of this.s.activeRowids.iterate()) rowids[n++] = rowid;
    rowids.sort();
    this.index = { key, rowids: n === rowids.length ? rowids : rowids.subarray(0, n) };
  }

  /**
   * The change feed after `after` (undefined: from the oldest event held),
   * or undefined when this mirror has no feed yet (written by an older
   * version, before its next sync). One statement: one snapshot.
   */
  changes(after: number | undefined, limit: number): FeedPage | undefined {
    const feed = (this.feed ??= openChangeFeed(this.db));
    if (feed === undefined) return undefined;
    return this.db.transaction(() => feed.page(after ?? feed.bounds().prunedThrough, limit))();
  }

  close(): void {
    this.endTurn();
    this.db.close();
  }
}
