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
 * (bench/README.md). A reader never blocks the writer and is never blocked
 * by it; a turn lasts as long as the answers computed in it (about a
 * millisecond under load), and holds a checkpoint back no longer.
 *
 * Order: active users by `users.rowid`, the order in which the mirror first
 * stored them (the first sync stores them by user_id; later ones append).
 * A restored user keeps its place. SQL's OFFSET walks every skipped row, so
 * paging a big mirror by offset would cost O(n²); instead a position → rowid
 * index of the active users is kept in memory, rebuilt inside the page's own
 * transaction whenever the set of active users may have changed.
 *
 * Raw records are read as BLOBs: the UTF-8 bytes SQLite holds go onto the
 * wire as they are, never decoded into a JS string and encoded again.
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
  /** The user's record exactly as last received, or undefined if no active user has that id. */
  raw: Buffer | undefined;
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
      resolve: db
        .prepare<[string], Buffer>(
          `SELECT CAST(raw AS BLOB) FROM users INDEXED BY users_client_user_id WHERE client_user_id = ? AND deleted_at IS NULL LIMIT 1`,
        )
        .pluck(),
      freshness: db.prepare<[], FreshnessRow>(`SELECT ${FRESHNESS}${lineage}`),
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
    return { raw: this.s.resolve.get(clientUserId), ...freshness };
  }

  /** The freshness of this turn's snapshot; the turn's first read opens it. */
  freshness(): Freshness {
    if (this.turn !== undefined) return this.turn;
    // Ended after the turn whatever happens next: a failed read below must not leave it open for good.
    if (!this.db.inTransaction) {
      this.s.begin.run();
      setImmediate(this.endTurn);
    }
    this.turn = freshnessOf(this.s.freshness.get());
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
