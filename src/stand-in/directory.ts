/**
 * The stand-in's user directory: `users` generated records (plus any loaded
 * from a file, which come first), in a stable order by internal index.
 *
 * Only mutation state is held — deleted indexes, how many were appended,
 * update revisions — and records are re-derived per request, so memory does
 * not grow with the directory. Offsets are positions in the *current* list:
 * deleting a user before a client's cursor shifts later users back, which is
 * exactly the offset-pagination drift a mirror must survive.
 */
import { ByteBuilder } from './byte-builder.js';
import {
  clientUserIdFor,
  generateUser,
  generateUserJson,
  indexFromClientUserId,
  indexFromUserId,
  userIdFor,
  userKeys,
  type UserKeys,
} from './user-generator.js';
import { bump, reviseUser, UNREVISED, type Change, type Direction, type JsonRecord, type Revision } from './revision.js';
import { SparseDeletions } from './sparse-deletions.js';
import { listingOrder } from './listing-order.js';

export type DirectoryRecord = JsonRecord;

export interface DirectoryOptions {
  seed: number;
  /** How many generated users follow the file records. */
  users: number;
  fileRecords?: readonly JsonRecord[];
  /** Share (0..1) of generated users served in an older or odd shape; default 0, today's shape only. */
  legacyRecords?: number;
  /** Any time of the day generated dates end at; default the current UTC day. */
  today?: Date | number;
}

/** Where a user stands: listed, deleted (restorable), or not a user of this directory at all. */
export type UserState = 'live' | 'deleted' | 'unknown';

/** A user, by its `user_id` or by its internal index (stable, unlike a position). */
export type UserRef = string | number;

export class Directory {
  readonly teamId: string;
  private readonly keys: UserKeys;
  private readonly file: readonly JsonRecord[];
  private readonly fileByUserId = new Map<string, number>();
  private readonly fileByClientId = new Map<string, number>();
  private readonly deletions = new SparseDeletions();
  private readonly revisions = new Map<number, Revision>();
  private universe: number;

  constructor(options: DirectoryOptions) {
    this.keys = userKeys(options.seed, options.legacyRecords, options.today);
    this.teamId = this.keys.teamId;
    this.file = options.fileRecords ?? [];
    this.universe = this.file.length + options.users;
    this.file.forEach((record, index) => {
      const userId = stringField(record, 'user_id');
      const clientId = stringField(record, 'client_user_id');
      if (userId !== undefined && !this.fileByUserId.has(userId)) this.fileByUserId.set(userId, index);
      if (clientId !== undefined && !this.fileByClientId.has(clientId)) this.fileByClientId.set(clientId, index);
    });
  }

  /** 00:00 UTC of the day generated dates end at. */
  get today(): number {
    return this.keys.today;
  }

  /** Live users: what `total` reports. */
  get size(): number {
    return this.universe - this.deletions.size;
  }

  /** Appends `count` generated users; returns their user_ids. */
  add(count: number): string[] {
    if (!Number.isInteger(count) || count < 0) throw new RangeError('add: count must be a non-negative integer');
    const first = this.universe;
    this.universe += count;
    return Array.from({ length: count }, (_, k) => userIdFor(this.keys, first + k));
  }

  /** Deletes live users; returns how many were deleted (unknown and already-deleted refs are skipped). */
  delete(refs: readonly UserRef[]): number {
    let deleted = 0;
    for (const ref of refs) {
      const index = this.liveIndex(ref);
      if (index !== undefined && this.deletions.add(index)) deleted++;
    }
    return deleted;
  }

  /** Lists deleted users again, as they were (upstream restoring an account); returns how many came back. */
  restore(refs: readonly UserRef[]): number {
    let restored = 0;
    for (const ref of refs) {
      const index = this.knownIndex(ref);
      if (index !== undefined && this.deletions.remove(index)) restored++;
    }
    return restored;
  }

  /**
   * Changes a live user's record (see ./revision.ts): by default a new
   * `fallback_time_zone`; with `connected_sources` a source connected or
   * disconnected (`direction`, or whichever applies), on top of every
   * earlier update. Returns the new record, or undefined when the user is
   * not live; a RangeError when `direction` cannot apply.
   */
  update(ref: UserRef, change: Change = 'fallback_time_zone', direction?: Direction): DirectoryRecord | undefined {
    const index = this.liveIndex(ref);
    if (index === undefined) return undefined;
    const base = this.file[index] ?? generateUser(this.keys, index);
    this.revisions.set(index, bump(base, index, this.revisions.get(index) ?? UNREVISED, change, direction));
    return this.recordAt(index);
  }

  state(ref: UserRef): UserState {
    const index = this.knownIndex(ref);
    if (index === undefined) return 'unknown';
    return this.deletions.has(index) ? 'deleted' : 'live';
  }

  get(userId: string): DirectoryRecord | undefined {
    const index = this.liveIndex(userId);
    return index === undefined ? undefined : this.recordAt(index);
  }

  byClientUserId(clientUserId: string): DirectoryRecord | undefined {
    const index = this.fileByClientId.get(clientUserId) ?? this.generatedByClientId(clientUserId);
    return index === undefined || this.deletions.has(index) ? undefined : this.recordAt(index);
  }

  /** Internal index of the live user at `position`, as listing would see it. */
  indexAt(position: number): number | undefined {
    return position >= 0 && position < this.size ? this.deletions.indexAt(position) : undefined;
  }

  page(offset: number, limit: number): DirectoryRecord[] {
    const out: DirectoryRecord[] = [];
    for (const index of this.liveIndexes(offset)) {
      if (out.length >= limit) break;
      out.push(this.recordAt(index));
    }
    return out;
  }

  /** The `users` array of a list page as JSON text. */
  pageJson(offset: number, limit: number): string {
    const out = new ByteBuilder();
    this.writePage(offset, limit, out);
    return out.toBuffer().toString();
  }

  /** Writes the `users` array of a list page into `out`: the hot path of the stand-in. */
  writePage(offset: number, limit: number, out: ByteBuilder): void {
    let written = 0;
    out.append('[');
    for (const index of this.liveIndexes(offset)) {
      if (written >= limit) break;
      out.append(written++ === 0 ? this.jsonAt(index) : `,${this.jsonAt(index)}`);
    }
    out.append(']');
  }

  /** The same page in another order of the listing (./listing-order.ts): a service whose order changed between pages. */
  writePageInOrder(offset: number, limit: number, orderKey: number, out: ByteBuilder): void {
    const n = this.size;
    const order = listingOrder(n, orderKey);
    let written = 0;
    out.append('[');
    for (let position = Math.max(0, offset); position < n && written < limit; position++) {
      const index = this.deletions.indexAt(order(position));
      out.append(written++ === 0 ? this.jsonAt(index) : `,${this.jsonAt(index)}`);
    }
    out.append(']');
  }

  /** Every live record, in listing order. */
  *records(): Generator<DirectoryRecord> {
    for (const index of this.liveIndexes(0)) yield this.recordAt(index);
  }

  /** Every live user_id, in listing order, without building records: for comparing a big mirror. */
  *userIds(): Generator<string | undefined> {
    for (const index of this.liveIndexes(0)) {
      const fromFile = this.file[index];
      yield fromFile === undefined ? userIdFor(this.keys, index) : stringField(fromFile, 'user_id');
    }
  }

  private liveIndexes(offset: number): Iterable<number> {
    return offset >= this.size ? [] : this.deletions.liveFrom(offset, this.universe);
  }

  private recordAt(index: number): DirectoryRecord {
    const base = this.file[index] ?? generateUser(this.keys, index);
    return reviseUser(base, index, this.revisions.get(index) ?? UNREVISED, this.keys.today);
  }

  /** Unrevised generated users skip the object entirely. */
  private jsonAt(index: number): string {
    if (index >= this.file.length && !this.revisions.has(index)) return generateUserJson(this.keys, index);
    return JSON.stringify(this.recordAt(index));
  }

  private liveIndex(ref: UserRef): number | undefined {
    const index = this.knownIndex(ref);
    return index === undefined || this.deletions.has(index) ? undefined : index;
  }

  /** The internal index of a user of this directory, live or deleted. */
  private knownIndex(ref: UserRef): number | undefined {
    const index = typeof ref === 'number' ? ref : (this.fileByUserId.get(ref) ?? this.generatedByUserId(ref));
    return index === undefined || !Number.isInteger(index) || index < 0 || index >= this.universe ? undefined : index;
  }

  private generatedByUserId(userId: string): number | undefined {
    const index = indexFromUserId(this.keys, userId.toLowerCase());
    return this.isGenerated(index) && userIdFor(this.keys, index) === userId.toLowerCase() ? index : undefined;
  }

  private generatedByClientId(clientUserId: string): number | undefined {
    const index = indexFromClientUserId(this.keys, clientUserId);
    return this.isGenerated(index) && clientUserIdFor(this.keys, index) === clientUserId ? index : undefined;
  }

  private isGenerated(index: number | undefined): index is number {
    return index !== undefined && index >= this.file.length && index < this.universe;
  }
}

/** File records are served as-is, so their ids may be missing or not strings. */
function stringField(record: JsonRecord, name: string): string | undefined {
  const value = record[name];
  return typeof value === 'string' ? value : undefined;
}
