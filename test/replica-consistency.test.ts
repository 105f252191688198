/**
 * One snapshot per answer (the replica reads one per event-loop turn): while
 * a `sync --once` child publishes an update to every user, readers of the
 * replica (in this process, on its own readonly connection) page through the
 * mirror and resolve users over and over. Every page and every record must
 * come wholly from the run before or wholly from the run after, and say which
 * in X-Mirror-Run-Id. A turn whose read fails still ends. Needs
 * `npm run build` first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror } from '../db/open.js';
import { ReplicaReader } from '../db/replica-reader.js';
import { UserSchema } from '../src/service/schemas.js';
import { requireBuiltCli, startCli } from './support/cli-process.js';
import { createReplicaRig, type ReplicaRig } from './support/replica-rig.js';
import { createSyncRig, directoryView, type SyncRig } from './support/sync-rig.js';
import { pageOf } from './support/mirror-fixtures.js';

const USERS = 10_000;
const PAGE = 500;
const READERS = 3;

type Version = 'before' | 'after' | 'neither';

interface SeenPage {
  offset: number;
  runId: string;
  versions: Set<Version>;
}

const normal = (json: string) => JSON.stringify(JSON.parse(json));

describe('a reader while a sync publishes', () => {
  let rig: ReplicaRig;
  beforeAll(async () => {
    requireBuiltCli('src/commands/sync.js');
    rig = await createReplicaRig({ users: USERS, seed: 5 });
    expect((await rig.sync.sync()).status).toBe('succeeded');
  });
  afterAll(() => rig?.close());

  it('never sees a page that mixes two runs', async () => {
    const firstRun = String(rig.sync.db.prepare('SELECT max(id) FROM sync_runs').pluck().get());
    const before = new Map<string, string>();
    for (const [id, v] of directoryView(rig.sync.standIn)) before.set(id, normal(v.raw));
    for (let i = 0; i < USERS; i++) rig.sync.standIn.directory.update(i);
    const after = new Map<string, string>();
    for (const [id, v] of directoryView(rig.sync.standIn)) after.set(id, normal(v.raw));

    const seen: SeenPage[] = [];
    let stop = false;
    const readPage = async (offset: number) => {
      const res = await rig.get(`/v2/user?offset=${offset}&limit=${PAGE}`);
      expect(res.status).toBe(200);
      const users = (JSON.parse(res.text) as { users: Array<{ user_id: string }> }).users;
      const versions = new Set<Version>(
        users.map((u) => {
          const text = JSON.stringify(u);
          if (before.get(u.user_id) === text) return 'before';
          return after.get(u.user_id) === text ? 'after' : 'neither';
        }),
      );
      seen.push({ offset, runId: String(res.headers['x-mirror-run-id']), versions });
    };
    const reader = async (start: number) => {
      for (let round = 0; !stop || round < 1; round++) {
        for (let offset = start * PAGE; offset < USERS; offset += PAGE * READERS) await readPage(offset);
      }
    };
    // Resolves too: each answer's record and its X-Mirror-Run-Id come from one snapshot.
    const clientIds = [...after.values()].map((raw) => (JSON.parse(raw) as { client_user_id: string }).client_user_id);
    const resolved: Array<{ runId: string; version: Version }> = [];
    const resolver = async (start: number) => {
      for (let i = start; !stop; i += 7) {
        const res = await rig.get(`/v2/user/resolve/${encodeURIComponent(clientIds[i % clientIds.length] ?? '')}`);
        expect(res.status).toBe(200);
        const text = normal(res.text);
        const userId = (JSON.parse(text) as { user_id: string }).user_id;
        const version: Version = before.get(userId) === text ? 'before' : after.get(userId) === text ? 'after' : 'neither';
        resolved.push({ runId: String(res.headers['x-mirror-run-id']), version });
      }
    };
    const readers = [...Array.from({ length: READERS }, (_, i) => reader(i)), resolver(0), resolver(3)];
    // The readers stop whatever the sync does: none may still be asking once afterAll closes the replica.
    let code: number | null;
    const child = startCli(['sync', '--once'], rig.sync.env({ LOG_LEVEL: 'warn' }));
    try {
      code = await child.exited(300_000);
    } finally {
      stop = true;
      await Promise.allSettled(readers);
    }
    expect(code, child.stderr()).toBe(0);
    await Promise.all(readers);
    // One more round after the run, so the published state has been read.
    for (let offset = 0; offset < USERS; offset += PAGE) await readPage(offset);
    stop = false;
    const lastResolves = resolver(1);
    await new Promise((resolve) => setTimeout(resolve, 100));
    stop = true;
    await lastResolves;

    const secondRun = String(rig.sync.db.prepare('SELECT max(id) FROM sync_runs').pluck().get());
    expect(secondRun).not.toBe(firstRun);
    const mixed = seen.filter((p) => p.versions.size !== 1 || p.versions.has('neither'));
    expect(mixed.map((p) => ({ offset: p.offset, versions: [...p.versions] }))).toEqual([]);
    for (const p of seen) expect(p.runId).toBe(p.versions.has('before') ? firstRun : secondRun);
    expect(seen.some((p) => p.versions.has('before'))).toBe(true);
    expect(seen.some((p) => p.versions.has('after'))).toBe(true);
    expect(resolved.filter((r) => r.version === 'neither')).toEqual([]);
    for (const r of resolved) expect(r.runId).toBe(r.version === 'before' ? firstRun : secondRun);
    expect(resolved.some((r) => r.version === 'before')).toBe(true);
    expect(resolved.some((r) => r.version === 'after')).toBe(true);
  });
});

describe('a reader on its own connection', () => {
  let rig: SyncRig;
  beforeAll(async () => {
    rig = await createSyncRig({ users: 2_000, seed: 9 });
    expect((await rig.sync()).status).toBe('succeeded');
  });
  afterAll(() => rig?.close());

  it('does not see a publish committed in the middle of a page read, and sees it whole in the next', () => {
    const oldRun = Number(rig.db.prepare('SELECT max(id) FROM sync_runs').pluck().get());
    const directory = rig.standIn.directory;
    const before = new Map([...directoryView(rig.standIn)].map(([id, v]) => [id, normal(v.raw)]));
    for (let i = 0; i < directory.size; i++) directory.update(i);
    directory.add(1);
    // A run staged like the sync stages it, published from inside the reader's transaction.
    const runId = rig.writer.beginRun();
    const records = [...directory.records()].map((r) => ({ user: UserSchema.parse(r), rawJson: JSON.stringify(r), warnings: [] }));
    rig.writer.stagePage(runId, pageOf(records), 0);
    let published = false;
    const reader = new ReplicaReader(openMirror(rig.dbPath, { readonly: true }), {
      midRead: () => {
        if (published) return;
        published = true;
        rig.writer.publish(runId, { deletionsChecked: false, deletions: [] });
        rig.writer.finishRun(runId, { status: 'succeeded', pages: 1, usersSeen: records.length });
      },
    });
    try {
      const during = reader.page(1_500, 500);
      expect(published).toBe(true);
      expect(during).toMatchObject({ runId: oldRun, total: 2_000 });
      expect(during.users).toHaveLength(500);
      for (const raw of during.users) {
        const user = JSON.parse(raw.toString()) as { user_id: string };
        expect(normal(raw.toString())).toBe(before.get(user.user_id));
      }
      const next = reader.page(1_500, 501);
      expect(next).toMatchObject({ runId, total: 2_001 });
      expect(next.users).toHaveLength(501);
      const after = new Map([...directoryView(rig.standIn)].map(([id, v]) => [id, normal(v.raw)]));
      for (const raw of next.users) {
        const user = JSON.parse(raw.toString()) as { user_id: string };
        expect(normal(raw.toString())).toBe(after.get(user.user_id));
      }
    } finally {
      reader.close();
    }
  });

  it('a turn whose first read fails still ends: the next turn reads a fresh snapshot', async () => {
    const runId = Number(rig.db.prepare('SELECT max(id) FROM sync_runs').pluck().get());
    const clientUserId = String(rig.db.prepare('SELECT client_user_id FROM users WHERE deleted_at IS NULL LIMIT 1').pluck().get());
    const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
    const reader = new ReplicaReader(openMirror(rig.dbPath, { readonly: true }));
    try {
      expect(reader.resolve(clientUserId)).toMatchObject({ runId });
      await nextTurn();
      // The freshness read fails (its table is gone for a moment) after the turn's BEGIN.
      rig.db.exec('ALTER TABLE sync_runs RENAME TO sync_runs_away');
      expect(() => reader.resolve(clientUserId)).toThrow(/sync_runs/);
      rig.db.exec('ALTER TABLE sync_runs_away RENAME TO sync_runs');
      await nextTurn();
      const answer = reader.resolve(clientUserId);
      expect(answer.runId).toBe(runId);
      expect(answer.raw?.toString()).toContain(clientUserId);
    } finally {
      reader.close();
    }
  });
});
