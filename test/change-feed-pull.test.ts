/**
 * Pulling the change feed: `user-mirror changes` (the built CLI, a child
 * process) and the replica's GET /mirror/v1/changes, over a mirror synced
 * from the stand-in with churn between runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeEventSchema } from '../db/change-event.js';
import { ChangeFeed } from '../db/change-feed.js';
import { openMirror } from '../db/open.js';
import { requireBuiltCli, startCli } from './support/cli-process.js';
import { createReplicaRig, type ReplicaRig } from './support/replica-rig.js';

requireBuiltCli();

let rig: ReplicaRig;

beforeAll(async () => {
  rig = await createReplicaRig({ users: 1_200 });
  const { sync } = rig;
  await sync.sync();
  for (let run = 0; run < 3; run++) {
    const ids = sync.db
      .prepare('SELECT user_id FROM active_users ORDER BY user_id LIMIT 40 OFFSET ?')
      .pluck()
      .all(run * 40) as string[];
    sync.standIn.directory.delete(ids.slice(0, 5));
    for (const id of ids.slice(5, 25)) sync.standIn.directory.update(id);
    sync.standIn.directory.add(10);
    await sync.sync();
  }
});

afterAll(async () => {
  await rig?.close();
});

/** Every event held, from the mirror itself: what the surfaces must print. */
function expected(): string[] {
  const feed = new ChangeFeed(rig.sync.db);
  const page = feed.page(feed.bounds().prunedThrough, 1_000_000);
  if (page.gone) throw new Error('gone');
  return page.events.map((e) => e.body);
}

async function cli(args: string[], extra: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  const p = startCli(['changes', ...args], rig.sync.env(extra));
  const code = await p.exited(30_000);
  return { code, out: p.stdout(), err: p.stderr() };
}

describe('user-mirror changes', () => {
  it('--json prints every event as one JSON line, with its cursor, exactly as stored', async () => {
    const all = expected();
    expect(all.length).toBeGreaterThan(3 * 25);
    const r = await cli(['--json']);
    expect(r.code).toBe(0);
    expect(r.out.trimEnd().split('\n')).toEqual(all);
    for (const line of r.out.trimEnd().split('\n')) ChangeEventSchema.parse(JSON.parse(line));
  });

  it('--after and --limit page by cursor', async () => {
    const all = expected();
    const r = await cli(['--json', '--after', '10', '--limit', '7']);
    expect(r.out.trimEnd().split('\n')).toEqual(all.slice(10, 17));
    const cursors = r.out
      .trimEnd()
      .split('\n')
      .map((l) => (JSON.parse(l) as { cursor: number }).cursor);
    expect(cursors).toEqual([11, 12, 13, 14, 15, 16, 17]);
  });

  it('prints a line per event for a person', async () => {
    const r = await cli(['--limit', '3']);
    expect(r.code).toBe(0);
    const lines = r.out.trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(/^ {2}CURSOR {2}TIMESTAMP +TYPE +CLIENT_USER_ID +USER_ID +DETAIL$/);
    // The type column starts where its name does.
    expect(lines[1]?.indexOf('mirror.baseline')).toBe(lines[0]?.indexOf('TYPE'));
    expect(lines[1]).toMatch(/^\s+1\s+\S+Z\s+mirror\.baseline\s+-\s+-\s+1200 users$/);
  });

  it('lines every column up under its name, whatever the client_user_id', async () => {
    const r = await cli(['--limit', '60']);
    expect(r.code).toBe(0);
    const [header = '', ...rows] = r.out.trimEnd().split('\n');
    const starts = ['TIMESTAMP', 'TYPE', 'CLIENT_USER_ID', 'USER_ID', 'DETAIL'].map((name) => header.indexOf(` ${name}`) + 1);
    const withUsers = rows.filter((l) => !l.includes('mirror.baseline'));
    expect(withUsers.length).toBeGreaterThan(10);
    for (const l of withUsers) {
      // Each column begins at its name's position, after the two spaces that end the one before.
      for (const at of starts.slice(0, 4)) expect(l.slice(at - 2, at), l).toBe('  ');
      for (const at of starts.slice(0, 4)) expect(l[at], l).not.toBe(' ');
      expect(l.slice(starts[3] ?? 0, (starts[3] ?? 0) + 36), l).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it('--follow prints events published while it runs, then exits 0 on SIGTERM', async () => {
    const before = expected().length;
    const p = startCli(['changes', '--json', '--follow', '--after', String(before)], rig.sync.env());
    const ids = rig.sync.db.prepare('SELECT user_id FROM active_users ORDER BY user_id DESC LIMIT 3').pluck().all() as string[];
    for (const id of ids) rig.sync.standIn.directory.update(id);
    await rig.sync.sync();
    const last = await p.line(new RegExp(`"cursor":${before + 3},`), 15_000);
    expect(JSON.parse(last)).toMatchObject({ type: 'user.updated' });
    p.child.kill('SIGTERM');
    expect(await p.exited(10_000)).toBe(0);
    expect(p.stdout().trimEnd().split('\n')).toEqual(expected().slice(before));
  });

  it('says which cursor is still held when asked after one retention dropped (exit 1)', async () => {
    const db = openMirror(rig.sync.dbPath);
    try {
      new ChangeFeed(db).prune('9999-01-01T00:00:00.000Z', 5);
    } finally {
      db.close();
    }
    const r = await cli(['--after', '2']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/cursor 2 is older than the feed's retention .* oldest cursor still held is 5 \(--after 5\)/);
    const from = await cli(['--json', '--limit', '1']);
    expect(JSON.parse(from.out)).toMatchObject({ cursor: 6 });
  });

  it('refuses a bad cursor as a usage error naming the flag (exit 2)', async () => {
    const r = await cli(['--after', 'abc']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--after: must be a cursor/);
  });
});

describe('GET /mirror/v1/changes on the replica', () => {
  it('pages the feed by cursor behind the replica key: {events, next}', async () => {
    const all = expected().map((b) => JSON.parse(b) as { cursor: number });
    const first = all[0]?.cursor ?? 0;
    const seen: unknown[] = [];
    let after = first - 1;
    for (;;) {
      const reply = await rig.get(`/mirror/v1/changes?after=${after}&limit=40`);
      expect(reply.status).toBe(200);
      const body = JSON.parse(reply.text) as { events: { cursor: number }[]; next: number };
      if (body.events.length === 0) {
        expect(body.next).toBe(after);
        break;
      }
      seen.push(...body.events);
      after = body.next;
    }
    expect(seen).toEqual(all);
  });

  it('answers 410 with the oldest cursor still held for a cursor behind retention', async () => {
    const reply = await rig.get('/mirror/v1/changes?after=1');
    expect(reply.status).toBe(410);
    expect(JSON.parse(reply.text)).toMatchObject({ oldest: 5 });
  });

  it('refuses a request without the key (401) and a bad limit (422, FastAPI shape)', async () => {
    expect((await rig.get('/mirror/v1/changes', {})).status).toBe(401);
    const bad = await rig.get('/mirror/v1/changes?limit=5000');
    expect(bad.status).toBe(422);
    expect(JSON.parse(bad.text)).toMatchObject({ detail: [{ loc: ['query', 'limit'], type: 'less_than_equal' }] });
  });
});
