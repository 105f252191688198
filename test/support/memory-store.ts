/**
 * A MirrorStore in memory, for the engine's decision tests: what a run
 * wrote, deleted and published, with no SQLite. It keeps the contract the
 * SQLite store keeps (db/mirror-store.ts): nothing is visible before
 * publish, an unpublished run leaves the mirror as it was, one change per
 * user and run (state before the run against state after), one active user
 * per (team_id, client_user_id), the newer record winning. Whether the
 * SQLite store keeps it is tested against SQLite (test/mirror-store.test.ts).
 */
import type { RunFieldWarning } from '../../db/schema-drift.js';
import type { MirrorStore, PublishDeletions, PublishResult } from '../../db/mirror-store.js';
import type { FinishRunInput } from '../../db/sync-runs.js';
import { IdentityConflicts } from '../../db/identity-conflicts.js';
import type { PriorRow, UserWrite } from '../../db/user-writes.js';

export interface MemoryUser {
  userId: string;
  teamId: string;
  clientUserId: string;
  contentHash: string;
  rawJson: string;
  deleted: boolean;
}

export interface MemoryRun {
  id: number;
  published: boolean;
  finished?: FinishRunInput;
}

export class MemoryMirrorStore implements MirrorStore {
  /** The published mirror. */
  users = new Map<string, MemoryUser>();
  readonly runs: MemoryRun[] = [];
  /** Every listing handed to writeUsers, over all runs: what reached the store. */
  readonly written: UserWrite[] = [];
  /** `firstSync`: the run began on an empty mirror, so its repeats are counted by publish, as db/first-sync-load.ts does. */
  private open:
    | {
        id: number;
        working: Map<string, MemoryUser>;
        firstSync: boolean;
        repeats: number;
        written: Set<string>;
        conflicts: IdentityConflicts;
      }
    | undefined;

  lastListedTotal(): number | undefined {
    return this.runs.some((r) => r.published) ? this.users.size : undefined;
  }

  recordRun(): number {
    const id = this.runs.length + 1;
    this.runs.push({ id, published: false });
    return id;
  }

  beginRun(_totalAtStart?: number, recorded?: number): number {
    const id = recorded ?? this.recordRun();
    this.open = {
      id,
      working: clone(this.users),
      firstSync: this.users.size === 0,
      repeats: 0,
      written: new Set(),
      conflicts: new IdentityConflicts(),
    };
    return id;
  }

  activeUsers(): Iterable<readonly [string, string]> {
    return [...this.users.values()]
      .filter((u) => !u.deleted)
      .map((u) => [u.userId, u.contentHash] as const)
      .sort((a, b) => (a[0] < b[0] ? -1 : 1));
  }

  loadsEmptyMirror(): boolean {
    return this.open?.firstSync ?? false;
  }

  allUsers(): Iterable<readonly [string, string]> {
    return [...this.users.values()].map((u) => [u.userId, u.contentHash] as const).sort((a, b) => (a[0] < b[0] ? -1 : 1));
  }

  firstSyncUserIds(): Iterable<string> {
    return this.open?.firstSync === true ? [...this.open.working.keys()] : [];
  }

  contentHashOf(userId: string): string | undefined {
    return this.open?.working.get(userId)?.contentHash ?? this.users.get(userId)?.contentHash;
  }

  clientIdsOf(userIds: readonly string[]): Array<{ user_id: string; client_user_id: string }> {
    return userIds.flatMap((id) => {
      const u = this.users.get(id);
      return u === undefined ? [] : [{ user_id: id, client_user_id: u.clientUserId }];
    });
  }

  writeUsers(runId: number, writes: Iterable<UserWrite>, written?: (write: UserWrite, prior: PriorRow | undefined) => void): void {
    const open = this.openRun(runId);
    const { working } = open;
    for (const w of writes) {
      this.written.push(w);
      const { user, rawJson } = w.record;
      const held = working.get(user.user_id);
      const prior = held === undefined ? undefined : { hash: held.contentHash, clientUserId: held.clientUserId };
      if (open.firstSync && prior !== undefined) open.repeats++;
      for (const other of working.values()) {
        const sameKey = other.teamId === user.team_id && other.clientUserId === user.client_user_id;
        if (sameKey && other.userId !== user.user_id && !other.deleted) {
          other.deleted = true;
          // Only a holder this run wrote counts as listed in it, as in the SQLite store.
          if (open.written.has(other.userId)) {
            open.conflicts.add({
              kind: 'client_user_id',
              teamId: user.team_id,
              clientUserId: user.client_user_id,
              earlier: other.userId,
              later: user.user_id,
            });
          }
        }
      }
      open.written.add(user.user_id);
      working.set(user.user_id, {
        userId: user.user_id,
        teamId: user.team_id,
        clientUserId: user.client_user_id,
        contentHash: w.digest,
        rawJson,
        deleted: false,
      });
      // As the SQLite store: a first sync's earlier rows are settled at the publish, not reported.
      written?.(w, open.firstSync ? undefined : prior);
    }
  }

  publish(runId: number, opts: PublishDeletions): PublishResult {
    const { working, repeats, conflicts } = this.openRun(runId);
    let swept = 0;
    for (const id of opts.deletions) {
      const u = working.get(id);
      if (u !== undefined && !u.deleted) {
        u.deleted = true;
        swept++;
      }
    }
    const counts = { created: 0, updated: 0, deleted: 0 };
    for (const [id, after] of working) {
      const before = this.users.get(id);
      const wasActive = before !== undefined && !before.deleted;
      if (!wasActive && !after.deleted) counts.created++;
      else if (wasActive && after.deleted) counts.deleted++;
      else if (wasActive && before.contentHash !== after.contentHash) counts.updated++;
    }
    this.users = working;
    this.open = undefined;
    const run = this.runs[runId - 1];
    if (run !== undefined) run.published = true;
    return { ...counts, superseded: counts.deleted - swept, repeats, conflicts: conflicts.snapshot() };
  }

  /** Pairs met first, as the SQLite store decides them: those not in an earlier finished run. */
  finishRun(runId: number, result: FinishRunInput): RunFieldWarning[] {
    if (this.open?.id === runId) this.open = undefined;
    const run = this.runs[runId - 1];
    if (run !== undefined) run.finished = result;
    if (result.status === 'failed') return [];
    const fresh = (result.fieldWarnings ?? []).filter((w) => !this.driftSeen.has(`${w.field}\t${w.rule}`));
    for (const w of fresh) this.driftSeen.add(`${w.field}\t${w.rule}`);
    return fresh;
  }

  private readonly driftSeen = new Set<string>();

  /** Active users as client_user_id → user_id, for comparisons. */
  activeByClientId(): Map<string, string> {
    const out = new Map<string, string>();
    for (const u of this.users.values()) if (!u.deleted) out.set(u.clientUserId, u.userId);
    return out;
  }

  private openRun(runId: number): NonNullable<MemoryMirrorStore['open']> {
    if (this.open?.id !== runId) throw new Error(`run ${runId} is not open`);
    return this.open;
  }
}

function clone(users: Map<string, MemoryUser>): Map<string, MemoryUser> {
  return new Map([...users].map(([id, u]) => [id, { ...u }]));
}
